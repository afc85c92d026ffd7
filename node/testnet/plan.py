"""Who plays what in a testnet, and which jobs it runs: a pure function of the options.

Nodes are named ``provider-NN``, ``auditor-NN`` and ``client-NN``; each node's 32-byte
seed derives from the testnet seed and its name, so the same options give the same
keys, accounts, cheaters, strategies and jobs on every run. The cheaters are
``cheaters`` of the providers, picked at random; their strategies are drawn from
`node.cheats.STRATEGIES` (all but ``honest``), each used once before any repeats.

Jobs are variants of one job file (the MLP of ``scripts/jobs/mlp.toml`` by default)
with the steps and checkpoint interval the testnet asks for and a seed of their own,
so every job is its own computation. Clients take them in turn, and each job names
the providers its client offers it to first (``replicas`` of them, in turn over a
shuffled list): every provider, cheaters included, gets its share of the work, where
a client left to itself would offer every job to the same cheapest providers.

On settlement version 2 (``settlement="2"``, `make_plan_v2`) the cheaters are one node per
strategy of `node.roles.v2.adversaries` (all of them by default): a provider per provider
strategy, beside at least two honest providers, the first of them ``slow`` (σ·1.6 a step),
a client per referee strategy and an auditor per challenger strategy, beside at least three
honest auditors; every job has two seats, a cheater's and an honest one's in turn, so each
strategy meets an honest seat it cannot copy, and a cheating client's job two honest ones.
"""
from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import blake3

from protocol.settings import DEFAULT_JOB_SETTINGS, JobSettings

from ..config import _toml_value  # the TOML writer of node settings serves job files too

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_JOB = REPO_ROOT / "scripts" / "jobs" / "mlp.toml"
# The table's settings, shortened where a testnet needs it: its jobs are a few steps long and
# many run at once on one machine, so fixed windows and a short dispute clock keep a run to
# minutes (the table's defaults are sized for real jobs on a busy CPU).
TESTNET_JOB_SETTINGS = JobSettings(accept_within=30.0, commit_within=60.0, challenge_within=30.0,
                                   move_timeout=20.0, clock=60.0, audit_rate=DEFAULT_JOB_SETTINGS.audit_rate)
PROVIDER, AUDITOR, CLIENT = "provider", "auditor", "client"


