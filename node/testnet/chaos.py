"""Chaos: the faults a ``gavel testnet --chaos`` run injects, drawn from its seed, and how
the network recovered from each.

The schedule (`plan_faults`) is a pure function of the seed, the number of kills and the
span of the jobs: each fault has a time (seconds after the jobs began), a kind of victim
(a provider, auditor or client node; in processes mode once the chain) and how long the
victim stays down. Which node of that kind is hit is drawn when the fault fires, among
the nodes of that kind then up (a client is up while its job is under way).

A node fault is a kill -9 of the node's process (in-process: the cancellation of its
task) and, after the delay, a restart from the same data directory. The chain fault
kills anvil and starts a fresh one on the same port: a new chain, on which every job of
the old one is unrecoverable by design.

After the run `describe_recovery` says, for each fault, what became of the victim's jobs,
read from the chain's books (`ledger`) and the nodes' own rows.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from .invariants import Segment
from .plan import AUDITOR, CLIENT, PROVIDER
from .report import Audit, Submission

CHAIN = "chain"
# how often each kind of node is hit: providers hold the most state (seats, runs, commitments)
KIND_WEIGHTS = {PROVIDER: 3, AUDITOR: 1, CLIENT: 2}
DOWN_FOR = (2.0, 8.0)   # seconds a killed node stays down, drawn in this range
FIRST_FAULT = 3.0       # seconds after the jobs began
SETTLE_GRACE = 45.0     # seconds after the last final deadline for the parties (or a keeper) to settle


@dataclass(frozen=True)
class PlannedFault:
    at: float        # seconds after the jobs began
    kind: str        # PROVIDER, AUDITOR, CLIENT or CHAIN
    pick: int        # which of the nodes of that kind up at ``at`` (modulo their number)
    down_for: float  # seconds before the restart


def plan_faults(seed: int, kills: int, span: float, *, kinds: tuple[str, ...], chain_at: float | None) -> list[PlannedFault]:
    """``kills`` node faults spread over ``span`` seconds of jobs, plus a chain fault at ``chain_at``
    (None: no chain fault); ``kinds``: the kinds of node the network has."""
    if kills < 0:
        raise ValueError("--kills: not negative")
    rng = random.Random(f"gavel/testnet/chaos/{seed}")
    weights = [KIND_WEIGHTS[k] for k in kinds]
    faults = []
    for i in range(kills):
        # one fault per slot of the span, at a random point of its slot: spread, not bunched
        slot = (span - FIRST_FAULT) / max(1, kills)
        at = FIRST_FAULT + slot * (i + rng.random())
        faults.append(PlannedFault(round(at, 2), rng.choices(kinds, weights)[0], rng.randrange(1 << 30),
                                   round(rng.uniform(*DOWN_FOR), 2)))
    if chain_at is not None:
        faults.append(PlannedFault(round(chain_at, 2), CHAIN, 0, round(rng.uniform(*DOWN_FOR), 2)))
    return sorted(faults, key=lambda f: f.at)


def schedule_for(options: Any, *, chain_fault: bool,
                 kinds: tuple[str, ...] = (PROVIDER, AUDITOR, CLIENT)) -> list[PlannedFault]:
    """The run's faults: ``options.kills`` node kills over the jobs' expected span (the jobs in
    waves of ``max_running``, each wave its three windows), and with ``chain_fault`` the chain
    killed once, while the first wave is training (its jobs are lost, the later waves run on
    the new chain)."""
    o = options
    running = o.max_running or o.jobs or 1
    waves = -(-max(1, o.jobs) // running)
    life = o.accept_within + o.commit_within + o.challenge_within
    kinds = tuple(k for k, n in ((PROVIDER, o.nodes), (AUDITOR, o.auditors), (CLIENT, o.jobs)) if n and k in kinds)
    chain_at = o.accept_within + o.commit_within / 2 if chain_fault else None
    # the first wave dies with the chain, so the later ones start then
    span = chain_at + (waves - 1) * life if chain_at is not None and waves > 1 else waves * life
    return plan_faults(o.seed, o.kills, span, kinds=kinds, chain_at=chain_at)


async def wait_final(net: Any, chaos: Any) -> None:
    """Wait until every fault of ``chaos`` fired and every killed node is back, then until every job
    of the network's chain is final or its last final deadline (chain time) passed by SETTLE_GRACE."""
    import trio

    while True:
        await net.poll_chain()
        jobs = list(net.ledger.jobs.values())
        if chaos.schedule_done:
            if jobs and all(j.settled for j in jobs):
                return
            last = max((j.final_deadline for j in jobs), default=0)
            now = await net.chain_time()
            if now > last + SETTLE_GRACE:
                return
            net.phase = f"waiting for the final deadlines ({max(0, last - now)} s left)"
        else:
            net.phase = "waiting for the last faults"
        net.on_progress(net)
        await trio.sleep(2.0)


@dataclass
class Fault:
    """One fault as it happened (times in seconds since the network started)."""

    index: int
    kind: str
    target: str              # node name, or "anvil"
    at: float
    down_for: float
    pid: int | None = None
    restarted_at: float | None = None
    new_pid: int | None = None
    detail: str = ""         # what was under way, or why nothing was hit
    recovery: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def choose_victim(planned: PlannedFault, up: dict[str, list[str]]) -> tuple[str, str] | None:
    """(kind, name) of the node ``planned`` hits: one of its kind that is up, else one of another kind."""
    order = [planned.kind] + [k for k in (PROVIDER, CLIENT, AUDITOR) if k != planned.kind]
    for kind in order:
        names = sorted(up.get(kind, []))
        if names:
            return kind, names[planned.pick % len(names)]
    return None


