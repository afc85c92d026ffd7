"""Judging a testnet run and writing report.json.

Everything is judged against the testnet's own recomputation (`truth`), never against
what the nodes claim:

- a committed trace root is a *cheat* when it differs from the honest run's root;
- a cheat was *audited* when an auditor's replay sampled one of its corrupted
  intervals (or replayed the whole job, or found the mismatch), or when it was disputed;
- it was *caught* when its provider was slashed in that job;
- a slash hit an *honest* node when the loser committed the honest root, or challenged
  a root that really was wrong, or (a seat never committed) did not cheat on purpose;
- a cheat that was not audited has a *reason*: ``sampled out`` when every audit of it
  finished and no sample held a corrupted interval (the risk the audit rate buys down,
  `protocol.sampling`); otherwise the network failed to look (no audit at all, an audit
  that failed, or one still unfinished when the run ended), which is a failure of the run;
- a client was *served* when it holds the honest result or got its price back. A client
  that holds a cheat's result which no audit sampled was *missed*.

``summary.ok`` holds when no honest node was slashed, every audited cheat was caught,
every unaudited cheat was sampled out, and every client was served or missed.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contracts import JobStatus, Outcome
from protocol import miss_probability

from ..atomic_file import write_atomic
from .ledger import DisputeRecord, Ledger, SlashRecord
from .truth import HonestRun, ReplayedRun

REPORT_FORMAT = "gavel-testnet-report/1"
# what an auditor's final states mean for the report
AUDIT_FOUND = ("mismatch", "challenged")   # it saw the provider's run depart from the job
AUDIT_DONE = ("ok",) + AUDIT_FOUND
# why a cheat went unaudited; only the first is the risk the audit rate accounts for
SAMPLED_OUT, NO_AUDITOR, AUDIT_FAILED, AUDIT_UNFINISHED = (
    "sampled out", "no auditor audited it", "audit failed", "audit unfinished when the run ended")
UNAUDITED_KINDS = (SAMPLED_OUT, NO_AUDITOR, AUDIT_FAILED, AUDIT_UNFINISHED)


@dataclass
class NodeInfo:
    name: str
    role: str
    account: str
    peer_id: str
    cheat: str = ""
    cheat_rate: float = 0.0
    pid: int | None = None
    rss_bytes: int | None = None  # peak resident memory of its process (processes mode)


@dataclass
class Submission:
    index: int
    client: str
    job_file: str
    submitted_at: float                 # seconds since the network started
    job_id: bytes | None = None
    error: str | None = None
    done_at: float | None = None
    result: dict | None = None          # the client's own summary of the settled job


@dataclass
class Audit:
    auditor: str
    job_id: bytes
    provider: str                       # account
    state: str
    intervals: int                      # C of the job
    sample: tuple[int, ...] | None      # the intervals it replayed, when known
    detail: str = ""
    samples: int | None = None          # how many it draws (its audit rate's), when the sample is not known

    def __post_init__(self) -> None:
        if self.sample is not None:
            self.samples = len(self.sample)

    @property
    def whole_job(self) -> bool:
        return self.sample is not None and len(self.sample) == self.intervals


@dataclass
class Observed:
    """What a run produced: the launcher's records, the chain's ledger, the nodes' own rows, the truth."""

    nodes: list[NodeInfo]
    submissions: list[Submission]
    ledger: Ledger
    honest: dict[bytes, HonestRun]                     # job id -> honest run
    replays: dict[tuple[bytes, str], ReplayedRun] = field(default_factory=dict)  # (job, provider) -> its run replayed
    audits: list[Audit] = field(default_factory=list)
    verdicts: dict[int, dict] = field(default_factory=dict)  # chain dispute id -> the referee's summary


# -- judging ----------------------------------------------------------------------------------