@dataclass(frozen=True)
class TestnetOptions:
    __test__ = False  # not a pytest test class, whatever its name
    nodes: int = 6            # providers
    cheaters: int = 2         # of the providers
    auditors: int = 1
    clients: int = 2
    jobs: int = 8
    audit_rate: float = TESTNET_JOB_SETTINGS.audit_rate  # fraction of a job's checkpoint intervals each auditor replays
    cheat_rate: float = 1.0   # fraction of its jobs a cheater cheats on
    replicas: int = 1         # providers per job
    seed: int = 0
    steps: int = 8
    checkpoint_every: int = 1
    job_file: Path = DEFAULT_JOB
    strategies: tuple[str, ...] = ()  # empty: every strategy of node.cheats but honest
    capacity: int = 2                 # jobs a provider trains at once
    stake: str = "100"                # ether each provider and auditor stakes
    # a job's windows and dispute clocks, in seconds (protocol.settings says what each means)
    accept_within: float = TESTNET_JOB_SETTINGS.accept_within
    commit_within: float = TESTNET_JOB_SETTINGS.commit_within
    challenge_within: float = TESTNET_JOB_SETTINGS.challenge_within
    move_timeout: float = TESTNET_JOB_SETTINGS.move_timeout
    clock: float = TESTNET_JOB_SETTINGS.clock
    max_running: int = 0              # jobs under way at once (0: no limit); the next waits for a slot
    chaos: bool = False               # kill and restart nodes (and, with processes, once the chain) during the run
    kills: int = 10                   # node kills of a chaos run
    settlement: str = "1"             # the settlement contract's version the nodes play ("1" or "2")

    def __post_init__(self) -> None:
        checks = [
            (self.nodes >= 1, "--nodes: at least one provider"),
            (0 <= self.cheaters <= self.nodes, "--cheaters: between 0 and --nodes"),
            (self.auditors >= 0, "--auditors: not negative"),
            (self.clients >= 1, "--clients: at least one"),
            (self.jobs >= 0, "--jobs: not negative"),
            (0.0 <= self.audit_rate <= 1.0, "--audit-rate: between 0 and 1"),
            (0.0 <= self.cheat_rate <= 1.0, "--cheat-rate: between 0 and 1"),
            (1 <= self.replicas <= self.nodes, "--replicas: between 1 and --nodes"),
            (self.steps >= 1 and self.checkpoint_every >= 1, "--steps and --checkpoint-every: positive"),
            (self.capacity >= 1, "--capacity: at least one job"),
            (self.max_running >= 0, "--max-running: not negative"),
            (self.kills >= 0, "--kills: not negative"),
            (self.settlement in ("1", "2"), "--settlement: 1 or 2"),
            (self.settlement == "1" or not self.chaos, "--chaos: settlement 1 only for now"),
            (min(self.accept_within, self.commit_within, self.challenge_within, self.move_timeout, self.clock) > 0,
             "job windows and dispute clocks: positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass(frozen=True)
class NodePlan:
    name: str
    role: str
    seed: bytes
    cheat: str = ""          # a strategy of node.cheats, for a cheating provider
    cheat_rate: float = 0.0

    @property
    def cheater(self) -> bool:
        from ..roles.v2.adversaries import HONEST_BEHAVIOURS

        return bool(self.cheat) and self.cheat not in HONEST_BEHAVIOURS


@dataclass(frozen=True)
class JobPlan:
    index: int
    client: str
    job_file: Path
    seed: int
    providers: tuple[str, ...] = ()  # offered the job first, in this order


@dataclass(frozen=True)
class TestnetPlan:
    __test__ = False
    options: TestnetOptions
    nodes: tuple[NodePlan, ...]
    jobs: tuple[JobPlan, ...] = field(default=())

    def of_role(self, role: str) -> list[NodePlan]:
        return [n for n in self.nodes if n.role == role]

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.name == name)


def node_seed(testnet_seed: int, name: str) -> bytes:
    return blake3.blake3(f"gavel/testnet/v1/{testnet_seed}/{name}".encode()).digest()


def cheat_strategies() -> list[str]:
    from ..cheats import STRATEGIES

    return [s for s in STRATEGIES if s != "honest"]


def cheat_strategies_v2() -> list[str]:
    """Every settlement-2 strategy: the providers', then the clients' and the auditors'."""
    from ..cheats import STRATEGIES
    from ..roles.v2.adversaries import CHALLENGER_BEHAVIOURS, REFEREE_BEHAVIOURS, strategy_names

    return strategy_names(STRATEGIES) + list(REFEREE_BEHAVIOURS) + list(CHALLENGER_BEHAVIOURS)


SEATS_V2 = 2  # a version-2 job's seats: a cheater's (or an honest one's) and an honest one's
MIN_HONEST_V2 = 2  # honest providers of a version-2 testnet: one slow, one at full speed
# Seconds a settlement-2 job may take from submission to settlement on the chain's own clock at the
# dev margin Δ: its windows (training, reveal, a whole replay, a demand, a game) derive from σ and Δ,
# and a run on a contract of another Δ (`Network.chain_margin`) stretches this in proportion.
JOB_LIFETIME_V2 = 1800.0


def make_plan_v2(options: TestnetOptions, jobs_dir: Path) -> TestnetPlan:
    """A settlement-2 testnet: one node per strategy (a provider's, a client's or an auditor's), beside
    honest ones: ``nodes`` providers less the cheating ones (at least two honest, the first slow), at
    least 2·MAX_DRAWS honest auditors (the witnesses and referees are drawn from them: a witness is
    no demander and a referee no party to the game, so a demand on a seat that refuses every witness
    needs MAX_DRAWS auditors beside its demander, or it voids and the seat is paid; the rest leave
    referees for games that several auditors joined), ``clients`` honest clients. Job i
    seats provider cheater i (while there are any) and an honest provider in turn; a cheating client
    submits a job of its own to two honest providers; ``jobs`` jobs, or as many as that takes if more."""
    from protocol.economics import MAX_DRAWS

    from ..roles.v2.adversaries import CHALLENGER_BEHAVIOURS, HONEST_BEHAVIOURS, REFEREE_BEHAVIOURS

    known = cheat_strategies_v2()
    strategies = list(dict.fromkeys(options.strategies)) or known
    unknown = [s for s in strategies if s not in known]
    if unknown:
        raise ValueError(f"unknown settlement-2 strategies: {', '.join(unknown)}; known: {', '.join(known)}")
    of_clients = [s for s in strategies if s in REFEREE_BEHAVIOURS]
    of_auditors = [s for s in strategies if s in CHALLENGER_BEHAVIOURS]
    of_providers = [s for s in strategies if s not in of_clients and s not in of_auditors]
    honest_count = max(MIN_HONEST_V2, options.nodes - len(of_providers))
    cheats = {PROVIDER: of_providers + [HONEST_BEHAVIOURS[0]] + [""] * (honest_count - 1),
              AUDITOR: [""] * max(options.auditors, 2 * MAX_DRAWS) + of_auditors,
              CLIENT: [""] * options.clients + of_clients}
    nodes = [NodePlan(f"{role}-{i:02d}", role, node_seed(options.seed, f"{role}-{i:02d}"), cheat,
                      1.0 if cheat else 0.0)
             for role in (PROVIDER, AUDITOR, CLIENT) for i, cheat in enumerate(cheats[role])]
    cheaters = [n.name for n in nodes if n.role == PROVIDER and n.cheater]
    honest = [n.name for n in nodes if n.role == PROVIDER and not n.cheater]
    honest_clients = [n.name for n in nodes if n.role == CLIENT and not n.cheat]
    cheating_clients = [n.name for n in nodes if n.role == CLIENT and n.cheat]
    jobs = []
    for i in range(max(options.jobs - len(cheating_clients), len(cheaters))):
        first = cheaters[i] if i < len(cheaters) else honest[(i + 1) % len(honest)]
        seats = (first, honest[i % len(honest)])
        jobs.append(_job(options, i, honest_clients[i % len(honest_clients)], seats, jobs_dir))
    for client in cheating_clients:
        i = len(jobs)
        jobs.append(_job(options, i, client, (honest[i % len(honest)], honest[(i + 1) % len(honest)]), jobs_dir))
    return TestnetPlan(options, tuple(nodes), tuple(jobs))


def make_plan(options: TestnetOptions, jobs_dir: Path) -> TestnetPlan:
    """The nodes and jobs of a testnet; writes the job files into ``jobs_dir``."""
    if options.settlement == "2":
        return make_plan_v2(options, jobs_dir)
    rng = random.Random(options.seed)
    names = {PROVIDER: [f"provider-{i:02d}" for i in range(options.nodes)],
             AUDITOR: [f"auditor-{i:02d}" for i in range(options.auditors)],
             CLIENT: [f"client-{i:02d}" for i in range(options.clients)]}
    cheaters = set(rng.sample(names[PROVIDER], options.cheaters))
    pool = list(options.strategies) or cheat_strategies()
    known = set(cheat_strategies())
    unknown = [s for s in pool if s not in known]
    if unknown:
        raise ValueError(f"unknown cheat strategies: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    drawn: list[str] = []
    nodes = []
    for role, role_names in names.items():
        for name in role_names:
            cheat = ""
            if name in cheaters:
                if not drawn:
                    drawn = rng.sample(pool, len(pool))
                cheat = drawn.pop()
            nodes.append(NodePlan(name, role, node_seed(options.seed, name), cheat,
                                  options.cheat_rate if cheat else 0.0))
    honest = [name for name in names[PROVIDER] if name not in cheaters]
    order = _spread(rng.sample(honest, len(honest)), rng.sample(sorted(cheaters), len(cheaters)))
    jobs = tuple(_job(options, i, names[CLIENT][i % options.clients],
                      tuple(order[(i * options.replicas + r) % len(order)] for r in range(options.replicas)), jobs_dir)
                 for i in range(options.jobs))
    return TestnetPlan(options, tuple(nodes), jobs)


def _spread(honest: list[str], cheaters: list[str]) -> list[str]:
    """Providers in the order jobs go to them, the cheaters evenly among the honest: with fewer jobs
    than providers, cheaters still get their share of the jobs (a 200-node run drew none by chance)."""
    total = len(honest) + len(cheaters)
    slots = {k * total // len(cheaters) for k in range(len(cheaters))}  # the first job goes to a cheater
    rest_honest, rest_cheaters = iter(honest), iter(cheaters)
    return [next(rest_cheaters) if i in slots else next(rest_honest) for i in range(total)]


def _job(options: TestnetOptions, index: int, client: str, providers: tuple[str, ...], jobs_dir: Path) -> JobPlan:
    seed = options.seed * 1_000_003 + index + 1
    path = jobs_dir / f"job-{index:03d}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(job_variant(options.job_file, steps=options.steps, checkpoint_every=options.checkpoint_every,
                                seed=seed, name=f"testnet-{index:03d}"))
    return JobPlan(index, client, path, seed, providers)


def job_variant(job_file: Path, *, steps: int, checkpoint_every: int, seed: int, name: str) -> str:
    """The job file with other steps, checkpoint interval, seed and name; data paths made absolute."""
    job_file = Path(job_file)
    with open(job_file, "rb") as f:
        tables = tomllib.load(f)
    tables["job"].update(steps=steps, checkpoint_interval=checkpoint_every, seed=seed, name=name)
    for key in ("path", "labels"):
        value = tables.get("data", {}).get(key)
        if isinstance(value, str) and value and not value.startswith("builtin:") and not Path(value).is_absolute():
            tables["data"][key] = str((job_file.parent / value).resolve())
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)

