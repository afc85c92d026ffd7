"""What the settlement contract says happened, rebuilt from its events.

`Ledger.feed` takes the contract's events in chain order, each with the wall time
(seconds since the network started) at which the testnet saw it, and keeps:

- per job: who opened it, who took seats, every committed trace root, its disputes,
  payments, refunds and slashes, and when it was settled;
- per dispute: the parties, the bond, the outcome, where the verdict located the fault;
- per account: stake, locked stake and credit after every event that moved them.

The account figures follow the contract's rules (``GavelSettlement.sol``: a seat or a
challenge locks stake, a slash takes it from stake and lock, payments and refunds are
credits). `mismatches` compares them with the contract's own reads, so a report's
balance plot is checked against the chain rather than trusted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from contracts import (
    ClientRefunded, DisputeLapsed, DisputeOpened, DisputeRuled, JobAdvanced, JobOpened, JobStatus, LoggedEvent,
    NodeExited, NodeRegistered, Outcome, ProviderAccepted, ProviderPaid, StakeAdded, StakeSlashed, StakeUnlocked,
    TraceCommitted, Withdrawn,
)


@dataclass
class AccountBook:
    """One account's money on the contract, and its history as (t, stake, locked, credit, withdrawn) rows.

    ``credit + withdrawn`` is everything the contract ever paid the account.
    """

    stake: int = 0
    locked: int = 0
    credit: int = 0
    withdrawn: int = 0
    deposited: int = 0  # stake the account sent in (register, addStake)
    escrowed: int = 0   # prices the account sent in as a client (openJob)
    history: list[tuple[float, int, int, int, int]] = field(default_factory=list)

    @property
    def earned(self) -> int:
        return self.credit + self.withdrawn

    def record(self, at: float) -> None:
        row = (at, self.stake, self.locked, self.credit, self.withdrawn)
        if self.history and self.history[-1][0] == at:
            self.history[-1] = row  # several events of one moment: keep the last state
        else:
            self.history.append(row)


@dataclass
class SlashRecord:
    job_id: bytes
    loser: str
    amount: int
    beneficiary: str
    to_beneficiary: int
    burned: int
    at: float
    dispute_id: int | None  # the dispute whose verdict slashed; None: slashed at settlement (no commitment)


@dataclass
class DisputeRecord:
    dispute_id: int
    job_id: bytes
    challenger: str
    respondent: str
    bond: int
    opened_at: float
    outcome: Outcome = Outcome.NONE
    lapsed: bool = False
    step: int = 0
    node: int = 0
    transcript_hash: bytes = b""
    closed_at: float | None = None

    @property
    def open(self) -> bool:
        return self.closed_at is None

    @property
    def losers(self) -> tuple[str, ...]:
        return {
            Outcome.CHALLENGER_WINS: (self.respondent,),
            Outcome.RESPONDENT_WINS: (self.challenger,),
            Outcome.BOTH_LOSE: (self.challenger, self.respondent),
        }.get(self.outcome, ())


@dataclass
class JobRecord:
    job_id: bytes
    client: str
    price: int
    provider_stake: int
    providers_wanted: int
    opened_at: float
    accepted: dict[str, float] = field(default_factory=dict)         # provider -> when
    commits: dict[str, tuple[bytes, float]] = field(default_factory=dict)  # provider -> (trace root, when)
    disputes: list[int] = field(default_factory=list)
    status: JobStatus = JobStatus.OPEN
    settled_at: float | None = None
    paid: dict[str, int] = field(default_factory=dict)
    refunded: int = 0
    slashes: list[SlashRecord] = field(default_factory=list)
    challenge_by: int = 0   # chain time after which no challenge comes
    ruling_period: int = 0  # a dispute opened by challenge_by is ruled or lapses this much later

    @property
    def final_deadline(self) -> int:
        """Chain time after which anyone can bring the job to a final state (lapse its disputes, settle it)."""
        return self.challenge_by + self.ruling_period

    @property
    def settled(self) -> bool:
        return self.status in (JobStatus.FINALIZED, JobStatus.REFUNDED)


class EventBooks:
    """What the ledgers of both settlement versions keep alike: the accounts' books, fed with
    the contract's events in chain order (`_apply`: each version's rules)."""

    def __init__(self) -> None:
        self.accounts: dict[str, AccountBook] = {}
        self.registered: dict[str, NodeRegistered] = {}
        self.jobs: dict[bytes, Any] = {}
        self.slashes: list[SlashRecord] = []
        self.events = 0
        self.last_block = -1

    def book(self, account: str) -> AccountBook:
        return self.accounts.setdefault(account, AccountBook())

    def feed(self, logged: Iterable[LoggedEvent], at: float) -> int:
        """Apply events in chain order; returns how many were new (a repeated block is skipped)."""
        logged = list(logged)
        applied = 0
        for item in logged:
            if item.block_number <= self.last_block:
                continue  # a poll that overlaps the previous one
            account = self._account_event(item.event)
            if account is not None:
                self.book(account).record(at)
            else:
                self._apply(item, at)
            applied += 1
        if applied:
            self.last_block = max(self.last_block, max(i.block_number for i in logged))
            self.events += applied
        return applied

    def _account_event(self, e: Any) -> str | None:
        """An event of the node registry, alike in both versions: the account it moved, or None
        when ``e`` is none of them."""
        if isinstance(e, NodeRegistered):
            self.registered[e.account] = e
            book = self.book(e.account)
            book.stake, book.deposited = e.stake, book.deposited + e.stake
        elif isinstance(e, StakeAdded):
            book = self.book(e.account)
            book.stake, book.deposited = e.stake, book.deposited + e.amount
        elif isinstance(e, NodeExited):
            book = self.book(e.account)
            book.credit += e.stake_credited
            book.stake = 0
        else:
            return None
        return e.account

    def _apply(self, item: LoggedEvent, at: float) -> None:
        """Any other event, by the version's rules."""
        raise NotImplementedError

    @property
    def settled_jobs(self) -> int:
        return sum(1 for j in self.jobs.values() if j.settled)


