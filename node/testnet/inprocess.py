"""The testnet with every node a task of this process (`launcher` says what both modes share).

All nodes share one trio loop, one embedded EVM (or one anvil with ``--chain anvil``) and
the process's memory; each runs in a cancel scope of its own, which a chaos run cancels
to kill it (`chaos_inprocess`).
"""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from ..errors import describe_failure
from ..task_dump import dump_tasks_on_signal
from .launcher import (
    PEER_RECORD_OFF, Network, RunRecords, bootstrap_links, init_node_dir, new_anvil, node_settings, rss_bytes,
)
from .chaos import wait_final
from .plan import AUDITOR, CLIENT
from .chaos_inprocess import KINDS
from .report import Submission

log = logging.getLogger(__name__)


class InProcessNetwork(Network):
    def __init__(self, *args: Any, clock: Callable[["InProcessNetwork"], Awaitable[None]] | None = None,
                 **kwargs: Any) -> None:
        """``clock``: a task that moves the embedded chain's clock while the jobs run (a test's, to
        close windows instead of waiting them out); without it the chain keeps the wall clock's time."""
        super().__init__(*args, **kwargs)
        self.clock = clock
        self.nodes: dict[str, Any] = {}             # node name -> its running Node (a restart replaces it)
        self.scopes: dict[str, trio.CancelScope] = {}  # node name -> the scope whose cancellation kills it
        self.listen: dict[str, str] = {}             # node name -> the address it first listened on
        self.chaos: Any = None
        if self.options.chaos:
            from .chaos_inprocess import InProcessChaos

            self.chaos = InProcessChaos(self)

    def _new_node(self, name: str, config: Any) -> Any:
        from ..cheats import STRATEGIES
        from ..runtime import Node

        plan_node = self.plan.node(name)
        node = Node(config, plan_node.seed, cheats=STRATEGIES if plan_node.cheat else None)
        # The peers table is not needed here, and its recorder dies on a peer known only by an
        # inbound connection (libp2p's PeerStoreError is no BaseLibp2pError), taking the node along.
        node.record_interval = PEER_RECORD_OFF
        return node

    async def _start(self, name: str, config: Any, nursery: trio.Nursery) -> None:
        from .chaos_inprocess import run_cancellable

        node = self._new_node(name, config)
        self.scopes[name] = await nursery.start(run_cancellable, node)
        self.nodes[name] = node
        self.listen[name] = str(node.host.listen_addrs[0])

    async def restart_node(self, name: str, nursery: trio.Nursery) -> None:
        """Start node ``name`` again from its data directory (a chaos restart), listening where it
        did: the other nodes' bootstrap lists and the clients' offers name that address."""
        from ..datadir import open_datadir

        listen = self.listen[name].split("/p2p/")[0]
        await self._start(name, open_datadir(self.node_dir(name), {"listen": listen}), nursery)

    def harvest_nodes(self) -> list[tuple[str, str]]:
        """Settlement 2: the clients' rows (their results); its auditors' audits are read from the
        running roles (`audits_v2`), their rows being version 1's only."""
        if self.options.settlement == "2":
            return [(n.name, n.role) for n in self.plan.nodes if n.role == CLIENT]
        return super().harvest_nodes()

    def audits_v2(self) -> dict[tuple[bytes, bytes], dict[int, bool]]:
        """(job, revealed root) -> interval -> whether the auditors' replays agreed, from the running
        auditors of a settlement-2 network (the samples behind "sampled out")."""
        from ..roles.context import context_of

        out: dict[tuple[bytes, bytes], dict[int, bool]] = {}
        for plan_node in self.plan.of_role(AUDITOR):
            ctx = context_of(self.nodes[plan_node.name])
            auditor = getattr(ctx.roles.get("auditor"), "auditor", None) if ctx is not None else None
            for key, results in (auditor.results.items() if auditor is not None else ()):
                out.setdefault(key, {}).update(results)
        return out

    def chaos_schedule(self) -> list:
        from .chaos import schedule_for

        return schedule_for(self.options, chain_fault=False, kinds=KINDS)

    async def run(self) -> RunRecords:
        from ..logs import configure_logging
        from ..roles.context import context_of

        configure_logging("info", file=self.out / "testnet.log")
        self._plan_nodes()
        self.shared_loop_nodes = len(self.plan.nodes)
        chain_setting = "embedded"
        anvil = None
        if self.chain_kind == "anvil":
            anvil = new_anvil(self.options).start()
            chain_setting = anvil.url
        paced = contextlib.ExitStack()
        if anvil is None:  # the nodes' bursts of transactions must not run the chain's clock ahead of theirs
            from ..roles.chain import embedded_chain_paced

            paced.enter_context(embedded_chain_paced())
        try:
            await trio.to_thread.run_sync(lambda: self.open_observer(chain_setting, fresh=anvil is not None))
            rss_before, _ = rss_bytes()
            nodes = self.nodes
            links = bootstrap_links(len(self.plan.nodes), self.options.seed)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.watch_chain)
                nursery.start_soon(self.watch_loop_lag)
                nursery.start_soon(dump_tasks_on_signal, self.out / "tasks.txt")  # `kill -USR1`: what each task awaits
                for i, plan_node in enumerate(self.plan.nodes):
                    bootstrap = [nodes[self.plan.nodes[j].name].host.listen_addrs[0] for j in links[i]]
                    values = node_settings(plan_node, self.plan, self.running_at_once(), chain=chain_setting,
                                           listen="/ip4/127.0.0.1/tcp/0", bootstrap=bootstrap, log_file="",
                                           shared_loop_nodes=self.shared_loop_nodes, contract=self.contract)
                    config = init_node_dir(self.node_dir(plan_node.name), plan_node.seed, values)
                    await self._start(plan_node.name, config, nursery)
                    self.infos[plan_node.name].pid = os.getpid()
                    self.on_progress(self)
                self.timings["nodes_started_at"] = self.now()
                self.phase = "registering"
                await self.wait_registered(timeout=60 + len(nodes))
                rss_after, _ = rss_bytes()
                self.timings["network_ready_at"] = self.now()

                async def submit(sub: Submission) -> None:
                    client = context_of(nodes[sub.client]).roles["client"]
                    addrs = [nodes[name].host.listen_addrs[0] for name in self.plan.jobs[sub.index].providers]
                    options = self.submit_options(addrs)
                    try:
                        sub.job_id = await client.submit(Path(sub.job_file), options)
                        self.on_progress(self)
                        sub.result = await client.wait(sub.job_id)
                    except Exception as error:  # a job that fails is reported, the run goes on
                        sub.error = describe_failure(error)
                        log.warning("job %d: %s", sub.index, sub.error)
                    sub.done_at = self.now()
                    self.on_progress(self)

                for name, node in nodes.items():  # every role object up before the first job
                    while (ctx := context_of(node)) is None or not ctx.roles:
                        await trio.sleep(0.05)
                await self.read_balances("network ready")
                if self.chaos is not None:
                    nursery.start_soon(self.chaos.run, self.chaos_schedule(), self.now(), nursery)
                if self.clock is not None:
                    nursery.start_soon(self.clock, self)
                await self._run_jobs(submit, self.job_lifetime)
                if self.chaos is not None:
                    await wait_final(self, self.chaos)
                    self.timings["final_wait_done_at"] = self.now()
                self.segments[-1].chain_now = await self.chain_time()
                await self.read_balances("end of the run")
                mismatches = await self.mismatches()
                nets = await trio.to_thread.run_sync(self.ledger.nets, self._settlement) \
                    if self.options.settlement == "2" else {}
                audited = self.audits_v2() if self.options.settlement == "2" else {}
                nursery.cancel_scope.cancel()
            memory = {"mode": "in-process", "process_rss_bytes": rss_after, "rss_before_nodes_bytes": rss_before,
                      "per_node_bytes": (rss_after - rss_before) / max(1, len(nodes)), "peak_rss_bytes": rss_bytes()[1]}
            self.timings.update(self.loop_lag_summary())
            records = self.records(memory)
            records.mismatches = mismatches
            records.nets, records.audited = nets, audited
            return records
        finally:
            paced.close()
            if self._binding is not None:
                self._binding.close()
            if anvil is not None:
                anvil.stop()


__all__ = ["InProcessNetwork"]
