"""``gavel node init|start`` and ``gavel status``.

Exit statuses: 0 fine; 1 error; 2 bad usage; 3 (``status``) the node is not running.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import trio

from ..errors import NodeError, leaves

EXIT_NOT_RUNNING = 3


def _fail(message: str, code: int = 1) -> int:
    print(f"gavel: {message}", file=sys.stderr)
    return code


# -- gavel node init / start -------------------------------------------------------


def _node_parser() -> argparse.ArgumentParser:
    from ..config import add_setting_flags

    parser = argparse.ArgumentParser(prog="gavel node", description="create or run a gavel node")
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="create a data directory: config.toml, a key, a version file")
    init.add_argument("--data-dir", required=True, type=Path, help="the node's data directory")
    add_setting_flags(init)
    start = sub.add_parser("start", help="run the node until SIGINT or SIGTERM")
    start.add_argument("--data-dir", required=True, type=Path, help="the node's data directory")
    add_setting_flags(start)
    return parser


def node_main(argv: list[str]) -> int:
    parser = _node_parser()
    args = parser.parse_args(argv)
    from ..config import overrides_from_args
    from ..errors import ConfigError

    overrides = overrides_from_args(args)
    try:
        _check_addresses(overrides)
    except ConfigError as error:
        parser.error(str(error))
    try:
        if args.command == "init":
            return _init(args.data_dir, overrides)
        return _start(args.data_dir, overrides)
    except NodeError as error:
        return _fail(str(error))


def _check_addresses(values, where: str = "--") -> None:
    """The listen address and bootstrap peers are multiaddrs (a bootstrap peer's ending in
    /p2p/<peer id>): checked before anything is written or started. `where` prefixes a name."""
    from multiaddr import Multiaddr
    from multiaddr.exceptions import Error as MultiaddrError

    from ..errors import ConfigError

    for name, addrs, peer in (("listen", [values.get("listen")], False), ("bootstrap", values.get("bootstrap"), True)):
        for addr in addrs or []:
            if addr is None:
                continue
            try:
                protocols = [p.name for p in Multiaddr(addr).protocols()]
            except (MultiaddrError, ValueError) as error:  # a parse error (a ValueError too), an unknown protocol
                raise ConfigError(f"{where}{name}: {addr!r} is not a multiaddr ({error})") from None
            if peer and protocols[-1:] != ["p2p"]:
                raise ConfigError(f"{where}{name}: {addr!r} does not end in /p2p/<peer id>")


def _init(data_dir: Path, values: dict) -> int:
    from nacl.signing import SigningKey

    from ..datadir import init_datadir, load_seed, peer_id_text

    config = init_datadir(data_dir, values)
    peer = peer_id_text(bytes(SigningKey(load_seed(config)).verify_key))
    print(f"initialised {config.data_dir}\npeer id: {peer}\nconfig:  {config.config_file}")
    return 0


def _start(data_dir: Path, overrides: dict) -> int:
    from ..datadir import DataDirLock, load_seed, open_datadir
    from ..logs import configure_logging

    config = open_datadir(data_dir, overrides)
    _check_addresses(config.values(), f"{config.config_file}: ")  # the flags' were checked: the file's
    seed = load_seed(config)
    # Lock before anything else starts: a second node on this directory stops here.
    with DataDirLock(config):
        configure_logging(config.log_level, libp2p_level=config.libp2p_log_level, file=config.log_path)
        try:
            trio.run(_run_until_signal, config, seed, _cheats(config.cheat))
        except BaseExceptionGroup as group:
            # A NodeError from inside the node's nurseries (a busy port, say) is a
            # message for the user, not a traceback.
            errors = leaves(group)
            if errors and all(isinstance(e, NodeError) for e in errors):
                return _fail("; ".join(str(e) for e in errors))
            raise
    return 0


def _cheats(strategy: str):
    """The cheat strategies for a node told to cheat (``--cheat``, tests only); None for an honest one."""
    if not strategy:
        return None
    from ..cheats import STRATEGIES

    return STRATEGIES


async def _run_until_signal(config, seed: bytes, cheats=None) -> None:
    import logging

    from ..runtime import Node

    log = logging.getLogger("node.cli")
    # Listen for signals before anything starts, so an early SIGTERM is not lost.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            node: Node = await nursery.start(Node(config, seed, take_lock=False, cheats=cheats).run)
            info = node.api_info()
            print(
                json.dumps({"event": "started", "peer_id": info.peer_id, "addrs": info.addrs, "metrics": info.metrics}),
                flush=True,
            )
            async for signum in signals:
                log.info("received %s; shutting down", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()
    print(json.dumps({"event": "stopped"}), flush=True)


# -- gavel status ------------------------------------------------------------------

STATUS_EPILOG = """\
Besides liveness it shows the node's jobs (their state in its database and, for a client's
jobs, the phase and the window that bounds it), its disputes, and its account on the
settlement chain (stake, locked stake, credit to withdraw, balance) when the chain answers
within --timeout; it works whether or not the node is running.