# -- how the network recovered ------------------------------------------------------------


def _t(value: float | None) -> str:
    return f"{value:.1f} s" if value is not None else "never"


def describe_recovery(fault: Fault, segments: list[Segment], accounts: dict[str, str],
                      submissions: list[Submission], audits: list[Audit], client_of: dict[int, str]) -> list[str]:
    """What became of the victim's jobs (``accounts``: node name -> account; ``client_of``: job
    index -> the name of its client node)."""
    if fault.kind == CHAIN:
        return _chain_recovery(fault, segments)
    lines = [f"restarted at {_t(fault.restarted_at)}" if fault.restarted_at is not None
             else "not restarted before the run ended"]
    segment = _segment_at(segments, fault.at)
    ledger = segment.ledger
    lost = segment is not segments[-1]
    account = accounts.get(fault.target)
    if fault.kind == PROVIDER:
        for job in ledger.jobs.values():
            taken = job.accepted.get(account)
            if taken is None or taken > fault.at or (job.settled_at is not None and job.settled_at < fault.at):
                continue
            what = f"job {job.job_id.hex()[:12]}: "
            commit = job.commits.get(account)
            if lost:
                what += "lost with the chain restart (unrecoverable by design)"
            elif commit is not None:
                when = "before the kill" if commit[1] <= fault.at else "after the kill"
                what += f"its root committed at {_t(commit[1])} ({when})"
            else:
                what += "never committed"
            forfeits = [s for s in job.slashes if s.loser == account]
            if forfeits:
                what += f"; seat forfeited ({'no commitment' if forfeits[0].dispute_id is None else 'lost a dispute'})"
            if not lost:
                what += f"; job {job.status.name} at {_t(job.settled_at)}"
            lines.append(what)
    elif fault.kind == AUDITOR:
        for job in ledger.jobs.values():
            if job.opened_at > fault.at or (job.settled_at is not None and job.settled_at < fault.at):
                continue
            states = sorted({a.state for a in audits if a.auditor == fault.target and a.job_id == job.job_id})
            lines.append(f"job {job.job_id.hex()[:12]} was under way: its audit ended "
                         f"{'/'.join(states) if states else 'missing'}; job {job.status.name}")
    if fault.kind in (PROVIDER, AUDITOR) and len(lines) == 1:
        lines.append("no job of its was under way")
    elif fault.kind == CLIENT:
        for sub in submissions:
            if client_of.get(sub.index) != fault.target:
                continue
            job = ledger.jobs.get(sub.job_id) if sub.job_id else None
            if lost:
                lines.append(f"job {sub.index}: lost with the chain restart at {_t(segment.lost_at)} "
                             "(unrecoverable by design)")
                continue
            if job is None:
                lines.append(f"job {sub.index}: never opened on chain")
                continue
            held = "holds a result" if (sub.result or {}).get("trace_root") else "holds no result"
            lines.append(f"job {sub.index}: {job.status.name} at {_t(job.settled_at)}; the client {held}")
    return lines


def chaos_report(records: Any, honest_roots: dict[bytes, bytes], lost: list[Submission]) -> dict[str, Any]:
    """The report's ``chaos`` section: every fault and how the network recovered, the jobs lost
    with a chain restart, and the invariants with their evidence. ``lost``: the submissions
    whose job died with a chain (not judged as jobs of the surviving chain)."""
    from .invariants import check_invariants, keeper_landed, lost_segments

    chaos = records.chaos
    names = {n.account: n.name for n in records.nodes}
    accounts = {n.name: n.account for n in records.nodes}
    honest_accounts = {n.account for n in records.nodes if not n.cheat}
    everyone = records.submissions + lost
    faults = chaos.faults if chaos is not None else []
    for fault in faults:
        fault.recovery = describe_recovery(fault, records.segments, accounts, everyone, records.audits,
                                           records.client_of)
    checks = check_invariants(records.segments, records.submissions, honest_roots, honest_accounts, names)
    return {
        "kills": sum(f.kind != CHAIN and bool(f.target) for f in faults),
        "chain_restarts": sum(f.kind == CHAIN for f in faults),
        "faults": [f.as_dict() for f in faults],
        "lost_with_chain": {"segments": lost_segments(records.segments, names),
                            "jobs": [{"index": s.index, "job_id": s.job_id.hex() if s.job_id else None} for s in lost]},
        "invariants": [c.as_dict() for c in checks],
        "invariants_ok": all(c.ok for c in checks),
        "keeper_in_tree": keeper_landed(),
    }


def _segment_at(segments: list[Segment], at: float) -> Segment:
    for seg in segments:
        if seg.lost_at is None or at < seg.lost_at:
            return seg
    return segments[-1]


def _chain_recovery(fault: Fault, segments: list[Segment]) -> list[str]:
    old = _segment_at(segments, fault.at - 1e-6) if fault.at else segments[0]
    new = next((s for s in segments if s.started_at >= fault.at), None)
    unsettled = [j for j in old.ledger.jobs.values() if not j.settled]
    lines = [f"a fresh chain answered at {_t(fault.restarted_at)} on the same port",
             f"{len(unsettled)} unsettled job(s) of the old chain lost with it, unrecoverable by design: "
             + (", ".join(j.job_id.hex()[:12] for j in unsettled) or "none")]
    if new is not None:
        joined = sorted(new.ledger.registered)
        lines.append(f"{len(joined)} node(s) registered on the new chain; "
                     f"{len(new.ledger.jobs)} job(s) opened on it")
    return lines


__all__ = ["CHAIN", "Fault", "PlannedFault", "chaos_report", "choose_victim", "describe_recovery", "plan_faults", "schedule_for", "wait_final"]
