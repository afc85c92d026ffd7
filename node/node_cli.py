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

from .errors import NodeError

EXIT_NOT_RUNNING = 3


def _fail(message: str, code: int = 1) -> int:
    print(f"gavel: {message}", file=sys.stderr)
    return code


# -- gavel node init / start -------------------------------------------------------


def _node_parser() -> argparse.ArgumentParser:
    from .config import add_setting_flags

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
    args = _node_parser().parse_args(argv)
    from .config import overrides_from_args

    overrides = overrides_from_args(args)
    try:
        if args.command == "init":
            return _init(args.data_dir, overrides)
        return _start(args.data_dir, overrides)
    except NodeError as error:
        return _fail(str(error))


def _init(data_dir: Path, values: dict) -> int:
    from nacl.signing import SigningKey

    from .datadir import init_datadir, load_seed, peer_id_text

    config = init_datadir(data_dir, values)
    peer = peer_id_text(bytes(SigningKey(load_seed(config)).verify_key))
    print(f"initialised {config.data_dir}\npeer id: {peer}\nconfig:  {config.config_file}")
    return 0


def _start(data_dir: Path, overrides: dict) -> int:
    from .datadir import DataDirLock, load_seed, open_datadir
    from .logs import configure_logging

    config = open_datadir(data_dir, overrides)
    seed = load_seed(config)
    # Lock before anything else starts: a second node on this directory stops here.
    with DataDirLock(config):
        configure_logging(config.log_level, libp2p_level=config.libp2p_log_level, file=config.log_path)
        try:
            trio.run(_run_until_signal, config, seed)
        except BaseExceptionGroup as group:
            # A NodeError from inside the node's nurseries (a busy port, say) is a
            # message for the user, not a traceback.
            leaves = _leaves(group)
            if leaves and all(isinstance(e, NodeError) for e in leaves):
                return _fail("; ".join(str(e) for e in leaves))
            raise
    return 0


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


async def _run_until_signal(config, seed: bytes) -> None:
    import logging

    from .runtime import Node

    log = logging.getLogger("node.cli")
    # Listen for signals before anything starts, so an early SIGTERM is not lost.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            node: Node = await nursery.start(Node(config, seed, take_lock=False).run)
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


def status_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gavel status", description="is the node running, and does it answer?")
    parser.add_argument("--data-dir", required=True, type=Path, help="the node's data directory")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the ping")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from .datadir import clear_stale, lock_is_held, open_datadir, read_api

    def report(state: str, code: int, **fields) -> int:
        if args.json:
            print(json.dumps({"state": state, **fields}))
        else:
            print(state + "".join(f"\n  {k}: {v}" for k, v in fields.items()))
        return code

    try:
        config = open_datadir(args.data_dir)
        api = read_api(config)
    except NodeError as error:
        return _fail(str(error))
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
    from .errors import PeerUnreachable
    from .host import open_host
    from .logs import configure_logging

    configure_logging("warning")
    if not addrs:
        raise PeerUnreachable("the api file lists no address")
    with trio.fail_after(timeout + 5):
        async with open_host(os.urandom(32), dial_timeout=timeout) as host:
            peer = await host.connect(addrs[0])
            return await host.ping(peer, timeout=timeout)
