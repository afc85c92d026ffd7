"""The chaos run's invariants: named checks, each with its evidence, over the chain's books.

A chaos run (`chaos`) kills nodes and once the chain; whatever it did, when the last
job's final deadline has passed these must hold:

- ``no_coin_locked``: every job of the surviving chain is final (finalized or refunded)
  and no account holds locked stake;
- ``no_wrong_result``: every result a client holds is the job's honest result;
- ``no_honest_loss``: no honest provider, auditor or client has less on the contract
  than it put in (stake back plus credits and withdrawals against deposits; a client's
  price counts as spent only on a job that delivered it the honest result). Gas is not
  counted: every party pays its own;
- ``escrow_back_or_verified``: every client's escrow came back in full, or paid for a
  job whose honest result the client holds;
- ``balance_sum``: at every reading, the contract's ether equals the stakes, credits and
  unsettled escrow of its events, the burn address gained what the slashes burned, and
  what came in equals what is held, burned and withdrawn.

A chain restart (a fresh anvil) ends a *segment*: its jobs, escrow and stakes die with
it by design and are listed as such, not counted as locked coins or losses; the balance
sum is checked on each segment while it lived. Pure functions over the ledger: no chain.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

from .ledger import Ledger
from .report import Submission

NO_COIN_LOCKED, NO_WRONG_RESULT, NO_HONEST_LOSS, ESCROW_BACK, BALANCE_SUM = (
    "no_coin_locked", "no_wrong_result", "no_honest_loss", "escrow_back_or_verified", "balance_sum")
INVARIANTS = (NO_COIN_LOCKED, NO_WRONG_RESULT, NO_HONEST_LOSS, ESCROW_BACK, BALANCE_SUM)


@dataclass
class BalanceRead:
    """The chain's ether and the ledger's books at one block."""

    label: str          # why it was read: "segment start", "before killing provider-01", ...
    at: float           # seconds since the network started
    block: int
    contract: int       # the settlement contract's ether balance
    burn: int           # the burn address's ether balance
    money: dict[str, int]  # `Ledger.money` fed up to ``block``


@dataclass
class Segment:
    """One chain's life in the run: the first anvil, or one started after a chain kill."""

    index: int
    ledger: Ledger
    started_at: float
    contract_at_start: int = 0       # the contract's ether when the ledger's story began
    burn_at_start: int = 0
    reads: list[BalanceRead] = field(default_factory=list)
    lost_at: float | None = None     # when the chain was killed (its jobs unrecoverable by design)
    chain_now: int | None = None     # chain time at the end of the run (surviving segment)


@dataclass
class Check:
    name: str
    ok: bool
    evidence: dict[str, Any]
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "evidence": self.evidence, "failures": self.failures}


def keeper_landed() -> bool:
    """Whether this tree has the keeper loop that settles stuck jobs (node/roles/keeper.py)."""
    return importlib.util.find_spec("node.roles.keeper") is not None


def check_no_coin_locked(segment: Segment, names: dict[str, str]) -> Check:
    ledger = segment.ledger
    now = segment.chain_now
    stuck, early = [], []
    for job in ledger.jobs.values():
        if job.settled:
            continue
        line = f"job {job.job_id.hex()[:12]} is {job.status.name}"
        if now is not None and now < job.final_deadline:
            early.append(f"{line}: the run ended {job.final_deadline - now} s before its final deadline")
        else:
            past = f" {now - job.final_deadline} s" if now is not None else ""
            stuck.append(f"{line}{past} past its final deadline: nobody settled it")
    locked = {names.get(a, a): b.locked for a, b in sorted(ledger.accounts.items()) if b.locked}
    failures = stuck + early + [f"{name} still has {amount} wei locked" for name, amount in locked.items()]
    if stuck and not keeper_landed():
        failures.append("no keeper in this tree (node/roles/keeper.py has not landed): a job whose own parties "
                        "did not settle it stays unsettled")
    evidence = {"jobs": len(ledger.jobs), "jobs_final": ledger.settled_jobs, "locked": locked,
                "chain_time_at_end": now,
                "last_final_deadline": max((j.final_deadline for j in ledger.jobs.values()), default=None)}
    return Check(NO_COIN_LOCKED, not failures, evidence, failures)


def _result_root(sub: Submission) -> bytes | None:
    root = (sub.result or {}).get("trace_root")
    return bytes.fromhex(root) if isinstance(root, str) and root else None


def check_no_wrong_result(submissions: list[Submission], honest_roots: dict[bytes, bytes]) -> Check:
    checked, failures = 0, []
    for sub in submissions:
        root = _result_root(sub)
        if root is None or sub.job_id is None:
            continue
        checked += 1
        honest = honest_roots.get(sub.job_id)
        if root != honest:
            failures.append(f"the client of job {sub.index} holds root {root.hex()[:16]}, the honest root is "
                            f"{honest.hex()[:16] if honest else 'unknown'}")
    return Check(NO_WRONG_RESULT, not failures, {"results_held": checked, "wrong": len(failures)}, failures)


def _served(sub: Submission | None, job_id: bytes, honest_roots: dict[bytes, bytes]) -> bool:
    """Did the job's client get the honest result (what its price paid for)?"""
    root = _result_root(sub) if sub is not None else None
    return root is not None and root == honest_roots.get(job_id)


