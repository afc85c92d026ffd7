"""The testnet with every node its own OS process, on one anvil chain.

Providers and auditors run ``gavel node start`` from their data directories, each on a
loopback port chosen beforehand, so every node's bootstrap addresses (port and peer id,
which follows from its seed) are known before any starts: they all start at once and
dial each other as they come up. Each job is submitted by its own ``gavel submit --wait``
process, a client node with a data directory of its own (``CLIENT-jobNNN``), which
escrows, hands over, checks, referees and settles that job and exits.

The launcher samples every process's resident memory while it runs (the peak is the
report's memory per node) and stops the nodes with SIGTERM at the end.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from typing import Any

import trio

from .launcher import (
    LaunchError, Network, RunRecords, account_of, bootstrap_links, init_node_dir, new_anvil, node_settings, peer_id_of,
    rss_bytes,
)
from .chaos import wait_final
from .plan import AUDITOR, CLIENT, JobPlan, NodePlan, node_seed
from .report import NodeInfo, Submission
from .threads import one_thread_per_node

log = logging.getLogger(__name__)

START_TIMEOUT = 120.0   # seconds for every node to write its api file (imports take seconds each)
STOP_TIMEOUT = 20.0
MEMORY_SAMPLE = 2.0
CHILD = (sys.executable, "-m", "node.testnet.child")  # `gavel`, as a testnet runs its nodes
# Every node's account is funded up front from the chain's unlocked accounts (in turn): the nodes' own
# top-ups all draw on the first one, which runs dry after ten, and race each other doing it.
FUNDING_ETHER = 200


def free_ports(count: int) -> list[int]:
    """Loopback ports free right now (held open together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def child_env() -> dict[str, str]:
    env = one_thread_per_node(dict(os.environ))
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ProcessNetwork(Network):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.processes: dict[str, subprocess.Popen] = {}
        self.peak_rss: dict[str, int] = {}
        self.client_dirs: dict[int, str] = {}  # job index -> its client's node name
        self.commands: dict[str, list[str]] = {}  # node name -> the command that (re)starts it as a node
        self.env: dict[str, str] = {}
        self.addresses: dict[str, str] = {}  # staked node name -> its multiaddr
        self.anvil: Any = None
        self.chaos: Any = None  # a chaos_processes.ProcessChaos when the run injects faults
        if self.options.chaos:
            from .chaos_processes import ProcessChaos

            self.chaos = ProcessChaos(self)

    def chaos_schedule(self) -> list:
        from .chaos import schedule_for

        return schedule_for(self.options, chain_fault=True)

    def client_name(self, job: JobPlan) -> str:
        return f"{job.client}-job{job.index:03d}"

    def _plan_clients(self, clients: dict[str, NodePlan]) -> None:
        """One client node per job, keyed from the testnet seed like every other node, playing its
        planned client's strategy (``clients``: the plan's client nodes by name)."""
        for job in self.plan.jobs:
            name = self.client_name(job)
            seed = node_seed(self.options.seed, name)
            info = NodeInfo(name, CLIENT, account_of(seed), peer_id_of(seed), clients[job.client].cheat)
            self.infos[name] = info
            self.names[info.account] = name
            self.client_dirs[job.index] = name

    def client_names(self) -> dict[int, str]:
        return dict(self.client_dirs)

    def recover_job_ids(self) -> None:
        """A job whose `gavel submit` was killed before it printed the job's id: the id from its client's rows."""
        for sub in self.submissions:
            if sub.job_id is None:
                sub.job_id = self.client_job_id(self.client_dirs[sub.index])

    def harvest_nodes(self) -> list[tuple[str, str]]:
        """The auditors' rows (version 1's only) and the clients' (their results)."""
        auditors = [(n.name, n.role) for n in self.plan.nodes if n.role == AUDITOR and self.options.settlement == "1"]
        return auditors + [(name, CLIENT) for name in self.client_dirs.values()]

    @property
    def step_cost_scale(self) -> float:
        """Every node's process shares this machine's cores: a step runs that much slower than alone."""
        return max(1.0, len(self.plan.nodes) / (os.cpu_count() or 1))

    async def run(self) -> RunRecords:
        from ..logs import configure_logging

        configure_logging("info", file=self.out / "testnet.log")
        self._plan_nodes()
        staked = [n for n in self.plan.nodes if n.role != CLIENT]
        clients = {n.name: n for n in self.plan.nodes if n.role == CLIENT}
        self.plan = type(self.plan)(self.options, tuple(staked), self.plan.jobs)
        self.infos = {n.name: self.infos[n.name] for n in staked}
        self._plan_clients(clients)
        if self.chain_kind != "anvil":
            raise LaunchError("--processes needs a chain every process can reach: --chain anvil")
        self.anvil = new_anvil(self.options).start()
        try:
            await trio.to_thread.run_sync(lambda: self.open_observer(self.anvil.url, fresh=True))
            return await self._run_on(self.anvil.url)
        finally:
            self._stop_all()
            if self._binding is not None:
                self._binding.close()
            self.anvil.stop()  # the chaos may have replaced the first

    def _address(self, node: NodePlan, port: int) -> str:
        return f"/ip4/127.0.0.1/tcp/{port}/p2p/{self.infos[node.name].peer_id}"

    async def _run_on(self, url: str) -> RunRecords:
        staked = list(self.plan.nodes)
        ports = free_ports(len(staked))
        addresses = {n.name: self._address(n, p) for n, p in zip(staked, ports)}
        links = bootstrap_links(len(staked), self.options.seed)
        env = child_env()
        await trio.to_thread.run_sync(self.fund_accounts)
        for i, (node, port) in enumerate(zip(staked, ports)):
            values = node_settings(node, self.plan, self.running_at_once(), chain=url, listen=f"/ip4/127.0.0.1/tcp/{port}",
                                   bootstrap=[addresses[staked[j].name] for j in links[i]], log_file="node.log")
            init_node_dir(self.node_dir(node.name), node.seed, values)
        # A client listens on a port of its own, so that a client node restarted in its place (chaos)
        # is where the job's providers were told to deliver.
        client_ports = free_ports(len(self.plan.jobs))
        for job, port in zip(self.plan.jobs, client_ports):
            name = self.client_dirs[job.index]
            cheat = {"cheat": self.infos[name].cheat} if self.infos[name].cheat else {}
            init_node_dir(self.node_dir(name), node_seed(self.options.seed, name),
                          {"roles": [CLIENT], "chain": url, "metrics_listen": "", "log_file": "node.log",
                           "listen": f"/ip4/127.0.0.1/tcp/{port}", "bootstrap": [addresses[p] for p in job.providers],
                           "settlement": self.options.settlement, **cheat})
        self.env = env
        for name in [n.name for n in staked] + list(self.client_dirs.values()):
            self.commands[name] = [*CHILD, "node", "start", "--data-dir", str(self.node_dir(name))]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watch_chain)
            nursery.start_soon(self._sample_memory)
            for node in staked:
                self.start_node_process(node.name)
            self.timings["nodes_started_at"] = self.now()
            await self._wait_started(START_TIMEOUT)
            self.phase = "registering"
            await self.wait_registered(timeout=START_TIMEOUT)
            self.timings["network_ready_at"] = self.now()

            self.addresses = addresses

            async def submit(sub: Submission) -> None:
                await self.resubmit(sub)

            await self.read_balances("network ready")
            if self.chaos is not None:
                self.chaos.nursery = nursery  # a client killed before it opened its job submits it again here
                nursery.start_soon(self.chaos.run, self.chaos_schedule(), self.now())
                nursery.start_soon(self.chaos.watch_jobs)
            await self._run_jobs(submit, self.job_lifetime)
            if self.chaos is not None:
                self.phase = "waiting for the final deadlines"
                await wait_final(self, self.chaos)
                self.timings["final_wait_done_at"] = self.now()
            self.segments[-1].chain_now = await self.chain_time()
            await self.read_balances("end of the run")
            mismatches = await self.mismatches()
            nets = await trio.to_thread.run_sync(self.ledger.nets, self._settlement) \
                if self.options.settlement == "2" else {}
            nursery.cancel_scope.cancel()
        self._stop_all()
        for name, peak in self.peak_rss.items():
            self.infos[name].rss_bytes = peak
        node_peaks = sorted(self.peak_rss[n.name] for n in staked if n.name in self.peak_rss)
        client_peaks = [self.peak_rss[c] for c in self.client_dirs.values() if c in self.peak_rss]
        memory = {"mode": "processes", "per_node_bytes": node_peaks[len(node_peaks) // 2] if node_peaks else 0,
                  "median_node_rss_bytes": node_peaks[len(node_peaks) // 2] if node_peaks else 0,
                  "max_node_rss_bytes": node_peaks[-1] if node_peaks else 0,
                  "total_rss_bytes": sum(node_peaks) + sum(client_peaks)}
        self.recover_job_ids()
        records = self.records(memory)
        records.mismatches = mismatches
        records.nets = nets  # the auditors' replays (`records.audited`) stay in their processes
        return records

    async def resubmit(self, sub: Submission) -> None:
        """Run job ``sub``'s `gavel submit` (again, after a chaos kill before the job was opened)."""
        await self._submit(sub, self.plan.jobs[sub.index], self.addresses, self.env)

    def client_has_job(self, name: str) -> bool:
        """Whether the (stopped) client ``name`` holds a job row: a job it opened, or began to open."""
        return self.client_job_id(name) is not None

    def client_job_id(self, name: str) -> bytes | None:
        """The id of the job client ``name`` stored (one it opened, or began to open), read from its
        data directory: a `gavel submit` killed before it printed the id leaves it there alone."""
        from ..storage import Storage

        path = self.node_dir(name) / "gavel.db"
        if not path.exists():
            return None
        with Storage(path) as storage:
            jobs = storage.jobs(role=CLIENT)
        return jobs[0].job_id if jobs else None

    def start_node_process(self, name: str) -> subprocess.Popen:
        """Start (or start again, from its data directory) ``gavel node start`` for node ``name``."""
        with open(self.node_dir(name) / "process.log", "ab") as out:
            process = subprocess.Popen(self.commands[name], stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=self.env)
        self.processes[name] = process
        self.infos[name].pid = process.pid
        return process

    def fund_accounts(self) -> None:
        """Give every node's account ether for its stake, jobs and gas (blocking)."""
        from ..roles.chain import ETHER

        chain = self._binding.chain
        keyed = getattr(chain, "_keys", {})
        funders = [a for a in chain.accounts if a not in keyed]
        if not funders:
            return  # not a dev chain: the nodes' operators fund them
        for i, info in enumerate(self.infos.values()):
            if chain.balance(info.account) < FUNDING_ETHER * ETHER // 2:
                chain.transact(funders[i % len(funders)], info.account, b"", value=FUNDING_ETHER * ETHER, gas=21_000)

    async def _wait_started(self, timeout: float) -> None:
        from ..datadir import read_api
        from ..config import make_config

        pending = dict(self.processes)
        with trio.move_on_after(timeout):
            while pending:
                for name, process in list(pending.items()):
                    if process.poll() is not None:
                        raise LaunchError(f"{name} exited with status {process.returncode}; see "
                                          f"{self.node_dir(name) / 'process.log'}")
                    if read_api(make_config(self.node_dir(name))) is not None:
                        del pending[name]
                self.on_progress(self)
                await trio.sleep(0.5)
        if pending:
            raise LaunchError(f"{len(pending)} node(s) did not start within {timeout:g} s: {', '.join(sorted(pending))}")

    async def _submit(self, sub: Submission, job: JobPlan, addresses: dict[str, str], env: dict[str, str]) -> None:
        from ..roles.chain import ETHER

        name = self.client_dirs[job.index]
        o = self.submit_options([addresses[provider] for provider in job.providers])
        command = [*CHILD, "submit", sub.job_file, "--data-dir", str(self.node_dir(name)),
                   "--bootstrap", o.provider_addrs[0], "--providers", str(o.providers),
                   "--price", f"{o.price / ETHER:g}", "--stake", f"{o.stake / ETHER:g}",
                   "--accept-within", str(o.accept_within), "--commit-within", str(o.commit_within),
                   "--challenge-within", str(o.challenge_within), "--move-timeout", str(o.move_timeout),
                   "--clock", str(o.clock), "--step-cost-scale", str(o.step_cost_scale),
                   "--wait", "--json", "--log-level", "info"]
        for addr in o.provider_addrs:
            command += ["--provider", addr]
        log_path = self.node_dir(name) / "process.log"
        with open(log_path, "ab") as log_file:
            process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=log_file,
                                                       stdin=subprocess.DEVNULL, env=env)
            self.processes[name] = process  # type: ignore[assignment]
            self.infos[name].pid = process.pid
            output = b""
            try:
                async with process.stdout:  # type: ignore[union-attr]
                    async for chunk in process.stdout:  # type: ignore[union-attr]
                        output += chunk
                        for line in chunk.decode(errors="replace").splitlines():
                            self._note_submit_line(sub, line)
                await process.wait()
            finally:
                if process.returncode is None:
                    process.terminate()
        if self.chaos is not None and self.chaos.took_over(sub.index):
            return  # killed by the chaos, or its chain lost: the chaos says when the job is over
        lines = output.decode(errors="replace").splitlines()
        if lines and lines[-1].startswith("{"):
            sub.result = json.loads(lines[-1])
        elif process.returncode != 0:
            sub.error = f"gavel submit exited with status {process.returncode} (see {log_path})"
        sub.done_at = self.now()
        self.on_progress(self)

    def _note_submit_line(self, sub: Submission, line: str) -> None:
        """``job <id hex>: <state>`` lines name the job as soon as it is opened."""
        parts = line.split()
        if sub.job_id is None and len(parts) >= 2 and parts[0] == "job" and len(parts[1].rstrip(":")) == 64:
            sub.job_id = bytes.fromhex(parts[1].rstrip(":"))
            self.on_progress(self)

    async def _sample_memory(self) -> None:
        while True:
            for name, process in list(self.processes.items()):
                try:
                    _, peak = rss_bytes(process.pid)
                except (FileNotFoundError, ProcessLookupError):
                    continue
                self.peak_rss[name] = max(self.peak_rss.get(name, 0), peak)
            await trio.sleep(MEMORY_SAMPLE)

    def _stop_all(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is None:
                try:
                    _, peak = rss_bytes(process.pid)
                    self.peak_rss[name] = max(self.peak_rss.get(name, 0), peak)
                except (FileNotFoundError, ProcessLookupError):
                    pass
                process.send_signal(signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                if isinstance(process, subprocess.Popen):
                    process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %g s; killing it", name, STOP_TIMEOUT)
                process.kill()
                process.wait()