@dataclass
class CommitVerdict:
    """One committed trace root, judged."""

    job_id: bytes
    provider: str
    root: bytes
    honest: bool
    corrupted: tuple[int, ...] = ()
    intervals: int = 0
    audits: list[Audit] = field(default_factory=list)
    disputed: bool = False
    caught: bool = False

    @property
    def audited(self) -> bool:
        corrupted = set(self.corrupted)
        return self.disputed or any(
            a.state in AUDIT_FOUND or (a.state in AUDIT_DONE and a.sample is not None and corrupted & set(a.sample))
            for a in self.audits)

    @property
    def unaudited_kind(self) -> str:
        """Why nobody looked at this cheat where it was wrong, as one of `UNAUDITED_KINDS` ("" when looked at)."""
        if self.honest or self.audited:
            return ""
        if not self.audits:
            return NO_AUDITOR
        states = {a.state for a in self.audits}
        if states <= set(AUDIT_DONE):
            return SAMPLED_OUT
        return AUDIT_FAILED if "failed" in states else AUDIT_UNFINISHED

    @property
    def unaudited_reason(self) -> str:
        """`unaudited_kind` with the audit that did not finish, for the report's reader."""
        kind = self.unaudited_kind
        if kind not in (AUDIT_FAILED, AUDIT_UNFINISHED):
            return kind
        a = next(a for a in self.audits if a.state == "failed" or (kind == AUDIT_UNFINISHED and a.state not in AUDIT_DONE))
        return f"{kind}: {a.auditor} ({a.state}{', ' + a.detail if a.detail else ''})"

    @property
    def sampled_sizes(self) -> list[int]:
        """The sample size of each auditor that finished its audit of this run."""
        return [a.samples for a in self.audits if a.samples is not None and a.state in AUDIT_DONE]

    @property
    def predicted_catch(self) -> float | None:
        """P(some auditor's sample holds a corrupted interval), by protocol.sampling; None without audits."""
        sizes = self.sampled_sizes
        if self.honest or not sizes or not self.corrupted:
            return None
        miss = 1
        for m in sizes:
            miss *= miss_probability(self.intervals, len(self.corrupted), m)
        return float(1 - miss)


def _sample_of(entry_sample: Any, detail: str) -> tuple[int, ...] | None:
    if isinstance(entry_sample, (list, tuple)):
        return tuple(int(c) for c in entry_sample)
    found = re.search(r"replayed intervals \[([0-9, ]*)\]", detail or "")
    if found:
        return tuple(int(c) for c in found.group(1).replace(" ", "").split(",") if c)
    return None


def audit_from_entry(auditor: str, job_id: bytes, entry: dict, intervals: int, samples: int | None = None) -> Audit:
    """An auditor's row for one provider (``record["audits"][key]``) as the report sees it.

    ``samples``: the sample size the auditor's audit rate gives, for rows that do not list
    the intervals drawn (an audit that found a mismatch names where, not what it drew)."""
    detail = str(entry.get("detail", ""))
    sample = _sample_of(entry.get("sample"), detail)
    if sample is None and detail == "whole job replayed":
        sample = tuple(range(intervals))
    return Audit(auditor, job_id, str(entry.get("account", "")), str(entry.get("state", "")), intervals, sample,
                 detail, samples)


def judge_commits(observed: Observed) -> list[CommitVerdict]:
    ledger = observed.ledger
    out = []
    for job_id, job in ledger.jobs.items():
        honest = observed.honest.get(job_id)
        disputed_parties = {(d.respondent, d.challenger) for d in map(ledger.disputes.get, job.disputes)}
        slashed = {s.loser for s in job.slashes}
        for provider, (root, _) in job.commits.items():
            verdict = CommitVerdict(job_id, provider, root, honest is not None and root == honest.root,
                                    intervals=honest.intervals if honest else 0)
            if not verdict.honest:
                replay = observed.replays.get((job_id, provider))
                if replay is not None:
                    verdict.corrupted = replay.corrupted
            verdict.audits = [a for a in observed.audits if a.job_id == job_id and a.provider == provider]
            verdict.disputed = any(provider in pair for pair in disputed_parties)
            verdict.caught = provider in slashed
            out.append(verdict)
    return out


def _slash_was_honest(slash: SlashRecord, ledger: Ledger, honest_roots: dict[bytes, bytes],
                      cheaters: set[str]) -> bool:
    """Did the loser of this slash do its part honestly in that job?"""
    job = ledger.jobs[slash.job_id]
    honest_root = honest_roots.get(slash.job_id)
    own = job.commits.get(slash.loser)
    if slash.dispute_id is None:  # a seat never committed: only a deliberate cheater may be absent
        return slash.loser not in cheaters
    dispute: DisputeRecord = ledger.disputes[slash.dispute_id]
    if slash.loser == dispute.respondent:
        return own is not None and own[0] == honest_root
    theirs = job.commits.get(dispute.respondent)
    challenged_a_cheat = theirs is not None and theirs[0] != honest_root
    own_ok = own is None or own[0] == honest_root  # an auditor has no seat; a provider challenger has one
    return challenged_a_cheat and own_ok


@dataclass
class ClientOutcome:
    index: int
    job_id: bytes | None
    outcome: str        # "honest result", "refund", "missed cheat", or "unserved"
    reason: str = ""


