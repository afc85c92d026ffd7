"""Starting a testnet on loopback, running its jobs, and gathering what happened.

Both modes run the real node (`node.runtime.Node` with its roles) from real data
directories under ``OUT/nodes/NAME``, real libp2p hosts on 127.0.0.1 and the real
settlement contract:

- in-process (`inprocess.InProcessNetwork`): every node a task of one trio process, all
  on the process's embedded EVM (or on anvil with ``--chain anvil``): many nodes, little memory;
- processes (`processes.ProcessNetwork`): every node its own ``gavel node start``
  process, on one anvil chain; each job goes in through its own ``gavel submit``.

Either way the testnet itself only watches: a poller reads the contract's events into
a `Ledger`, and when the jobs are over it reads the nodes' own rows (the auditors'
audits, the clients' verdicts and results) from their databases.

Topology: node i bootstraps to node i-1 and to two earlier nodes drawn from the seed,
so the graph is connected with a few links per node and no hub.
"""
from __future__ import annotations

import logging
import math
import os
import random
import shutil
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import trio

from ..config import make_config, setting_default
from ..datadir import init_datadir
from ..roles.chain import DEV_MARGIN_V2, ETHER, account_key, chain_failures
from .invariants import BalanceRead, Segment, read_failures
from .ledger import Ledger
from .plan import AUDITOR, CLIENT, JOB_LIFETIME_V2, PROVIDER, NodePlan, TestnetOptions, TestnetPlan
from .report import Audit, NodeInfo, Submission, audit_from_entry
from .sweep import samples_for

log = logging.getLogger(__name__)

MARKER = ".gavel-testnet"
POLL_INTERVAL = 0.5
BALANCE_READS, BALANCE_READ_AGAIN = 3, 1.0  # readings of the balances before one that does not add up counts; seconds between
EXTRA_LINKS = 2
OBSERVER = "observer"
PEER_RECORD_OFF = 1e9  # seconds
REFEREE_RECEIVED = ("open", "recv")  # log entries of a referee session that carry a party's move
# Every gossip message reaches every node, each delivery costing about a millisecond of Python (one
# in-process network of 50 idle nodes: 0.36 cores with no adverts, a whole core with 2 adverts a second).
# Repeated gossip therefore thins out as the network grows, keeping its deliveries near GOSSIP_DELIVERIES
# per second for each kind. Adverts: every job names the providers it is offered to, so adverts only keep
# clients' lists fresh. Job announcements and commitment notices: the first one goes out at once; repeats
# only cover a lost message.
ADVERT_INTERVAL = 5.0
REGOSSIP_INTERVAL = 10.0
GOSSIP_DELIVERIES = 12.0
# Many nodes share few cores (in-process: one event loop); a GossipSub heartbeat every 5 s instead of 1 s keeps
# the mesh's upkeep small. Messages still go out as they are published.
GOSSIP_HEARTBEAT = 5.0
# Each gossip message reaches a node about D times: 200 in-process nodes with D = 6 took 4.5 copies of every
# job announcement and commitment notice per node. Three still leaves every node several paths.
GOSSIP_DEGREE = 3
LAG_PROBE = 0.1  # seconds
# In one process every host shares one event loop: a dial or request takes loop turns that
# grow with the network (200 nodes: loop lag p99 1.5 s, every dial over the default 5 s).
IN_PROCESS_TIMEOUT_PER_NODE = 0.15  # seconds added to dial and request timeouts per node
# Seconds added per node sharing the loop to Δ of a run's own version-2 deployment: within Δ a node
# notices what it must answer and sends one transaction, and both wait their turn on the one loop
# (28 nodes with Δ = 10 s: honest providers missed the Δ reveal and the 2Δ first answer to a game).
IN_PROCESS_MARGIN_PER_NODE = 0.5
BURN_ADDRESS = "0x000000000000000000000000000000000000dEaD"  # GavelSettlement.BURN_ADDRESS
MAX_CHAIN_GAIN = 5.0  # seconds the chain's clock may gain on the wall clock before the next job is submitted


