import subprocess
import sys

from node.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_exits_2(capsys):
    assert main(["no-such-command"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_help_does_not_import_heavy_packages():
    code = "import sys; from node.cli import main; main(['--help']); print(sorted(m for m in ('torch','libp2p','web3') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_every_command_entry_point_exists():
    import importlib

    for name, (module, func, _) in COMMANDS.items():
        assert callable(getattr(importlib.import_module(module), func)), name
