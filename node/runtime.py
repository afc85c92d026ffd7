"""One running node: the host, storage, blob service, metrics endpoint and roles.

``Node(config, seed).run`` takes the data directory's lock, opens the database and
blob store, starts the libp2p host and the metrics endpoint, writes the ``api`` file
and starts each configured role found in ``ROLE_RUNNERS``. Cancelling it (SIGINT or
SIGTERM in ``gavel node start``) unwinds all of that in reverse; the api file goes
first, so ``gavel status`` never pings a node that is shutting down.

``cheats`` (`node.cheats.STRATEGIES`, from a testnet or a test) lets a provider started
with ``--cheat STRATEGY`` deviate on purpose; without it the node trains honestly and
refuses to cheat.

Roles plug in by registering ``ROLE_RUNNERS["provider"] = async def run(node)``;
the runner lives as long as the node and should not return early. ``node.roles``
installs the provider, auditor and client runners (keeping any registered already).
Every node with a role also runs a keeper (`node.roles.keeper`; on settlement 2
`node.roles.v2.keeper`): it settles any job the node knows of whose deadline passed and
that nobody settled, so no coin stays locked when a job's client is gone.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Awaitable, Callable, Mapping

import trio
from libp2p.exceptions import BaseLibp2pError
from libp2p.peer.peerstore import PeerStoreError

from .blobs import BlobService, BlobStore
from .config import Config
from .datadir import ApiInfo, DataDirLock, remove_api, write_api
from .errors import ConfigError
from .gossip import GossipSettings
from .host import NodeHost
from .metrics import NodeMetrics, serve_metrics
from .storage import Storage

log = logging.getLogger(__name__)

VERSION = "0.1.0"
PEER_RECORD_INTERVAL = 5.0

RoleRunner = Callable[["Node"], Awaitable[None]]
ROLE_RUNNERS: dict[str, RoleRunner] = {}


def _split_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"metrics_listen must be host:port, not {text!r}")
    return host or "127.0.0.1", int(port)


class Node:
    def __init__(self, config: Config, seed: bytes, *, take_lock: bool = True,
                 cheats: Mapping[str, Callable[[Any], Any]] | None = None) -> None:
        """``take_lock=False`` when the caller already holds the data directory's lock; ``cheats``
        the strategies a ``--cheat`` provider may run (`node.roles.runner.Cheats`)."""
        self.config = config
        self.cheats = cheats
        self._take_lock = take_lock
        self.metrics = NodeMetrics()
        self.host = NodeHost(
            seed,
            listen=config.listen,
            bootstrap=config.bootstrap,
            metrics=self.metrics,
            gossip=GossipSettings.of_degree(config.gossip_degree, heartbeat=config.gossip_heartbeat,
                                            publish_interval=config.gossip_publish_interval),
            dial_timeout=config.dial_timeout,
            request_timeout=config.request_timeout,
            peer_target=config.peer_target,
            roles=config.roles,
            version=VERSION,
        )
        self.host.info["chain"] = config.chain
        self.storage: Storage | None = None
        self.blobs: BlobService | None = None
        self.metrics_addr: tuple[str, int] | None = None
        self.record_interval = PEER_RECORD_INTERVAL

    @property
    def peer_id(self):
        return self.host.peer_id

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from .roles import install_roles
        from .roles.keeper import run_keeper
        from .roles.v2.keeper import run_keeper_v2

        install_roles(ROLE_RUNNERS)
        config = self.config
        with DataDirLock(config) if self._take_lock else contextlib.nullcontext():
            self.storage = Storage(config.db_file)
            self.metrics.follow(self.storage)
            try:
                self.blobs = BlobService(BlobStore(config.blobs_dir), self.host)
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.host.run)
                    if config.metrics_listen:
                        host, port = _split_host_port(config.metrics_listen)
                        self.metrics_addr = await nursery.start(serve_metrics, self.metrics, host, port)
                    nursery.start_soon(self._record_peers)
                    for role in config.roles:
                        runner = ROLE_RUNNERS.get(role)
                        if runner is None:
                            log.info("role %s: no role logic installed yet; serving the network only", role)
                        else:
                            nursery.start_soon(runner, self, name=f"role:{role}")
                    if any(role in ROLE_RUNNERS for role in config.roles):
                        keeper = run_keeper_v2 if getattr(config, "settlement", "1") == "2" else run_keeper
                        nursery.start_soon(keeper, self, name="keeper")
                    write_api(config, self.api_info())
                    try:
                        task_status.started(self)
                        await trio.sleep_forever()
                    finally:
                        remove_api(config)
            finally:
                self.storage.close()

    def api_info(self) -> ApiInfo:
        metrics = f"http://{self.metrics_addr[0]}:{self.metrics_addr[1]}/metrics" if self.metrics_addr else ""
        return ApiInfo(
            pid=os.getpid(),
            peer_id=str(self.host.peer_id),
            addrs=self.host.listen_addrs,
            metrics=metrics,
            roles=list(self.config.roles),
            started=time.time(),
        )

    async def _record_peers(self) -> None:
        """Keep the peers table current (the job/dispute gauges follow the storage's writes)."""
        storage = self.storage
        assert storage is not None
        while True:
            await trio.sleep(self.record_interval)
            peerstore = self.host.libp2p.get_peerstore()
            for peer in self.host.connected_peers():
                try:
                    addrs = [str(a) for a in peerstore.addrs(peer)]
                except (BaseLibp2pError, PeerStoreError):  # connected inbound, listen address not yet known
                    addrs = []
                await storage.run(storage.peer_seen, str(peer), addrs)