class LaunchError(RuntimeError):
    """The network could not be started as planned (a node that does not come up, a busy output folder)."""


def prepare_out_dir(out: Path) -> None:
    """Make ``out`` ready for a run: new, or a previous testnet's output (whose nodes and jobs go)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise LaunchError(f"{out} is not empty and holds no earlier testnet: choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("output of gavel testnet; its nodes/ and jobs/ are replaced by the next run\n")
    for sub in ("nodes", "jobs", "observer"):
        shutil.rmtree(out / sub, ignore_errors=True)


def new_ledger(options: TestnetOptions) -> Any:
    """The books of the settlement version the testnet plays."""
    from .ledger_v2 import LedgerV2

    return LedgerV2() if options.settlement == "2" else Ledger()


def new_anvil(options: TestnetOptions) -> Any:
    """A run's own anvil; on settlement 2 it makes a block each second, as a real chain does
    (a version-2 deadline passes only in a block made after it)."""
    from contracts import AnvilProcess

    return AnvilProcess(block_time=1 if options.settlement == "2" else None)


def account_of(seed: bytes) -> str:
    from eth_account import Account

    return Account.from_key(account_key(seed)).address


def peer_id_of(seed: bytes) -> str:
    from nacl.signing import SigningKey

    from ..datadir import peer_id_text

    return peer_id_text(bytes(SigningKey(seed).verify_key))


def advert_interval(plan: TestnetPlan) -> float:
    """Seconds between two adverts of one provider: ADVERT_INTERVAL, or longer in a large network. Counted
    on the plan's nodes (a settlement-2 plan has a provider per strategy, whatever --nodes says)."""
    return max(ADVERT_INTERVAL, len(plan.of_role(PROVIDER)) * _everyone(plan) / GOSSIP_DELIVERIES)


def regossip_interval(plan: TestnetPlan, running: int) -> float:
    """Seconds between two repeats of a job's announcement (its client), of a commitment notice (each
    provider of the job) or of a sampler's seat statements: REGOSSIP_INTERVAL, or longer when many of
    the ``running`` jobs run at once in a large network."""
    seats = max((len(job.providers) for job in plan.jobs), default=plan.options.replicas)
    return max(REGOSSIP_INTERVAL, running * (1 + seats) * _everyone(plan) / GOSSIP_DELIVERIES)


def _everyone(plan: TestnetPlan) -> int:
    """The nodes gossip reaches: the plan's, and the clients a --processes run leaves out of it (it
    starts them as processes of their own)."""
    return len(plan.nodes) + (0 if plan.of_role(CLIENT) else plan.options.clients)


def node_settings(node: NodePlan, plan: TestnetPlan, running: int, *, chain: str, listen: str,
                  bootstrap: list[str], log_file: str, shared_loop_nodes: int = 0,
                  contract: str | None = None) -> dict[str, Any]:
    """A node's settings in ``plan``, whose jobs run ``running`` at once; ``shared_loop_nodes``: how many
    nodes share its event loop (in-process); ``contract``: the run's own deployment (else the chain's
    canonical one)."""
    options = plan.options
    values: dict[str, Any] = {
        "roles": [node.role], "chain": chain, "listen": listen, "bootstrap": bootstrap, "stake": options.stake,
        "capacity": options.capacity, "advert_interval": advert_interval(plan),
        "regossip_interval": regossip_interval(plan, running), "metrics_listen": "",
        "log_file": log_file, "device": "cpu", "gossip_heartbeat": GOSSIP_HEARTBEAT,
        "gossip_degree": GOSSIP_DEGREE, "settlement": options.settlement,
    }
    if contract is not None:
        values["contract"] = contract
    if shared_loop_nodes:
        extra = IN_PROCESS_TIMEOUT_PER_NODE * shared_loop_nodes
        for name in ("dial_timeout", "request_timeout"):
            values[name] = setting_default(name) + extra
    if node.cheat:
        values["cheat"] = node.cheat
        if node.cheat_rate < 1.0:
            values["cheat_rate"] = node.cheat_rate  # refused by make_config until the provider offers it
    if node.role == AUDITOR:
        values["audit_rate"] = options.audit_rate
    return values


