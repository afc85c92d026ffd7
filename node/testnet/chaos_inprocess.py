"""Chaos in a testnet of one process: a node's death is the cancellation of its task.

`InProcessChaos` runs a fault schedule (`chaos.plan_faults`) against an
`InProcessNetwork`: a provider or auditor node is cancelled (its host, roles and
storage closed as the cancellation unwinds them) and, after the fault's delay, a new
`Node` is started from the same data directory and seed. Clients are not killed here:
the testnet's own submit tasks drive them through their role objects (a processes run
kills clients). The embedded chain lives as long as the process and is never killed.
"""
from __future__ import annotations

import logging
from typing import Any

import trio

from .chaos import Fault, PlannedFault, choose_victim
from .plan import AUDITOR, PROVIDER

log = logging.getLogger(__name__)

KINDS = (PROVIDER, AUDITOR)


async def run_cancellable(node: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Run ``node`` in a cancel scope of its own; `nursery.start` returns the scope, whose
    cancellation is the node's death."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as inner:
            await inner.start(node.run)
            task_status.started(scope)


class InProcessChaos:
    def __init__(self, network: Any) -> None:  # an InProcessNetwork
        self.net = network
        self.faults: list[Fault] = []
        self.down: set[str] = set()
        self.lost: set[int] = set()  # no chain restart in one process: nothing is ever lost with it
        self.schedule_done = False

    def up(self) -> dict[str, list[str]]:
        return {kind: [n.name for n in self.net.plan.nodes if n.role == kind and n.name not in self.down]
                for kind in KINDS}

    async def run(self, schedule: list[PlannedFault], started_at: float, nursery: trio.Nursery) -> None:
        """Fire every fault of ``schedule``; restarted nodes run in ``nursery`` (the network's)."""
        async with trio.open_nursery() as restarts:
            for planned in schedule:
                await trio.sleep(max(0.0, started_at + planned.at - self.net.now()))
                victim = choose_victim(planned, self.up())
                if victim is None:
                    self.faults.append(Fault(len(self.faults), planned.kind, "", self.net.now(), planned.down_for,
                                             detail="no provider or auditor was up to kill"))
                    continue
                kind, name = victim
                await self.net.read_balances(f"before killing {name}")
                fault = Fault(len(self.faults), kind, name, self.net.now(), planned.down_for)
                self.faults.append(fault)
                self.down.add(name)
                self.net.scopes[name].cancel()
                log.info("chaos: cancelled %s %s at %.1f s", kind, name, fault.at)
                restarts.start_soon(self._restart_later, fault, nursery)
        self.schedule_done = True

    async def _restart_later(self, fault: Fault, nursery: trio.Nursery) -> None:
        await trio.sleep(fault.down_for)
        await self.net.restart_node(fault.target, nursery)
        fault.restarted_at = self.net.now()
        self.down.discard(fault.target)
        log.info("chaos: restarted %s at %.1f s", fault.target, fault.restarted_at)


__all__ = ["InProcessChaos", "run_cancellable"]
