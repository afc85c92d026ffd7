"""``gavel submit``: hand a training job to the network and, with ``--wait``, see it through.

    gavel submit JOB.toml --data-dir CLIENT_DIR --bootstrap ADDR [--chain URL] [--settlement 1|2]
                 [--providers N] [--price ETHER] [--stake ETHER] [--wait [verified|settled]] [--json]

The command runs a client node on ``--data-dir`` (created on first use, with the client
role): it signs the job's terms, escrows ``--price`` on the settlement contract, finds
providers (their gossip adverts, or ``--provider ADDR``) and hands them the job. Without
``--wait`` it stops once the providers took the job; ``gavel node start --data-dir
CLIENT_DIR --role client`` picks the job up where it stands.

A job lives through three windows, fixed on chain when it is opened, each starting where
the one before ends: the *accept* window (providers take a seat), the *commit* window
(they train and commit a trace root) and the *challenge* window (auditors replay the job
and may dispute a root). The job settles, paying the honest providers, only after the
challenge window closed, however early the work was done: the windows' sum is how long
``--wait`` takes. By default the accept window is 30 s and the other two follow the job:
its steps times a per-step cost estimated from its operator graph, plus a margin, at
least 60 s each (`node.roles.client_job.default_windows`); ``--accept-within``,
``--commit-within`` and ``--challenge-within`` set them.

``--wait`` (``--wait settled``) stays until settlement: it receives the results, checks
them against the commitments, referees any dispute (recording each verdict on chain) and
settles the job; ``--wait verified`` stops as soon as a checked result is in hand, and
says how to keep refereeing and settling the job. While it waits it prints a line at
each phase (with the window that bounds it and its on-chain deadline) and a countdown
line every 20 s (on a terminal: one status line kept up to date), then the result
directory, the providers' outcomes and the verdicts (``--json``: one JSON object on the
last line).

A result is handed over (``result:``, ``result_dir`` in ``result.json``) only when its
provider's root stood on chain and the weights check against the signed commitment
(`node.roles.client_result`); a refunded job has none. An unfilled job is refunded before
the command exits (anyone may settle it once its acceptance deadline passed; if the chain
does not take the refund within UNFILLED_WAIT seconds the command says it leaves it to
the keepers, which every node runs).

Exit status (`exit_status`): 0 a checked result (finalized; or verified, with ``--wait
verified``), or without --wait the job handed over; 1 an error (no chain answering within
``--chain-timeout`` seconds, say); 2 bad usage; 3 refunded: no provider's root stood (each
slashed or never committed), no result; 4 unfilled: too few providers took a seat, the
price refunded; 5 no result otherwise (the job failed or was lost with its chain, or it
finalized without a result that checks reaching this client); 130 interrupted (a job
already opened goes on: the command says how to follow it).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import trio

from protocol.settings import JOB_SETTINGS

from ..errors import NodeError, leaves
from ..roles.chain import chain_failures
from .common import EXIT_INTERRUPTED, format_duration

PROGRESS_EVERY = 20.0  # seconds between two countdown lines when stdout is not a terminal
CHAIN_TIME_EVERY = 10.0  # seconds between two readings of the chain's clock
# An unfilled job's refund is one transaction, possible as soon as acceptance closed.
UNFILLED_WAIT = 60.0

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_REFUNDED, EXIT_UNFILLED, EXIT_NO_RESULT = 3, 4, 5
NO_RESULT = {  # why a job that ended has no result, by how it ended
    "refunded": "the job was refunded on chain: no provider's root stood (each slashed or never committed)",
    "unfilled": "too few providers took a seat; the price is refunded",
    "failed": "the job failed (never opened, or lost with the chain that held it)",
    "finalized": "no provider delivered a result that checks",
}

EPILOG = """\
windows: a job's accept, commit and challenge windows follow one another from submission,
are fixed on chain, and the job settles only after the challenge window closes. Defaults:
accept 30 s; commit and challenge each the job's estimated training time on a busy CPU plus
30 s, at least 60 s (scripts/jobs/mlp.toml: 30 + 74 + 74 s, so --wait takes about 3 minutes).