def judge_clients(observed: Observed, commits: list[CommitVerdict]) -> list[ClientOutcome]:
    ledger = observed.ledger
    cheat_roots = {(c.job_id, c.root): c for c in commits if not c.honest}
    out = []
    for sub in observed.submissions:
        if sub.job_id is None or sub.job_id not in ledger.jobs:
            out.append(ClientOutcome(sub.index, sub.job_id, "unserved", sub.error or "the job never opened on chain"))
            continue
        job = ledger.jobs[sub.job_id]
        honest = observed.honest.get(sub.job_id)
        result_root = bytes.fromhex(sub.result["trace_root"]) if sub.result and sub.result.get("trace_root") else None
        if job.status == JobStatus.REFUNDED:
            outcome = ClientOutcome(sub.index, sub.job_id, "refund") if job.refunded == job.price else \
                ClientOutcome(sub.index, sub.job_id, "unserved", f"refunded {job.refunded} of {job.price}")
        elif job.status != JobStatus.FINALIZED:
            outcome = ClientOutcome(sub.index, sub.job_id, "unserved", f"not settled ({job.status.name})")
        elif result_root is None:
            outcome = ClientOutcome(sub.index, sub.job_id, "unserved", "settled, but the client holds no result")
        elif honest is not None and result_root == honest.root:
            outcome = ClientOutcome(sub.index, sub.job_id, "honest result")
        else:
            cheat = cheat_roots.get((sub.job_id, result_root))
            if cheat is not None and not cheat.audited:
                outcome = ClientOutcome(sub.index, sub.job_id, "missed cheat", cheat.unaudited_reason)
            else:
                outcome = ClientOutcome(sub.index, sub.job_id, "unserved", "the client holds a result that is not the job's")
        out.append(outcome)
    return out


def summarize(observed: Observed) -> dict[str, Any]:
    commits = judge_commits(observed)
    cheats = [c for c in commits if not c.honest]
    honest_roots = {job_id: run.root for job_id, run in observed.honest.items()}
    cheaters = {n.account for n in observed.nodes if n.cheat}
    honest_slashes = [s for s in observed.ledger.slashes
                      if _slash_was_honest(s, observed.ledger, honest_roots, cheaters)]
    clients = judge_clients(observed, commits)
    audited = [c for c in cheats if c.audited]
    missed_audit = [c for c in audited if not c.caught]
    unlooked = [c for c in cheats if c.unaudited_kind not in ("", SAMPLED_OUT)]
    kinds = [c.unaudited_kind for c in cheats]
    unserved = [c for c in clients if c.outcome == "unserved"]
    # a job no provider took: providers with free capacity exist in every plan, so the network failed it
    jobs = observed.ledger.jobs
    unfilled = [sub for sub in observed.submissions
                if (job := jobs.get(sub.job_id)) is not None and len(job.accepted) < job.providers_wanted]
    summary = {
        "jobs": len(observed.submissions),
        "jobs_settled": observed.ledger.settled_jobs,
        "commitments": len(commits),
        "cheats": len(cheats),
        "cheats_audited": len(audited),
        "cheats_caught": sum(c.caught for c in cheats),
        "cheats_unaudited": len(cheats) - len(audited),
        "cheats_sampled_out": len(cheats) - len(audited) - len(unlooked),
        "unaudited_reasons": {kind: kinds.count(kind) for kind in UNAUDITED_KINDS if kinds.count(kind)},
        "disputes": len(observed.ledger.disputes),
        "slashes": len(observed.ledger.slashes),
        "honest_slashed": len(honest_slashes),
        "clients_served": sum(c.outcome in ("honest result", "refund") for c in clients),
        "clients_refunded": sum(c.outcome == "refund" for c in clients),
        "clients_missed": sum(c.outcome == "missed cheat" and c.reason == SAMPLED_OUT for c in clients),
        "clients_unserved": len(unserved),
        "jobs_unfilled": len(unfilled),
    }
    summary["ok"] = not honest_slashes and not missed_audit and not unlooked and not unserved and not unfilled
    summary["failures"] = (
        [f"honest node {s.loser} slashed in job {s.job_id.hex()[:12]}" for s in honest_slashes]
        + [f"audited cheat of {c.provider} in job {c.job_id.hex()[:12]} not slashed" for c in missed_audit]
        + [f"cheat of {c.provider} in job {c.job_id.hex()[:12]} unaudited: {c.unaudited_reason}" for c in unlooked]
        + [f"client of job {c.index} unserved: {c.reason}" for c in unserved]
        + [f"job {sub.index} found no provider before its acceptance deadline" for sub in unfilled])
    return summary


# -- report.json ----------------------------------------------------------------------------


def _hex(value: bytes | None) -> str | None:
    return value.hex() if value is not None else None