def check_no_honest_loss(segment: Segment, submissions: list[Submission], honest_roots: dict[bytes, bytes],
                         honest_accounts: set[str], names: dict[str, str]) -> Check:
    ledger = segment.ledger
    by_job = {s.job_id: s for s in submissions if s.job_id is not None}
    nets: dict[str, int] = {}
    failures = []
    for account, book in sorted(ledger.accounts.items()):
        if account not in honest_accounts:
            continue
        # a price spent on a job that delivered the honest result bought what it was for
        bought = sum(j.price for j in ledger.jobs.values()
                     if j.client == account and j.status.name == "FINALIZED"
                     and _served(by_job.get(j.job_id), j.job_id, honest_roots))
        net = book.stake + book.credit + book.withdrawn + bought - book.deposited - book.escrowed
        nets[names.get(account, account)] = net
        if net < 0:
            causes = [f"slashed {s.amount} wei in job {s.job_id.hex()[:12]}"
                      + (" (no commitment by the commit deadline)" if s.dispute_id is None else f" (dispute {s.dispute_id})")
                      for s in ledger.slashes if s.loser == account]
            failures.append(f"{names.get(account, account)} is down {-net} wei" + (f": {'; '.join(causes)}" if causes else ""))
    evidence = {"net_wei": nets, "gas": "not counted (each party pays its own)"}
    return Check(NO_HONEST_LOSS, not failures, evidence, failures)


def check_escrow_back_or_verified(segment: Segment, submissions: list[Submission],
                                  honest_roots: dict[bytes, bytes]) -> Check:
    ledger = segment.ledger
    by_job = {s.job_id: s for s in submissions if s.job_id is not None}
    refunded = verified = 0
    failures = []
    for job in ledger.jobs.values():
        sub = by_job.get(job.job_id)
        label = f"job {sub.index if sub else job.job_id.hex()[:12]}"
        if job.status.name == "REFUNDED" and job.refunded >= job.price:
            refunded += 1
        elif job.status.name == "FINALIZED" and _served(sub, job.job_id, honest_roots):
            verified += 1
        elif job.status.name == "FINALIZED":
            failures.append(f"{label}: the client paid {job.price - job.refunded} wei and holds no honest result")
        elif job.status.name == "REFUNDED":
            failures.append(f"{label}: refunded {job.refunded} of {job.price} wei")
        else:
            failures.append(f"{label}: escrow of {job.price} wei still held ({job.status.name})")
    evidence = {"jobs": len(ledger.jobs), "refunded": refunded, "paid_for_verified_result": verified}
    return Check(ESCROW_BACK, not failures, evidence, failures)


def read_failures(read: BalanceRead, segment: Segment) -> list[str]:
    """How one reading breaks the balance sum (none when it holds). Counted from the segment's
    start: the process's embedded chain may hold earlier runs' ether."""
    m = read.money
    out = []
    gained = read.contract - segment.contract_at_start
    if gained != m["held"]:
        out.append(f"{read.label}: the contract gained {gained} wei, its events leave {m['held']} "
                   "(stakes + credits + unsettled escrow)")
    burned = read.burn - segment.burn_at_start
    if burned != m["burned"]:
        out.append(f"{read.label}: the burn address gained {burned} wei, slashes burned {m['burned']}")
    if m["deposited"] != m["held"] + m["burned"] + m["withdrawn"]:
        out.append(f"{read.label}: {m['deposited']} wei came in, {m['held'] + m['burned'] + m['withdrawn']} "
                   "are held, burned or withdrawn")
    return out


def check_balance_sum(segments: list[Segment]) -> Check:
    failures: list[str] = []
    rows = []
    for seg in segments:
        for read in seg.reads:
            broken = read_failures(read, seg)
            failures += [f"chain {seg.index}, {line}" for line in broken]
            rows.append({"chain": seg.index, "label": read.label, "at": round(read.at, 1), "block": read.block,
                         "contract_gained_wei": read.contract - seg.contract_at_start,
                         "burn_gained_wei": read.burn - seg.burn_at_start, **read.money, "ok": not broken})
    if not any(seg.reads for seg in segments):
        failures.append("the balances were never read")
    return Check(BALANCE_SUM, not failures, {"reads": rows}, failures)


def check_invariants(segments: list[Segment], submissions: list[Submission], honest_roots: dict[bytes, bytes],
                     honest_accounts: set[str], names: dict[str, str]) -> list[Check]:
    """Every invariant over the run; the last segment is the chain that survived it."""
    surviving = segments[-1]
    alive = {job_id for job_id in surviving.ledger.jobs}
    subs = [s for s in submissions if s.job_id in alive]
    return [
        check_no_coin_locked(surviving, names),
        check_no_wrong_result(subs, honest_roots),
        check_no_honest_loss(surviving, subs, honest_roots, honest_accounts, names),
        check_escrow_back_or_verified(surviving, subs, honest_roots),
        check_balance_sum(segments),
    ]


def lost_segments(segments: list[Segment], names: dict[str, str]) -> list[dict[str, Any]]:
    """What each killed chain took with it: unrecoverable by design, listed, never counted as locked."""
    out = []
    for seg in segments[:-1]:
        ledger = seg.ledger
        out.append({
            "chain": seg.index, "killed_at": seg.lost_at,
            "jobs": [j.job_id.hex() for j in ledger.jobs.values()],
            "jobs_unsettled": [j.job_id.hex() for j in ledger.jobs.values() if not j.settled],
            "escrow_unsettled_wei": sum(j.price for j in ledger.jobs.values() if not j.settled),
            "locked_wei": {names.get(a, a): b.locked for a, b in ledger.accounts.items() if b.locked},
            "note": "a restarted chain is a new chain: these jobs, their escrow and every stake on it are "
                    "unrecoverable by design",
        })
    return out


__all__ = ["BALANCE_SUM", "ESCROW_BACK", "INVARIANTS", "NO_COIN_LOCKED", "NO_HONEST_LOSS", "NO_WRONG_RESULT",
           "BalanceRead", "Check", "Segment", "check_invariants", "keeper_landed", "lost_segments", "read_failures"]