class Ledger(EventBooks):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[bytes, JobRecord] = {}
        self.disputes: dict[int, DisputeRecord] = {}
        self._ruled_in: dict[bytes, int] = {}  # tx hash -> the dispute ruled in it

    def _apply(self, item: LoggedEvent, at: float) -> None:
        e: Any = item.event
        moved: list[str] = []
        if isinstance(e, JobOpened):
            self.jobs[e.job_id] = JobRecord(e.job_id, e.client, e.price, e.provider_stake, e.providers_wanted, at,
                                            challenge_by=e.challenge_by, ruling_period=e.ruling_period)
            self.book(e.client).escrowed += e.price
        elif isinstance(e, ProviderAccepted):
            self.jobs[e.job_id].accepted[e.provider] = at
            self.book(e.provider).locked += e.locked
            moved.append(e.provider)
        elif isinstance(e, TraceCommitted):
            self.jobs[e.job_id].commits[e.provider] = (e.trace_root, at)
        elif isinstance(e, DisputeOpened):
            self.disputes[e.dispute_id] = DisputeRecord(e.dispute_id, e.job_id, e.challenger, e.respondent, e.bond, at)
            self.jobs[e.job_id].disputes.append(e.dispute_id)
            if e.bond:
                self.book(e.challenger).locked += e.bond
                moved.append(e.challenger)
        elif isinstance(e, DisputeRuled):
            d = self.disputes[e.dispute_id]
            d.outcome, d.step, d.node, d.transcript_hash, d.closed_at = e.outcome, e.step, e.node, e.transcript_hash, at
            self._ruled_in[item.tx_hash] = e.dispute_id
        elif isinstance(e, DisputeLapsed):
            d = self.disputes[e.dispute_id]
            d.lapsed, d.closed_at = True, at
        elif isinstance(e, StakeSlashed):
            slash = SlashRecord(e.job_id, e.loser, e.amount, e.beneficiary, e.to_beneficiary, e.burned, at,
                                self._ruled_in.get(item.tx_hash))
            self.slashes.append(slash)
            self.jobs[e.job_id].slashes.append(slash)
            loser = self.book(e.loser)
            loser.stake -= e.amount
            loser.locked -= e.amount
            moved.append(e.loser)
            if e.to_beneficiary:
                self.book(e.beneficiary).credit += e.to_beneficiary
                moved.append(e.beneficiary)
        elif isinstance(e, StakeUnlocked):
            self.book(e.account).locked -= e.amount
            moved.append(e.account)
        elif isinstance(e, ProviderPaid):
            self.jobs[e.job_id].paid[e.provider] = e.amount
            self.book(e.provider).credit += e.amount
            moved.append(e.provider)
        elif isinstance(e, ClientRefunded):
            self.jobs[e.job_id].refunded += e.amount
            self.book(e.client).credit += e.amount
            moved.append(e.client)
        elif isinstance(e, Withdrawn):
            book = self.book(e.account)
            book.credit -= e.amount
            book.withdrawn += e.amount
            moved.append(e.account)
        elif isinstance(e, JobAdvanced):
            job = self.jobs[e.job_id]
            job.status = e.status
            if job.settled:
                job.settled_at = at
        for account in moved:
            self.book(account).record(at)

    # -- views --------------------------------------------------------------------------

    @property
    def open_disputes(self) -> int:
        return sum(1 for d in self.disputes.values() if d.open)

    def money(self) -> dict[str, int]:
        """Where the ether sent to the contract is, by the events: ``held`` (stakes, credits and
        unsettled escrow: what the contract's balance must be), ``burned`` (sent to the burn
        address) and ``withdrawn``; together they are ``deposited`` (stakes and escrow sent in)."""
        books = self.accounts.values()
        held = (sum(b.stake + b.credit for b in books)
                + sum(j.price for j in self.jobs.values() if not j.settled))
        return {"deposited": sum(b.deposited + b.escrowed for b in books), "held": held,
                "burned": sum(s.burned for s in self.slashes), "withdrawn": sum(b.withdrawn for b in books)}

    def mismatches(self, settlement: Any) -> list[str]:
        """Where this ledger's stake, lock or credit differs from the contract's own reads (blocking)."""
        out = []
        for account, book in sorted(self.accounts.items()):
            node = settlement.node(account)
            credit = settlement.credit_of(account)
            if (node.stake, node.locked, credit) != (book.stake, book.locked, book.credit):
                out.append(f"{account}: ledger stake/locked/credit {book.stake}/{book.locked}/{book.credit}, "
                           f"contract {node.stake}/{node.locked}/{credit}")
        return out