exit status: 0 a checked result (finalized; or verified, with --wait verified), or without
--wait the job handed over; 1 an error (such as no chain answering within --chain-timeout);
2 bad usage; 3 refunded (no provider's root stood: no result); 4 unfilled (too few
providers; the price refunded); 5 no result otherwise (failed, lost, or no result that
checks); 130 interrupted (a job already opened goes on: the command says how to follow it).
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel submit", description="submit a training job to the gavel network",
                                usage="gavel submit JOB.toml --data-dir DIR [options] (see --help)",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", type=Path, help="the job file (TOML)")
    p.add_argument("--data-dir", required=True, type=Path, help="the client node's data directory (created if missing)")
    p.add_argument("--bootstrap", action="append", default=[], help="a peer to join the network through (repeatable)")
    p.add_argument("--provider", action="append", default=[], help="offer the job to this provider first (repeatable)")
    p.add_argument("--chain", help="settlement chain: 'embedded' or a JSON-RPC URL (default: the data directory's)")
    p.add_argument("--chain-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="give up when the chain still fails to answer after this many seconds (default 5)")
    p.add_argument("--contract", help="settlement contract address (default: the chain's dev deployment)")
    p.add_argument("--listen", help="libp2p address to listen on")
    p.add_argument("--settlement", choices=("1", "2"),
                   help="settlement contract version the client plays (default: the data directory's, else 1)")
    p.add_argument("--step-cost-scale", type=float, default=1.0, metavar="FACTOR",
                   help="settlement 2: declare each training step FACTOR times the estimate's cost (providers on "
                        "slower or busier machines than the estimate's refuse terms they cannot meet; default 1)")
    p.add_argument("--providers", type=int, default=1, help="providers to train the job (default 1)")
    p.add_argument("--price", default="1", help="ether escrowed for the job, shared by its honest providers (default 1)")
    p.add_argument("--stake", default="1", help="ether each provider locks while it holds a seat (default 1)")
    for row in JOB_SETTINGS:  # the job's windows and dispute clocks, from the one table
        if row.who == "client":
            default = "" if row.default is None else f" (default {row.default:g})"
            p.add_argument(row.flag, type=float, metavar="SECONDS", help=f"seconds {row.meaning}{default}")
    p.add_argument("--out", type=Path, help="result directory (default DATA_DIR/results/JOB_ID)")
    p.add_argument("--wait", nargs="?", const="settled", choices=("verified", "settled"),
                   help="stay until the job is settled (the default) or only until its result is verified, "
                        "showing each phase with its deadline, and print the result")
    p.add_argument("--json", action="store_true", help="end with the result as one line of JSON")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                   help="level of the node's log on stderr (default warning)")
    return p