def init_node_dir(directory: Path, seed: bytes, values: dict[str, Any]):
    """The node's data directory, keyed with its planned seed (so its accounts follow from the testnet seed)."""
    from protocol import Identity

    from ..keyfile import write_key_file

    config = init_datadir(directory, values)
    write_key_file(config.key_file, Identity(seed), overwrite=True)
    return config


def bootstrap_links(count: int, seed: int) -> list[list[int]]:
    """For node i: the earlier nodes it dials (i-1 and up to EXTRA_LINKS others)."""
    rng = random.Random(seed)
    links: list[list[int]] = []
    for i in range(count):
        chosen = {i - 1} if i else set()
        others = [j for j in range(i - 1)]
        chosen.update(rng.sample(others, min(EXTRA_LINKS, len(others))))
        links.append(sorted(chosen))
    return links


def rss_bytes(pid: int | str = "self") -> tuple[int, int]:
    """(current, peak) resident memory of a process, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


@dataclass
class RunRecords:
    """Everything the launcher gathered; `report.Observed` is built from it and the truth."""

    nodes: list[NodeInfo]
    submissions: list[Submission]
    ledger: Ledger
    audits: list[Audit] = field(default_factory=list)
    verdicts: dict[int, dict] = field(default_factory=dict)
    run_dirs: dict[tuple[bytes, str], Path] = field(default_factory=dict)  # (job, provider account) -> run dir
    timings: dict[str, float] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)  # ledger vs contract
    segments: list[Segment] = field(default_factory=list)  # the chain's books, one per chain the run lived on
    chaos: Any = None  # the run's fault injector (its faults, the jobs lost with a chain), when it had one
    client_of: dict[int, str] = field(default_factory=dict)  # job index -> the node name of its client
    nets: dict[str, int] = field(default_factory=dict)  # settlement 2: account -> its net money (`LedgerV2.nets`)
    audited: dict[tuple[bytes, bytes], dict[int, bool]] = field(default_factory=dict)  # settlement 2: the auditors' replays
    contract: str = ""  # the settlement contract the run played on (its last chain's)
    margin: int = 0  # Δ of that contract, seconds (version 2)


ProgressHook = Callable[["Network"], None]


class Network:
    """One testnet run: the plan, its nodes' directories, the ledger and the submissions."""

    shared_loop_nodes = 0  # nodes whose hosts share one event loop (in-process: all of them)

    def __init__(self, plan: TestnetPlan, out: Path, *, chain: str = "embedded",
                 on_progress: ProgressHook | None = None) -> None:
        self.plan = plan
        self.options = plan.options
        self.out = Path(out)
        self.chain_kind = chain
        self.on_progress = on_progress or (lambda network: None)
        self.ledger = new_ledger(self.options)
        self.t0 = time.monotonic()
        self.phase = "starting"
        self.submissions: list[Submission] = []
        self.names: dict[str, str] = {}  # account -> node name
        self.infos: dict[str, NodeInfo] = {}
        self.configs: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self._settlement: Any = None
        self._binding: Any = None
        self.contract: str | None = None  # the run's own deployment, where it has one (`open_observer`)
        self.chain_margin = 0  # Δ of the contract the run plays on, seconds (version 2; `open_observer`)
        self.loop_lags: list[float] = []
        self.segments: list[Segment] = []  # one per chain the run lived on (a chaos run restarts it once)
        self._poll_lock = trio.Lock()  # a balance reading sees the ledger fed to its own block
        self._start_lead: float | None = None  # the chain clock's lead over the wall clock when the jobs began

    def now(self) -> float:
        return time.monotonic() - self.t0

    def node_dir(self, name: str) -> Path:
        return self.out / "nodes" / name

    def submit_options(self, provider_addrs: list[str]):
        from ..roles.client import SubmitOptions

        o = self.options
        move_timeout, clock = self.dispute_times()
        # version 2: a provider answers an offer after fetching the bundle, building the program, timing a step
        # and tracing the element specs, as slow here as the rest of its work
        accept_within = o.accept_within * (self.step_cost_scale if o.settlement == "2" else 1.0)
        providers = len(provider_addrs) if o.settlement == "2" else o.replicas  # v2: every planned provider a seat
        return SubmitOptions(providers=providers, price=ETHER, stake=ETHER, accept_within=accept_within,
                             commit_within=o.commit_within, challenge_within=o.challenge_within,
                             move_timeout=move_timeout, clock=clock, provider_addrs=provider_addrs,
                             step_cost_scale=self.step_cost_scale)

    def running_at_once(self) -> int:
        """Jobs under way at once: --max-running's, or `default_running`, never more than the jobs."""
        return max(1, min(len(self.plan.jobs), self.options.max_running or self.default_running()))

    def default_running(self) -> int:
        """Jobs under way at once unless --max-running says: all of them, or on settlement 2 as many as
        the providers' capacity seats at once, each with an honest seat (offers beyond it are refused,
        or time out on an overloaded provider, and a job short of seats is refunded unfilled)."""
        if self.options.settlement != "2":
            return len(self.plan.jobs)
        from .plan import SEATS_V2

        providers = self.plan.of_role(PROVIDER)
        seats = len(providers) * self.options.capacity
        honest_seats = sum(1 for n in providers if not n.cheater) * self.options.capacity  # one a job at least
        return max(1, min(len(self.plan.jobs), seats // SEATS_V2, honest_seats))

    @property
    def step_cost_scale(self) -> float:
        """How much slower than alone a node's work runs here: the nodes sharing this process's loop
        over its cores (version 2's windows derive from the step cost the terms declare)."""
        return max(1.0, self.shared_loop_nodes / (os.cpu_count() or 1))

    @property
    def margin(self) -> int:
        """Δ of the run's own version-2 deployment (`open_observer`), stretched when the nodes share one loop."""
        return DEV_MARGIN_V2 + math.ceil(IN_PROCESS_MARGIN_PER_NODE * self.shared_loop_nodes)

    def dispute_times(self) -> tuple[float, float]:
        """The jobs' dispute move timeout and per-party clock: the options', stretched like the nodes'
        request timeouts when the nodes share one loop, the clock in proportion (a move is a request:
        200 in-process nodes with 20 s moves and 40 s requests slashed two honest auditors on timeouts)."""
        o = self.options
        move_timeout = o.move_timeout + IN_PROCESS_TIMEOUT_PER_NODE * self.shared_loop_nodes
        return move_timeout, o.clock * move_timeout / o.move_timeout

    @property
    def job_lifetime(self) -> float:
        """Seconds a job may take from submission to settlement when a dispute runs to its ruling deadline."""
        from protocol.settings import JobSettings

        o = self.options
        if o.settlement == "2":  # its windows derive from σ and Δ: the Δ read from the run's contract
            return JOB_LIFETIME_V2 * self.chain_margin / DEV_MARGIN_V2
        move_timeout, clock = self.dispute_times()
        ruling = JobSettings(move_timeout=move_timeout, clock=clock).rules.ruling_period
        return o.accept_within + o.commit_within + o.challenge_within + ruling + 60

    # -- the observer: the contract's events ------------------------------------------------

    def open_observer(self, chain_setting: str, *, fresh: bool = False) -> None:
        """Bind to the contract (deploying it on a fresh chain) with the observer's own key, and start
        a segment of the run's books (blocking). ``fresh``: a chain started for this run, read from
        its first block."""
        from ..roles.chain import EMBEDDED, fresh_embedded_contract, open_binding_sync
        from .plan import node_seed

        values = {"chain": chain_setting, "settlement": self.options.settlement}
        if self.options.settlement == "2" and chain_setting == EMBEDDED and not fresh and self.contract is None:
            # witnesses and referees are drawn from the contract's registry: the run's own, not one that
            # an earlier network of this process (a test's, a sweep's) left its stopped nodes in
            self.contract = fresh_embedded_contract("2", self.margin)
        if self.contract is not None:
            values["contract"] = self.contract
        config = make_config(self.out / OBSERVER, values)
        self._binding = open_binding_sync(config, node_seed(self.options.seed, OBSERVER))
        self._binding.ensure_funds_sync(0)  # the embedded EVM refuses even a read from an account that cannot pay gas
        self._settlement = self._binding.settlement
        if self.options.settlement == "2":
            self.chain_margin = self._settlement.chain_settings().margin
        if fresh:
            self.ledger = new_ledger(self.options)  # a fresh chain: its whole story is this run's
        else:
            # The process's embedded chain outlives a run (a sweep runs several): this run's story starts now.
            self.ledger.last_block = self._binding.chain.block_number()
        start = max(0, self.ledger.last_block)
        contract, burn = self._balances_at(start)
        self.segments.append(Segment(len(self.segments), self.ledger, self.now(), contract, burn))

    def _balances_at(self, block: int) -> tuple[int, int]:
        """(the contract's ether, the burn address's ether) at ``block`` (blocking)."""
        from contracts.chain import _int

        chain, burn = self._binding.chain, BURN_ADDRESS
        address = self._settlement.address
        if hasattr(chain, "tester"):
            return chain.tester.get_balance(address, block), chain.tester.get_balance(burn, block)
        return (_int(chain.rpc("eth_getBalance", address, hex(block))),
                _int(chain.rpc("eth_getBalance", burn, hex(block))))

    async def poll_chain(self) -> int:
        async with self._poll_lock:
            return await self._poll_to(await self._binding.run(self._binding.chain.block_number))

    async def _poll_to(self, head: int) -> int:
        binding = self._binding
        if head <= self.ledger.last_block:
            return 0  # anvil refuses a log query that starts past its head
        events = await binding.run(self._settlement.events, self.ledger.last_block + 1, head)
        fed = self.ledger.feed(events, self.now())
        if fed:
            self.on_progress(self)
        return fed

    async def read_balances(self, label: str) -> BalanceRead:
        """The chain's ether and the ledger's books at the chain's head, as one reading of the
        current segment (the balance-sum invariant checks them). A reading that does not add
        up is taken again from a later head before it counts: anvil has answered for its
        newest block's balance before eth_getLogs gave that block's events (a chaos run: a
        stake in the contract's ether, its NodeRegistered missing, there a block later)."""
        for attempt in range(1, BALANCE_READS + 1):
            async with self._poll_lock:
                binding = self._binding
                head = await binding.run(binding.chain.block_number)
                await self._poll_to(head)
                contract, burn = await binding.run(self._balances_at, head)
                read = BalanceRead(label, self.now(), head, contract, burn, self.ledger.money())
            broken = read_failures(read, self.segments[-1])
            if not broken or attempt == BALANCE_READS:
                break
            log.info("balances %s at block %d do not add up (%s); reading them again", label, head, broken[0])
            await trio.sleep(BALANCE_READ_AGAIN)
        self.segments[-1].reads.append(read)
        return read

    async def watch_chain(self) -> None:
        while True:
            try:
                await self.poll_chain()
            except chain_failures() as error:  # a chain that went away (a chaos run kills it) is read again later
                log.info("reading the chain's events: %s", error)
            await trio.sleep(POLL_INTERVAL)

    async def _watch_chain_clock(self) -> None:
        while any(sub.done_at is None for sub in self.submissions):
            await self.chain_clock_gain()
            await trio.sleep(2.0)

    async def watch_loop_lag(self) -> None:
        """How late this process's trio loop wakes a sleeper: with every node in one loop, the sign of saturation."""
        while True:
            before = trio.current_time()
            await trio.sleep(LAG_PROBE)
            self.loop_lags.append(trio.current_time() - before - LAG_PROBE)

    def loop_lag_summary(self) -> dict[str, float]:
        lags = sorted(self.loop_lags)
        if not lags:
            return {}
        pick = lambda q: round(1000 * lags[min(len(lags) - 1, int(q * len(lags)))], 1)  # noqa: E731
        return {"loop_lag_p50_ms": pick(0.5), "loop_lag_p99_ms": pick(0.99), "loop_lag_max_ms": pick(1.0)}

    async def wait_registered(self, timeout: float) -> None:
        wanted = {self.infos[n.name].account for n in self.plan.nodes if n.role in (PROVIDER, AUDITOR)}
        with trio.move_on_after(timeout):
            while not wanted <= set(self.ledger.registered):
                await trio.sleep(POLL_INTERVAL)
        missing = sorted(self.names[a] for a in wanted - set(self.ledger.registered))
        if missing:
            raise LaunchError(f"{len(missing)} node(s) did not register on chain within {timeout:g} s: "
                              f"{', '.join(missing[:8])}")

    async def mismatches(self) -> list[str]:
        """Where the ledger's stakes, locks and credits differ from the contract's reads, the ledger
        first caught up to the chain's head. The contract answers at its newest block, and a node
        still running may land a transaction between the catch-up and the reads (a chaos run: a
        restarted provider's stake), so a difference counts only when a later reading repeats it."""
        for _ in range(BALANCE_READS - 1):
            if not (found := await self._read_mismatches()):
                return found
            log.info("ledger and contract differ (%s); reading them again", found[0])
            await trio.sleep(BALANCE_READ_AGAIN)
        return await self._read_mismatches()

    async def _read_mismatches(self) -> list[str]:
        async with self._poll_lock:
            await self._poll_to(await self._binding.run(self._binding.chain.block_number))
            return await self._binding.run(self.ledger.mismatches, self._settlement)

    # -- what the nodes recorded ------------------------------------------------------------

    def harvest(self) -> tuple[list[Audit], dict[int, dict], dict[bytes, dict]]:
        """The auditors' audits, the referees' verdict summaries and the clients' results, from the
        nodes' databases (blocking; the nodes may be stopped)."""
        from ..framing import unpack
        from ..storage import Storage
        from protocol import SignedJobTerms
        from protocol.wire import decode_struct

        audits: list[Audit] = []
        verdicts: dict[int, dict] = {}
        results: dict[bytes, dict] = {}
        for name, role in self.harvest_nodes():
            with Storage(self.node_dir(name) / "gavel.db") as storage:
                for job in storage.jobs(role=role):
                    record = unpack(job.spec)
                    if role == AUDITOR:
                        intervals = decode_struct(SignedJobTerms, record["terms"]).terms.schedule.intervals
                        samples = samples_for(self.options.audit_rate, intervals)
                        for entry in record.get("audits", {}).values():
                            audits.append(audit_from_entry(name, job.job_id, entry, intervals, samples))
                    else:
                        for verdict in record.get("verdicts", []):
                            verdicts.setdefault(verdict["chain_dispute"], {}).update(verdict)
                        if "result" in record:
                            results[job.job_id] = record["result"]
                        for row in storage.disputes(job_id=job.job_id):
                            session = unpack(row.state)
                            if session.get("kind") == "referee":  # its log holds every move it received
                                moves = [data for kind, _, data in session["log"] if kind in REFEREE_RECEIVED]
                                verdicts.setdefault(session["chain_dispute"], {}).update(
                                    bytes_to_referee=sum(len(m) for m in moves), moves_to_referee=len(moves))
        return audits, verdicts, results

    def harvest_nodes(self) -> list[tuple[str, str]]:
        """(name, role) of the nodes whose rows the report reads: auditors and clients."""
        return [(n.name, n.role) for n in self.plan.nodes if n.role in (AUDITOR, CLIENT)]

    def run_dirs(self) -> dict[tuple[bytes, str], Path]:
        from ..roles.jobfiles import RUN_DIR, job_dir

        out = {}
        for job in self.ledger.jobs.values():
            for provider in job.commits:
                name = self.names.get(provider)
                if name is not None:
                    out[(job.job_id, provider)] = job_dir(self.node_dir(name), job.job_id) / RUN_DIR
        return out

    def records(self, memory: dict[str, Any]) -> RunRecords:
        audits, verdicts, results = self.harvest()
        for sub in self.submissions:
            if sub.job_id is not None and sub.result is None:
                sub.result = results.get(sub.job_id)
        client_of = {job.index: job.client for job in self.plan.jobs}
        return RunRecords(list(self.infos.values()), self.submissions, self.ledger, audits,
                          verdicts, self.run_dirs(), dict(self.timings), memory, segments=self.segments,
                          chaos=getattr(self, "chaos", None), client_of=client_of | self.client_names(),
                          contract=self._settlement.address if self._settlement is not None else "",
                          margin=self.chain_margin)

    def client_names(self) -> dict[int, str]:
        """Job index -> the node name of its client, where it differs from the plan's."""
        return {}

    def _plan_nodes(self) -> None:
        for node in self.plan.nodes:
            account = account_of(node.seed)
            self.names[account] = node.name
            self.infos[node.name] = NodeInfo(node.name, node.role, account, peer_id_of(node.seed), node.cheat,
                                             node.cheat_rate)

    async def chain_time(self) -> int:
        """The chain's clock; 0 while the chain does not answer (a chaos run kills it once)."""
        async with self._poll_lock:
            try:
                return await self._binding.run(self._binding.chain.now)
            except chain_failures():
                return 0

    @asynccontextmanager
    async def chain_swap(self) -> AsyncIterator[None]:
        """Hold the observer off the chain while it is replaced (no reading sees half of two chains)."""
        async with self._poll_lock:
            yield

    def rebind_observer(self, chain_setting: str) -> None:
        """Join a fresh chain at ``chain_setting`` as a new segment of the run's books (blocking)."""
        if self._binding is not None:
            self._binding.close()
        self.open_observer(chain_setting, fresh=True)

    async def chain_clock_gain(self) -> float:
        """Seconds the chain's clock has gained on this machine's since the jobs began."""
        now = await self.chain_time()
        if not now:
            return 0.0  # no chain to read: nothing gained
        lead = now - time.time()
        if self._start_lead is None:
            self._start_lead = lead
        gain = lead - self._start_lead
        self.timings["chain_clock_gain_max_s"] = max(self.timings.get("chain_clock_gain_max_s", 0.0), gain)
        return gain

    async def _run_jobs(self, submit: Callable[[Submission], Any], deadline: float) -> None:
        """Submit every planned job (staggered) and wait until each is settled or the deadline passes.

        The embedded EVM mines a block per transaction, each a second after the last, so
        a burst of transactions pushes its clock ahead of the wall clock and every job's
        windows (in chain seconds) shrink. Submissions wait while the chain's lead has grown
        by more than MAX_CHAIN_GAIN since the run began: only the growth shrinks windows, and
        the process's embedded chain may start far ahead (earlier runs, tests that moved its clock).
        """
        self.phase = "running jobs"
        self.timings["jobs_started_at"] = self.now()
        stagger = min(1.0, self.options.accept_within / max(4, len(self.plan.jobs)))
        limit = self.running_at_once()
        self._start_lead = None
        await self.chain_clock_gain()  # sets the lead the jobs start with
        # A chain ahead of the wall clock stands still while nothing is sent, so every window
        # also waits out that lead (200 nodes registering in one process: about 6 minutes).
        lead = max(0.0, self._start_lead or 0.0)
        self.timings["chain_lead_at_jobs_s"] = round(lead, 1)
        with trio.move_on_after(deadline + lead):
            async with trio.open_nursery() as nursery:
                for job in self.plan.jobs:
                    while await self.chain_clock_gain() > MAX_CHAIN_GAIN or \
                            sum(sub.done_at is None for sub in self.submissions) >= limit:
                        await trio.sleep(1.0)
                    sub = Submission(job.index, job.client, str(job.job_file), self.now())
                    self.submissions.append(sub)
                    nursery.start_soon(submit, sub)
                    await trio.sleep(stagger)
                nursery.start_soon(self._watch_chain_clock)
        self.timings["jobs_done_at"] = self.now()
        self.phase = "gathering"
        await self.poll_chain()
        self.on_progress(self)


__all__ = ["LaunchError", "Network", "RunRecords", "bootstrap_links", "prepare_out_dir"]