exit status: 0 running (or starting); 1 error, or not answering; 2 bad usage; 3 not running.
"""


def status_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gavel status", description="is the node running, and where do its jobs stand?",
                                     epilog=STATUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, type=Path, help="the node's data directory")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the ping, and for the chain")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from ..datadir import clear_stale, lock_is_held, open_datadir, read_api

    try:
        config = open_datadir(args.data_dir)
        api = read_api(config)
    except NodeError as error:
        return _fail(str(error))
    info: dict = {}

    def report(state: str, code: int, **fields) -> int:
        jobs, disputes = _jobs_and_disputes(config)
        chain = _chain_account(config, info, args.timeout)
        now = max(time.time(), chain.get("time", 0))
        if args.json:
            print(json.dumps({"state": state, **fields, "jobs": [_job_json(j, disputes, now) for j in jobs],
                              "disputes": [_dispute_json(d) for d in disputes], "chain": chain}))
        else:
            print(state + "".join(f"\n  {k}: {v}" for k, v in fields.items()))
            print(_jobs_text(jobs, disputes, now))
            print(_chain_text(chain))
        return code

    if api is None:
        if lock_is_held(config):
            return report("starting", 0, note="lock held, no api file yet")
        cleared = clear_stale(config)
        return report("not running", EXIT_NOT_RUNNING, **({"cleared": "stale lock file"} if cleared else {}))
    if not lock_is_held(config):
        clear_stale(config)
        return report("not running", EXIT_NOT_RUNNING, cleared=f"stale api file of pid {api.pid}")
    try:
        rtt, card = trio.run(_ping, api.addrs, args.timeout)
    except NodeError as error:
        return report("not answering", 1, pid=api.pid, peer_id=api.peer_id, error=str(error))
    info = dict(card.info or {})
    return report(
        "running",
        0,
        pid=api.pid,
        peer_id=card.peer_id,
        addrs=" ".join(card.addrs),
        roles=",".join(card.roles) or "-",
        peers=card.peers,
        ping_ms=round(rtt * 1000, 2),
        metrics=api.metrics or "-",
        uptime_s=round(time.time() - api.started, 1),
    )


async def _ping(addrs: list[str], timeout: float):
    from ..errors import PeerUnreachable
    from ..host import open_host
    from ..logs import configure_logging

    configure_logging("warning")
    if not addrs:
        raise PeerUnreachable("the api file lists no address")
    with trio.fail_after(timeout + 5):
        async with open_host(os.urandom(32), dial_timeout=timeout) as host:
            peer = await host.connect(addrs[0])
            return await host.ping(peer, timeout=timeout)


def _jobs_and_disputes(config) -> tuple[list, list]:
    from ..storage import read_snapshot

    try:
        return read_snapshot(config.db_file)
    except NodeError as error:
        print(f"gavel: reading the node's jobs: {error}", file=sys.stderr)
        return [], []


def _record(job) -> dict:
    from ..errors import BadMessage
    from ..framing import unpack

    try:
        record = unpack(job.spec)
    except BadMessage:  # a row this version cannot read: shown by its state alone
        return {}
    return record if isinstance(record, dict) else {}


def _dispute_kind(d) -> str:
    from ..errors import BadMessage
    from ..framing import unpack

    try:
        state = unpack(d.state)
    except BadMessage:
        return "?"
    if not isinstance(state, dict):
        return "?"
    return "referee" if state.get("kind") == "referee" else str(state.get("side") or state.get("kind") or "?")


def _job_phase(job, disputes: list, now: float):
    """A client's job: its phase (`node.roles.client.phase_of`); others: None."""
    if job.role != "client":
        return None
    from ..roles.client import phase_of

    running = sum(1 for d in disputes if d.job_id == job.job_id and d.status == "refereeing")
    try:
        return phase_of(job.state, _record(job), now, disputes_running=running)
    except (AttributeError, TypeError):  # an old or partial record (a field of another type): the state alone
        return None