def submit_main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.providers < 1:
        parser.error("--providers must be at least 1")
    if not args.step_cost_scale >= 1.0:
        parser.error("--step-cost-scale must be at least 1")
    for flag in ("accept_within", "commit_within", "challenge_within", "move_timeout", "clock", "chain_timeout"):
        value = getattr(args, flag)
        if value is not None and not value > 0:
            parser.error(f"--{flag.replace('_', '-')} must be a positive number of seconds")
    from ..roles.chain import parse_ether
    from ..roles.client import SubmitOptions

    try:
        price, stake = parse_ether(args.price, "--price"), parse_ether(args.stake, "--stake")
    except NodeError as error:
        parser.error(str(error))
    if price <= 0 or stake <= 0:
        parser.error("--price and --stake must be positive")
    options = SubmitOptions(
        providers=args.providers, price=price, stake=stake, accept_within=args.accept_within,
        commit_within=args.commit_within, challenge_within=args.challenge_within, move_timeout=args.move_timeout,
        clock=args.clock, provider_addrs=list(args.provider), out=str(args.out.resolve()) if args.out else "",
        step_cost_scale=args.step_cost_scale,
    )
    try:
        config, seed = _open(args)
    except NodeError as error:
        print(f"gavel submit: {error}", file=sys.stderr)
        return 1
    from ..datadir import DataDirLock
    from ..logs import configure_logging

    try:
        with DataDirLock(config):
            configure_logging(args.log_level, libp2p_level=config.libp2p_log_level, file=config.log_path)
            return trio.run(_run, config, seed, args, options)
    except NodeError as error:
        print(f"gavel submit: {error}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        errors = leaves(group)
        if errors and all(isinstance(e, NodeError) for e in errors):
            print(f"gavel submit: {'; '.join(str(e) for e in errors)}", file=sys.stderr)
            return 1
        raise


def _open(args: argparse.Namespace):
    from ..config import CONFIG_FILE
    from ..datadir import init_datadir, load_seed, open_datadir

    overrides = {k: v for k, v in (("chain", args.chain), ("contract", args.contract), ("listen", args.listen),
                                   ("settlement", args.settlement)) if v}
    if args.bootstrap:
        overrides["bootstrap"] = list(args.bootstrap)
    if not (args.data_dir / CONFIG_FILE).exists():
        init_datadir(args.data_dir, {"roles": ["client"], **overrides})
    config = open_datadir(args.data_dir, overrides)
    if "client" not in config.roles:
        config = open_datadir(args.data_dir, {**overrides, "roles": [*config.roles, "client"]})
    return config, load_seed(config)


def _say(text: str) -> None:
    print(text, flush=True)


def follow_command(config, args: argparse.Namespace) -> str:
    """The command that runs this client on, to referee and settle its jobs."""
    parts = ["gavel node start --data-dir", str(config.data_dir), "--role client"]
    for flag, value in (("--chain", args.chain), ("--contract", args.contract), ("--settlement", args.settlement)):
        if value:
            parts += [flag, value]
    for addr in args.bootstrap:
        parts += ["--bootstrap", addr]
    return " ".join(parts)


async def _run(config, seed: bytes, args: argparse.Namespace, options) -> int:
    from ..roles.context import context_of
    from ..runtime import Node

    interrupted = False
    code = 1
    progress: Progress | None = None
    opened = None  # the job, once opened on chain
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                nonlocal interrupted
                async for _ in signals:
                    interrupted = True
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch_signals)
            node: Node = await nursery.start(Node(config, seed, take_lock=False).run)
            _say(f"client {node.peer_id} listening on {' '.join(node.host.listen_addrs)}")
            while (ctx := context_of(node)) is None or "client" not in ctx.roles:
                await trio.sleep(0.05)
            client = ctx.roles["client"]
            await ctx.wait_chain(args.chain_timeout)
            _say(f"settlement contract {ctx.chain.address} on {config.chain}, account {ctx.chain.account}")
            progress = Progress(ctx.chain, tty=sys.stdout.isatty())
            async with trio.open_nursery() as watchers:

                def on_open(cj) -> None:
                    nonlocal opened
                    opened = cj
                    watchers.start_soon(progress.follow, cj)

                job_id = await client.submit(args.job.resolve(), options, on_open=on_open)
                cj = client.jobs[job_id]
                progress.say(f"job {job_id.hex()}: {cj.state}, {len(cj.record['seats'])} provider(s)")
                if cj.state == "unfilled":
                    code = await _refund_unfilled(client, cj, args.json)
                elif cj.state != "handed":
                    code = EXIT_ERROR
                elif not args.wait:
                    progress.say(f"to follow it: {follow_command(config, args)}")
                    code = 0
                else:
                    result = await client.wait(job_id, args.wait)
                    await progress.show(cj)
                    watchers.cancel_scope.cancel()
                    progress.clear()
                    note = _still_open(cj, progress.now(), follow_command(config, args)) if cj.state == "verified" else ""
                    code = _print_result(result, args.json, note=note)
                watchers.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    if progress is not None:
        progress.clear()
    if interrupted and opened is not None and opened.state not in ("settled", "refunded", "failed", "lost"):
        print(f"gavel submit: interrupted; job {opened.job_id.hex()} stays open on chain ({opened.state}); "
              f"to follow it: {follow_command(config, args)}", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else code


class Progress:
    """Tells the user where a job stands: a line at each phase, with the window that bounds
    it, its on-chain deadline and the time left; then a countdown line every PROGRESS_EVERY
    seconds, or, on a terminal, one status line rewritten every second."""

    def __init__(self, chain, *, tty: bool) -> None:
        self.chain = chain
        self.tty = tty
        self.lead = 0.0  # seconds the chain's clock is ahead of ours (never behind: the client uses the later)
        self._read_at = -CHAIN_TIME_EVERY
        self._status = False  # a status line is on screen (tty)
        self._shown: dict[bytes, str] = {}  # the phase last shown, per job

    def now(self) -> float:
        """Chain time, as the client reckons deadlines: the later of the chain's clock and ours."""
        return time.time() + self.lead

    async def _read_chain_time(self) -> None:
        if time.monotonic() - self._read_at < CHAIN_TIME_EVERY:
            await trio.lowlevel.checkpoint()
            return
        self._read_at = time.monotonic()
        try:
            with trio.move_on_after(5):
                chain_now = await self.chain.run(self.chain.chain.now)
                self.lead = max(0.0, chain_now - time.time())
        except chain_failures():  # the countdown goes on with the last reading
            pass

    def clear(self) -> None:
        if self._status:
            sys.stdout.write("\r\x1b[K")
            sys.stdout.flush()
            self._status = False

    def say(self, text: str) -> None:
        self.clear()
        _say(text)

    def line(self, cj, phase, *, countdown: bool = False) -> str:
        head = f"job {cj.job_id.hex()[:12]}…: "
        if countdown:
            text = f"{head}{phase.name}, {phase.doing}"
        else:
            text = f"{head}{phase.name} — {phase.doing}"
        if phase.deadline:
            left = phase.deadline - self.now()
            when = time.strftime("%H:%M:%S UTC", time.gmtime(phase.deadline))
            if left > 0:
                text += f"; {phase.window} window closes in {format_duration(left)} (chain time {when})"
            else:
                text += f"; {phase.window} window closed {format_duration(-left)} ago (chain time {when})"
        return text

    async def show(self, cj) -> None:
        """The job's phase line now, if it moved on since the last one."""
        await self._read_chain_time()
        phase = cj.phase(self.now())
        if phase.name != self._shown.get(cj.job_id):
            self._shown[cj.job_id] = phase.name
            self.say(self.line(cj, phase))

    async def follow(self, cj) -> None:
        """Until cancelled: phase lines as the job moves on, countdowns in between."""
        last = time.monotonic()
        while True:
            await self.show(cj)
            if self.tty:
                text = self.line(cj, cj.phase(self.now()), countdown=True)
                sys.stdout.write("\r\x1b[K" + text[: _columns() - 1])
                sys.stdout.flush()
                self._status = True
            elif time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                self.say(self.line(cj, cj.phase(self.now()), countdown=True))
            with trio.move_on_after(1.0):
                await cj.changed.wait()
            if cj.done.is_set():
                await self.show(cj)


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


def _still_open(cj, now: float, command: str) -> str:
    challenge_by = cj.record["deadlines"]["challenge_by"]
    left = challenge_by - now
    when = time.strftime("%H:%M:%S UTC", time.gmtime(challenge_by))
    closes = f"closes in {format_duration(left)}" if left > 0 else f"closed {format_duration(-left)} ago"
    return (f"the job is not settled: its challenge window {closes} (chain time {when}); auditors may still "
            f"challenge a provider, and this client referees those disputes and settles the job (its price is "
            f"escrowed until then). To go on with it: {command}")


async def _refund_unfilled(client, cj, as_json: bool) -> int:
    """Stay until the unfilled job is refunded on chain (the client's job task settles it),
    or say that the keepers will."""
    with trio.move_on_after(UNFILLED_WAIT):
        return _print_result(await client.wait(cj.job_id), as_json)
    _say(f"job {cj.job_id.hex()}: unfilled; its refund is not on chain after {UNFILLED_WAIT:g} s: left to the "
         f"keepers (every node settles a job whose deadline passed), or run this client again")
    return EXIT_UNFILLED


def exit_status(result: dict) -> int:
    """The exit status for a job's summary: 0 with a checked result, else by how it ended."""
    if result.get("result_dir"):
        return EXIT_OK
    return {"refunded": EXIT_REFUNDED, "unfilled": EXIT_UNFILLED}.get(result.get("ended", ""), EXIT_NO_RESULT)


def _print_result(result: dict, as_json: bool, *, note: str = "") -> int:
    _say(f"job {result.get('job')}: {result.get('status', result.get('state'))}")
    if result.get("result_dir"):
        _say(f"result: {result['result_dir']} (from provider {result['result_from'][:16]}, trace root {result['trace_root']})")
    else:
        _say(f"no result: {NO_RESULT.get(result.get('ended', ''), NO_RESULT['finalized'])}")
    dropped = result.get("result_dropped")
    if dropped:
        _say(f"withdrawn: the result from provider {dropped['from'][:16]}: {dropped['why']}")
    for key, seat in result.get("providers", {}).items():
        _say(f"provider {key[:16]} ({seat['account']}): {seat['outcome']}")
    for v in result.get("verdicts", []):
        faults = "; ".join(f"{f['party'][:16]} {f['reason']}" for f in v["faults"]) or "no fault"
        _say(f"dispute {v['dispute'][:16]} (chain #{v['chain_dispute']}): {v['winner']} wins, {faults}; "
             f"{v['rounds']} rounds, step {v['step']} node {v['node']}{'' if v.get('recorded') else ', not on chain'}")
    if note:
        _say(note)
    if as_json:  # the last line
        print(json.dumps(result, sort_keys=True), flush=True)
    return exit_status(result)