def build_report(observed: Observed, *, config: dict[str, Any], timings: dict[str, Any],
                 scale: dict[str, Any] | None = None) -> dict[str, Any]:
    ledger = observed.ledger
    names = {n.account: n.name for n in observed.nodes}
    commits = judge_commits(observed)
    by_job: dict[bytes, list[CommitVerdict]] = {}
    for c in commits:
        by_job.setdefault(c.job_id, []).append(c)
    clients = {c.index: c for c in judge_clients(observed, commits)}

    def name(account: str) -> str:
        return names.get(account, account)

    jobs = []
    for sub in observed.submissions:
        job = ledger.jobs.get(sub.job_id) if sub.job_id else None
        honest = observed.honest.get(sub.job_id) if sub.job_id else None
        entry: dict[str, Any] = {
            "index": sub.index, "job_id": _hex(sub.job_id), "client": sub.client, "job_file": sub.job_file,
            "submitted_at": sub.submitted_at, "error": sub.error, "honest_root": _hex(honest.root) if honest else None,
            "intervals": honest.intervals if honest else None,
            "client_outcome": clients[sub.index].outcome, "client_reason": clients[sub.index].reason,
            "client_result": sub.result,
        }
        if job is not None:
            entry.update({
                "status": job.status.name, "price": job.price, "provider_stake": job.provider_stake,
                "opened_at": job.opened_at, "settled_at": job.settled_at,
                "submit_to_settled_s": (job.settled_at - sub.submitted_at) if job.settled_at is not None else None,
                "accepted": {name(p): t for p, t in job.accepted.items()},
                "commitments": [{
                    "provider": name(c.provider), "account": c.provider, "trace_root": c.root.hex(),
                    "committed_at": job.commits[c.provider][1], "honest": c.honest,
                    "corrupted_intervals": list(c.corrupted), "audited": c.audited if not c.honest else None,
                    "unaudited_reason": c.unaudited_reason or None,
                    "disputed": c.disputed, "slashed": c.caught, "predicted_catch": c.predicted_catch,
                    "audits": [{"auditor": a.auditor, "state": a.state, "sample": list(a.sample) if a.sample is not None
                                else None, "detail": a.detail} for a in c.audits],
                } for c in by_job.get(job.job_id, [])],
                "disputes": job.disputes,
                "paid": {name(p): amount for p, amount in job.paid.items()},
                "refunded": job.refunded,
            })
        jobs.append(entry)

    disputes = []
    for d in ledger.disputes.values():
        summary = observed.verdicts.get(d.dispute_id, {})
        disputes.append({
            "dispute_id": d.dispute_id, "job_id": d.job_id.hex(), "challenger": name(d.challenger),
            "respondent": name(d.respondent), "bond": d.bond, "opened_at": d.opened_at, "closed_at": d.closed_at,
            "duration_s": (d.closed_at - d.opened_at) if d.closed_at is not None else None,
            "outcome": "lapsed" if d.lapsed else d.outcome.name, "losers": [name(x) for x in d.losers],
            "step": d.step, "node": d.node, "transcript_hash": d.transcript_hash.hex() if d.transcript_hash else None,
            "rounds": summary.get("rounds"), "bytes_to_referee": summary.get("bytes_to_referee"),
            "moves_to_referee": summary.get("moves_to_referee"),
            "depth": summary.get("depth"), "faults": summary.get("faults", []),
        })

    slashes = [{"job_id": s.job_id.hex(), "loser": name(s.loser), "amount": s.amount,
                "beneficiary": name(s.beneficiary), "to_beneficiary": s.to_beneficiary, "burned": s.burned,
                "at": s.at, "dispute_id": s.dispute_id} for s in ledger.slashes]
    payments = [{"job_id": job.job_id.hex(), "to": name(p), "amount": amount, "kind": "paid", "at": job.settled_at}
                for job in ledger.jobs.values() for p, amount in job.paid.items()]
    payments += [{"job_id": job.job_id.hex(), "to": name(job.client), "amount": job.refunded, "kind": "refund",
                  "at": job.settled_at} for job in ledger.jobs.values() if job.refunded]
    balances = {name(account): {"columns": ["t", "stake", "locked", "credit", "withdrawn"], "rows": book.history}
                for account, book in sorted(ledger.accounts.items())}
    return {
        "format": REPORT_FORMAT,
        "config": config,
        "timings": timings,
        "summary": summarize(observed),
        "nodes": [asdict(n) for n in observed.nodes],
        "jobs": jobs,
        "disputes": disputes,
        "slashes": slashes,
        "payments": payments,
        "balances": balances,
        "scale": scale or {},
    }


def write_report(report: dict[str, Any], out_dir: Path) -> Path:
    path = Path(out_dir) / "report.json"
    write_atomic(path, json.dumps(report, indent=1, default=_json_default) + "\n")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (Outcome, JobStatus)):
        return value.name
    raise TypeError(f"cannot write {type(value).__name__} to report.json")


__all__ = ["Audit", "NodeInfo", "Observed", "Submission", "audit_from_entry", "build_report", "judge_clients",
           "judge_commits", "summarize", "write_report"]