def _job_json(job, disputes: list, now: float) -> dict:
    out = {"job": job.job_id.hex(), "role": job.role, "state": job.state, "updated": round(job.updated, 3)}
    phase = _job_phase(job, disputes, now)
    if phase is not None:
        out.update(phase=phase.name, doing=phase.doing, window=phase.window or None, deadline=phase.deadline or None)
    result = _record(job).get("result") or {}
    if result.get("result_dir") or _record(job).get("result_dir"):
        out["result_dir"] = result.get("result_dir") or _record(job).get("result_dir")
    return out


def _dispute_json(d) -> dict:
    return {"dispute": d.dispute_id.hex(), "job": d.job_id.hex(), "as": _dispute_kind(d), "status": d.status,
            "updated": round(d.updated, 3)}


def _jobs_text(jobs: list, disputes: list, now: float) -> str:
    from .common import format_duration

    lines = [f"jobs: {len(jobs) or 'none'}"]
    for job in jobs:
        line = f"  {job.job_id.hex()[:12]}  {job.role:<8} {job.state:<10}"
        phase = _job_phase(job, disputes, now)
        if phase is not None:
            line += f" {phase.doing}"
        if phase is not None and phase.deadline:
            left = phase.deadline - now
            line += (f"; {phase.window} window closes in {format_duration(left)}" if left > 0
                     else f"; {phase.window} window closed {format_duration(-left)} ago")
        else:
            line += f" (updated {format_duration(time.time() - job.updated)} ago)"
        lines.append(line)
    lines.append(f"disputes: {len(disputes) or 'none'}")
    for d in disputes:
        lines.append(f"  {d.dispute_id.hex()[:12]}  job {d.job_id.hex()[:12]}  as {_dispute_kind(d):<10} {d.status}")
    return "\n".join(lines)


def _chain_account(config, info: dict, timeout: float) -> dict:
    """The node's account on the settlement chain: stake, locked, credit, balance (wei) and
    the chain's time; ``error`` instead when the chain does not answer within ``timeout``."""
    from ..roles.chain import DEV_DEPLOYER_KEY, EMBEDDED, account_key, canonical_address, chain_failures

    url = info.get("chain") or config.chain
    out: dict = {"url": url}
    if url == EMBEDDED:
        out["error"] = "the embedded chain lives in the node's own process"
        return out
    try:
        from eth_account import Account

        from contracts import RpcChain, Settlement
        from ..datadir import load_seed

        account = info.get("account") or Account.from_key(account_key(load_seed(config))).address
        address = info.get("contract") or config.contract or canonical_address(Account.from_key(DEV_DEPLOYER_KEY).address)
        out.update(account=account, contract=address)
        chain = RpcChain(url, timeout=timeout)
        try:
            if chain.rpc("eth_getCode", address, "latest") in ("0x", "0x0", None):
                out["error"] = f"no settlement contract at {address}"
                return out
            node = Settlement(chain, address, account).node(account)
            out.update(stake=node.stake, locked=node.locked, credit=Settlement(chain, address, account).credit_of(account),
                       balance=chain.balance(account), registered=node.status.name.lower(), time=chain.now())
        finally:
            chain.close()
    except (*chain_failures(), NodeError) as error:  # the chain is optional here: say why it is missing
        from ..roles.context import short_reason

        out["error"] = short_reason(str(error))
    except Exception as error:  # broad: a URL that is no working Ethereum node fails in any way; say how
        from ..roles.context import short_reason

        out["error"] = short_reason(f"{type(error).__name__}: {error}")
    return out


def _chain_text(chain: dict) -> str:
    from ..roles.chain import format_ether

    head = f"chain: {chain['url']}"
    if "account" in chain:
        head += f", account {chain['account']}"
    if "error" in chain:
        return f"{head}\n  not read: {chain['error']}"
    return (f"{head}\n  stake {format_ether(chain['stake'])} ether ({format_ether(chain['locked'])} locked), "
            f"credit {format_ether(chain['credit'])} ether to withdraw, balance {format_ether(chain['balance'])} ether, "
            f"{chain['registered']}")
