"""``gavel submit``: hand a training job to the network and, with ``--wait``, see it through.

    gavel submit JOB.toml --data-dir CLIENT_DIR --bootstrap ADDR [--chain URL]
                 [--providers N] [--price ETHER] [--stake ETHER] [--wait] [--json]

The command runs a client node on ``--data-dir`` (created on first use, with the client
role): it signs the job's terms, escrows ``--price`` on the settlement contract, finds
providers (their gossip adverts, or ``--provider ADDR``) and hands them the job. With
``--wait`` it stays to receive the results, check them against the commitments, referee
any dispute (recording each verdict on chain) and settle the job once its challenge
window closed; it then prints the result directory, the providers' outcomes and the
verdicts (``--json``: one JSON object on the last line). Without ``--wait`` it stops once
the providers took the job; ``gavel node start --data-dir CLIENT_DIR --role client``
picks the job up where it stands.

Exit status: 0 a checked result (or, without --wait, the job handed over); 1 no result or
an error; 2 bad usage; 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

import trio

from .errors import NodeError

EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel submit", description="submit a training job to the gavel network")
    p.add_argument("job", type=Path, help="the job file (TOML)")
    p.add_argument("--data-dir", required=True, type=Path, help="the client node's data directory (created if missing)")
    p.add_argument("--bootstrap", action="append", default=[], help="a peer to join the network through (repeatable)")
    p.add_argument("--provider", action="append", default=[], help="offer the job to this provider first (repeatable)")
    p.add_argument("--chain", help="settlement chain: 'embedded' or a JSON-RPC URL (default: the data directory's)")
    p.add_argument("--contract", help="settlement contract address (default: the chain's dev deployment)")
    p.add_argument("--listen", help="libp2p address to listen on")
    p.add_argument("--providers", type=int, default=1, help="providers to train the job (default 1)")
    p.add_argument("--price", default="1", help="ether escrowed for the job, shared by its honest providers (default 1)")
    p.add_argument("--stake", default="1", help="ether each provider locks while it holds a seat (default 1)")
    p.add_argument("--accept-within", type=float, default=120, help="seconds providers have to take the job")
    p.add_argument("--commit-within", type=float, default=600, help="seconds after that to commit a result")
    p.add_argument("--challenge-within", type=float, default=120, help="seconds after that for challenges")
    p.add_argument("--move-timeout", type=float, default=60, help="seconds a dispute party has for one move")
    p.add_argument("--clock", type=float, default=600, help="seconds a dispute party has for all its moves")
    p.add_argument("--out", type=Path, help="result directory (default DATA_DIR/results/JOB_ID)")
    p.add_argument("--wait", action="store_true", help="stay until the job is settled and print its result")
    p.add_argument("--json", action="store_true", help="end with the result as one line of JSON")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                   help="level of the node's log on stderr (default warning)")
    return p


def submit_main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.providers < 1:
        parser.error("--providers must be at least 1")
    from .roles.chain import parse_ether
    from .roles.client import SubmitOptions

    try:
        options = SubmitOptions(
            providers=args.providers, price=parse_ether(args.price, "--price"), stake=parse_ether(args.stake, "--stake"),
            accept_within=args.accept_within, commit_within=args.commit_within,
            challenge_within=args.challenge_within, move_timeout=args.move_timeout, clock=args.clock,
            provider_addrs=list(args.provider), out=str(args.out.resolve()) if args.out else "",
        )
        if options.price <= 0 or options.stake <= 0:
            parser.error("--price and --stake must be positive")
        config, seed = _open(args)
    except NodeError as error:
        print(f"gavel submit: {error}", file=sys.stderr)
        return 1
    from .datadir import DataDirLock
    from .logs import configure_logging

    try:
        with DataDirLock(config):
            configure_logging(args.log_level, libp2p_level=config.libp2p_log_level, file=config.log_path)
            return trio.run(_run, config, seed, args, options)
    except NodeError as error:
        print(f"gavel submit: {error}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        from .node_cli import _leaves

        leaves = _leaves(group)
        if leaves and all(isinstance(e, NodeError) for e in leaves):
            print(f"gavel submit: {'; '.join(str(e) for e in leaves)}", file=sys.stderr)
            return 1
        raise


def _open(args: argparse.Namespace):
    from .config import CONFIG_FILE
    from .datadir import init_datadir, load_seed, open_datadir

    overrides = {k: v for k, v in (("chain", args.chain), ("contract", args.contract), ("listen", args.listen)) if v}
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


async def _run(config, seed: bytes, args: argparse.Namespace, options) -> int:
    from .roles.context import context_of
    from .runtime import Node

    interrupted = False
    code = 1
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
            await ctx.wait_chain()
            _say(f"settlement contract {ctx.chain.address} on {config.chain}, account {ctx.chain.account}")
            job_id = await client.submit(args.job.resolve(), options)
            cj = client.jobs[job_id]
            _say(f"job {job_id.hex()}: {cj.state}, {len(cj.record['seats'])} provider(s)")
            if cj.state != "handed":
                code = 1
            elif not args.wait:
                _say(f"to follow it: gavel node start --data-dir {config.data_dir} --role client")
                code = 0
            else:
                async with trio.open_nursery() as progress:
                    progress.start_soon(_report_progress, cj)
                    result = await client.wait(job_id)
                    progress.cancel_scope.cancel()
                code = _print_result(result, args.json)
            nursery.cancel_scope.cancel()
    return EXIT_INTERRUPTED if interrupted else code


async def _report_progress(cj) -> None:
    seen = cj.state
    while True:
        await cj.changed.wait()
        if cj.state != seen:
            seen = cj.state
            _say(f"job {cj.job_id.hex()}: {seen}")


def _print_result(result: dict, as_json: bool) -> int:
    _say(f"job {result.get('job')}: {result.get('status', result.get('state'))}")
    if result.get("result_dir"):
        _say(f"result: {result['result_dir']} (from provider {result['result_from'][:16]}, trace root {result['trace_root']})")
    else:
        _say("result: none (no provider delivered a result that checks)")
    for key, seat in result.get("providers", {}).items():
        _say(f"provider {key[:16]} ({seat['account']}): {seat['outcome']}")
    for v in result.get("verdicts", []):
        faults = "; ".join(f"{f['party'][:16]} {f['reason']}" for f in v["faults"]) or "no fault"
        _say(f"dispute {v['dispute'][:16]} (chain #{v['chain_dispute']}): {v['winner']} wins, {faults}; "
             f"{v['rounds']} rounds, step {v['step']} node {v['node']}{'' if v.get('recorded') else ', not on chain'}")
    if as_json:
        print(json.dumps(result, sort_keys=True), flush=True)
    return 0 if result.get("result_dir") else 1
