"""The README's two set-up commands are the ones CI runs, and they install what the code needs."""
from __future__ import annotations

import importlib.util
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("readme_command", ROOT / ".ci" / "readme_command.py")
readme_command = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_command)


def test_readme_holds_the_two_commands_torch_first():
    main = readme_command.readme_command("main")
    test = readme_command.readme_command("test")
    # torch first, pinned to the CPU build on disk; a looser pin pulls GBs of CUDA packages.
    for command in (main, test):
        assert command.startswith("pip install torch==2.13.0 && pip install -e ")
    assert main.endswith("&& gavel testnet")
    assert re.search(r'pip install -e "\.\[test\]" && python -m pytest\b', test)


def test_ci_reads_its_commands_from_the_readme_and_builds_its_own_environment():
    run = (ROOT / ".ci" / "run").read_text()
    assert "readme_command.py main" in run and "readme_command.py test" in run
    assert 'eval "$main_cmd' in run and 'eval "$test_cmd"' in run
    assert "python3 -m venv" in run and "mktemp -d" in run
    # No install command of its own that the README lacks (npm's toolchain aside).
    assert not re.search(r"^\s*pip3? install", run, re.M)


@pytest.mark.parametrize("text, message", [
    ("no marker at all", "found 0"),
    ("<!-- setup:main -->\n```bash\npip install a\npip install b\n```\n", "one command line"),
])
def test_a_readme_that_lost_its_command_stops_ci(text, message):
    with pytest.raises(SystemExit, match=message):
        readme_command.readme_command("main", text)


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return reqs + [Requirement(r) for r in project["optional-dependencies"]["test"]]


def test_every_requirement_is_met_by_what_is_installed():
    # What `pip check` says of the project, as a test: the README's install gave every
    # requirement a version inside its specifier (pre-releases included where the
    # specifier names one, as eth-tester's and py-evm's must: they publish nothing else).
    for req in _requirements():
        version = metadata.version(req.name)
        assert req.specifier.contains(version, prereleases=True), f"{req.name} {version} not in {req.specifier}"


def test_prerelease_only_packages_name_a_prerelease():
    # pip skips pre-releases unless the specifier names one; these two publish no final release.
    by_name = {r.name: r for r in _requirements()}
    for name in ("eth-tester", "py-evm"):
        assert any(Version(s.version).is_prerelease for s in by_name[name].specifier), by_name[name]
