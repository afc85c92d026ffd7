"""Chaos in a testnet of processes: kill -9 and restart nodes, and once the anvil chain.

`ProcessChaos` runs a fault schedule (`chaos.plan_faults`) against a `ProcessNetwork`:

- a provider or auditor: its ``gavel node start`` process killed with SIGKILL and, after
  the fault's delay, started again from the same data directory on the same port;
- a client: its ``gavel submit --wait`` process killed, and in its place ``gavel node
  start`` on the client's data directory, which picks the job up where it stood (its
  listen port is fixed, so the providers reach it where they were told to);
- the chain: anvil killed, a fresh anvil started on the same port. The observer reads the
  old chain's balances just before, starts a new segment of books on the new chain, and
  the jobs opened on the old chain are lost by design (their ``gavel submit`` processes
  are stopped: nothing of theirs is left to wait for).

Around every fault the observer reads the chain's balances (`Network.read_balances`), so
the balance sum is checked across the faults, not only at the ends.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
from typing import Any

import trio

from .chaos import CHAIN, Fault, PlannedFault, choose_victim
from .plan import AUDITOR, CLIENT, PROVIDER

log = logging.getLogger(__name__)



class ProcessChaos:
    def __init__(self, network: Any) -> None:  # a ProcessNetwork
        self.net = network
        self.faults: list[Fault] = []
        self.down: set[str] = set()           # nodes killed and not yet restarted
        self.taken_over: set[int] = set()     # job indexes whose client was killed: a client node carries the job on
        self.lost: set[int] = set()           # job indexes lost with a chain restart
        self.schedule_done = False            # every planned fault fired and every victim is back
        self.nursery: Any = None              # the network's, where a client's job is submitted again

    # -- who is up ------------------------------------------------------------------------

    def up(self) -> dict[str, list[str]]:
        net = self.net
        out: dict[str, list[str]] = {PROVIDER: [], AUDITOR: [], CLIENT: []}
        for node in net.plan.nodes:
            if node.name not in self.down and node.role in out:
                out[node.role].append(node.name)
        for sub in net.submissions:
            name = net.client_dirs[sub.index]
            if sub.done_at is None and name not in self.down and sub.index not in self.lost and name in net.processes:
                out[CLIENT].append(name)
        return out

    # -- the schedule -----------------------------------------------------------------------

    async def run(self, schedule: list[PlannedFault], started_at: float) -> None:
        """Fire every fault of ``schedule`` at its time (seconds after ``started_at``, network time)."""
        async with trio.open_nursery() as nursery:
            for planned in schedule:
                await trio.sleep(max(0.0, started_at + planned.at - self.net.now()))
                if planned.kind == CHAIN:
                    await self._chain_fault(planned)
                    continue
                victim = choose_victim(planned, self.up())
                if victim is None:
                    self.faults.append(Fault(len(self.faults), planned.kind, "", self.net.now(), planned.down_for,
                                             detail="no node of any kind was up to kill"))
                    continue
                fault = await self._kill(planned, *victim)
                nursery.start_soon(self._restart_later, fault)
        self.schedule_done = True

    async def _kill(self, planned: PlannedFault, kind: str, name: str) -> Fault:
        net = self.net
        await net.read_balances(f"before killing {name}")
        process = net.processes[name]
        fault = Fault(len(self.faults), kind, name, net.now(), planned.down_for, pid=process.pid)
        self.faults.append(fault)
        self.down.add(name)
        if kind == CLIENT:
            index = next(i for i, n in net.client_dirs.items() if n == name)
            self.taken_over.add(index)
            fault.detail = f"its job {index} was under way"
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            fault.detail = "it had already exited"
        if isinstance(process, subprocess.Popen):
            await trio.to_thread.run_sync(process.wait)
        else:  # a `gavel submit` process: its own task reaps it
            while process.poll() is None:
                await trio.sleep(0.05)
        log.info("chaos: killed %s %s (pid %d) at %.1f s", kind, name, fault.pid, fault.at)
        await net.read_balances(f"after killing {name}")
        return fault

    async def _restart_later(self, fault: Fault) -> None:
        await trio.sleep(fault.down_for)
        net = self.net
        if fault.kind == CLIENT and not await trio.to_thread.run_sync(net.client_has_job, fault.target):
            await self._submit_again(fault)
            return
        process = net.start_node_process(fault.target)
        fault.restarted_at, fault.new_pid = net.now(), process.pid
        self.down.discard(fault.target)
        log.info("chaos: restarted %s (pid %d) at %.1f s", fault.target, process.pid, fault.restarted_at)

    async def _submit_again(self, fault: Fault) -> None:
        """A client killed before it stored its job has nothing to resume: its `gavel submit` runs again."""
        net = self.net
        index = next(i for i, n in net.client_dirs.items() if n == fault.target)
        sub = next(s for s in net.submissions if s.index == index)
        killed = net.processes[fault.target]
        self.taken_over.discard(index)  # the new submit's end is the job's end again
        self.nursery.start_soon(net.resubmit, sub)
        while net.processes[fault.target] is killed:
            await trio.sleep(0.1)
        fault.restarted_at, fault.new_pid = net.now(), net.processes[fault.target].pid
        fault.detail = f"its job {index} was not opened yet: gavel submit run again"
        self.down.discard(fault.target)
        log.info("chaos: submitted job %d again (pid %d) at %.1f s", index, fault.new_pid, fault.restarted_at)

    async def _chain_fault(self, planned: PlannedFault) -> None:
        from contracts import AnvilProcess

        net = self.net
        old = net.anvil
        fault = Fault(len(self.faults), CHAIN, "anvil", net.now(), planned.down_for, pid=old.pid)
        self.faults.append(fault)
        await net.read_balances("before killing the chain")
        async with net.chain_swap():  # the observer reads nothing from a chain between two lives
            fault.at = net.now()
            os.kill(old.pid, signal.SIGKILL)
            await trio.to_thread.run_sync(old.process.wait)
            old.stop()
            segment = net.segments[-1]
            segment.lost_at = fault.at
            self._lose_jobs_of(segment.ledger)
            log.info("chaos: killed the chain (anvil pid %d) at %.1f s", fault.pid, fault.at)
            await trio.sleep(planned.down_for)
            fresh = await trio.to_thread.run_sync(lambda: AnvilProcess(port=old.port).start())
            net.anvil = fresh
            fault.restarted_at, fault.new_pid = net.now(), fresh.pid
            await trio.to_thread.run_sync(net.rebind_observer, fresh.url)
            # Every account funded on the new chain at once, from the dev accounts in turn: the nodes'
            # own top-ups all draw on the first, which ran dry with a dozen accounts and left clients
            # unable to pay for gas (a run with 6 jobs: "Insufficient funds" settling and submitting).
            await trio.to_thread.run_sync(net.fund_accounts)
        fault.detail = f"{len(self.lost)} job(s) under way on it"
        await net.read_balances("the new chain, once the observer joined it")

    def _lose_jobs_of(self, ledger: Any) -> None:
        """The jobs of a killed chain are gone: their `gavel submit` processes have nothing left to wait for."""
        net = self.net
        for sub in net.submissions:
            if sub.job_id is None or sub.job_id not in ledger.jobs or ledger.jobs[sub.job_id].settled:
                continue
            self.lost.add(sub.index)
            name = net.client_dirs[sub.index]
            process = net.processes.get(name)
            if process is not None and process.returncode is None and sub.index not in self.taken_over:
                process.send_signal(signal.SIGTERM)

    # -- the jobs' end ------------------------------------------------------------------------

    def took_over(self, index: int) -> bool:
        """Whether job ``index``'s `gavel submit` ended by the chaos (killed, or its chain lost): its
        exit is then no failure of the job, and `watch_jobs` says when the job is over."""
        return index in self.taken_over or index in self.lost

    async def watch_jobs(self) -> None:
        """Mark a job whose client was killed done once it is final on chain, and a lost one at once."""
        net = self.net
        while True:
            for sub in net.submissions:
                if sub.done_at is not None or not self.took_over(sub.index):
                    continue
                if sub.job_id is None:  # its submit was killed before it printed the id: without it the
                    # run waited out the whole job lifetime (the chaos test's run: 390 s instead of 134)
                    sub.job_id = await trio.to_thread.run_sync(net.client_job_id, net.client_dirs[sub.index])
                job = net.ledger.jobs.get(sub.job_id) if sub.job_id else None
                if sub.index in self.lost or (job is not None and job.settled):
                    if sub.index in self.lost:
                        sub.error = "lost with the chain restart"
                    sub.done_at = net.now()
                    net.on_progress(net)
            await trio.sleep(1.0)


__all__ = ["ProcessChaos"]
