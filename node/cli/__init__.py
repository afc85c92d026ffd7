"""The `gavel` command: a table of sub-commands, each imported only when it runs.

Importing torch, libp2p or web3 costs a second each, so `gavel --help` must not pay
for them: every entry names the module and function that implement it, and each such
function takes the remaining argv and returns an exit status.

Bad input gets one line on stderr and a non-zero status, never a traceback: each
command reports its own errors (2 for bad usage), and what still escapes it here is
said in one line too: Ctrl-C (status 130) and a file-system error (status 1).

The package holds the command-line front ends and offline tools; the node itself is
the rest of `node`:

  common       exit statuses, one-line errors, durations (shared by the commands)
  node         gavel node init|start, gavel status
  submit       gavel submit: a light client for one job
  train        gavel train, gavel replay (roundlog: the same for rounding-log jobs)
  dispute_sim  gavel dispute-sim: both parties and the referee in one process
               (roundlog_dispute: its game for rounding-log jobs)
  testnet      gavel testnet: a network on loopback (node.testnet runs it)
"""
from __future__ import annotations

import importlib
import os
import sys

from .common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, describe_os_error

# name -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "selfcheck": ("repops_cupy.selfcheck", "main", "check that every operator gives identical bits across CPU configurations (and the GPU)"),
    "node": ("node.cli.node", "node_main", "create a node's data directory (init) or run the node (start)"),
    "status": ("node.cli.node", "status_main", "is the node of a data directory running? ping it"),
    "train": ("node.cli.train", "train_main", "train a job (TOML) with reproducible operators; prints the trace root"),
    "replay": ("node.cli.train", "replay_main", "recompute one checkpoint interval of a trained job and compare with its trace"),
    "dispute-sim": ("node.cli.dispute_sim", "dispute_sim_main", "play the dispute game between an honest and a cheating party on a job, in one process"),
    "submit": ("node.cli.submit", "submit_main", "submit a training job to the network (escrow, providers, checked result, disputes, settlement)"),
    "testnet": ("node.cli.testnet", "testnet_main", "run a network of nodes on loopback, some cheating on purpose, and report what happened"),
    "verify-verdict": ("node.cli.verify_verdict", "verify_verdict_main", "recompute a referee's ruling on a node claim from its transcript (and the chain); exit 0 if it holds"),
}


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: gavel COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, _, help_) in COMMANDS.items()]
    lines += ["", "Run 'gavel COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"gavel: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    try:
        entry = getattr(importlib.import_module(module), func)
        return int(entry(rest) or 0)
    except KeyboardInterrupt:
        newline = "\n" if sys.stderr.isatty() else ""  # after the terminal's "^C", on a line of its own
        print(f"{newline}gavel {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of our output went away (`gavel ... | head`): stop quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as error:
        print(f"gavel {name}: {describe_os_error(error)}", file=sys.stderr)
        return 1
