"""What settlement version 2 says happened, rebuilt from its events (`ledger.py` is version 1's).

`LedgerV2.feed` takes GavelSettlementV2's events in chain order and keeps, per job, its
client, price and stake, every seat (taken, committed, revealed root, forfeit reason, pay),
its demands and games, and, per account, the ether it sent in (``deposited``: register and
addStake; ``escrowed``: the prices of the jobs it opened) and took out (``withdrawn``).

Version 2 moves credit in ways its events do not itemise (a served demand's fees, a won
path's gas reimbursements, a game's fees), so an account's money is not summed from
events: `nets` reads each account's stake and credit from the contract and adds what the
events say it sent in and took out:

    net = stake + credit + escrow of its unsettled jobs + withdrawn − deposited − escrowed

What the events do say is checked against the chain: `mismatches` compares every account's
stake as its events leave it (registration, stake added, slashes, forfeited bonds) with the
contract's read, and `money` gives the ether the contract must hold by the events (sent in,
less withdrawn and burned) for the testnet's balance check (`invariants.read_failures`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts import LoggedEvent, StakeSlashed, Withdrawn
from contracts.records import ClientRefunded, ProviderPaid, StakeUnlocked
from contracts.settlement_v2 import (
    ForfeitReason, JobOpened, JobSettled, JobStatus, SeatForfeited, SeatTaken, TraceCommitted, TraceRevealed,
)
from contracts.settlement_v2_demands import DataDemanded, DemandAttested, DemandFailed, DemandReleased, DemandVoided, WitnessTimedOut
from contracts.settlement_v2_games import BondForfeited, ClaimResolved, GameOpened
from contracts.settlement_v2_referees import AppealSettled, RefereeTimedOut

from .ledger import EventBooks, SlashRecord


@dataclass
class SeatRecord:
    account: str
    taken_at: float
    committed_at: float | None = None
    root: bytes | None = None        # the revealed trace root
    revealed_at: float | None = None
    forfeit: ForfeitReason = ForfeitReason.NONE
    paid: int = 0


@dataclass
class DemandRecord:
    demand_id: bytes
    job_id: bytes
    seat: str
    demander: str
    item: int
    bond: int
    at: float
    outcome: str = "open"            # served (released or attested), failed, void
    refusers: list[str] = field(default_factory=list)  # witnesses that attested "not served", in order


@dataclass
class GameRecord:
    """A game on one revealed root's interval; ``challenger``/``respondent`` as version 1's disputes
    (the display reads them)."""

    game_id: bytes
    job_id: bytes
    root: bytes
    interval: int
    challenger: str                  # the opener
    respondent: str                  # a seat that revealed the root ("" if none did)
    opened_at: float
    closed_at: float | None = None

    @property
    def open(self) -> bool:
        return self.closed_at is None


@dataclass
class JobRecordV2:
    job_id: bytes
    client: str
    price: int
    provider_stake: int
    providers_wanted: int
    opened_at: float
    seats: dict[str, SeatRecord] = field(default_factory=dict)
    status: JobStatus = JobStatus.OPEN
    settled_at: float | None = None
    refunded: int = 0
    slashes: list[SlashRecord] = field(default_factory=list)
    demands: list[bytes] = field(default_factory=list)
    games: list[bytes] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        return self.status in (JobStatus.FINALIZED, JobStatus.REFUNDED)

    @property
    def accepted(self) -> dict[str, float]:
        return {a: s.taken_at for a, s in self.seats.items()}

    @property
    def commits(self) -> dict[str, tuple[bytes, float]]:
        """Revealed roots (version 2's commitments open only at the reveal): seat -> (root, when)."""
        return {a: (s.root, s.revealed_at) for a, s in self.seats.items()
                if s.root is not None and s.revealed_at is not None}

    @property
    def paid(self) -> dict[str, int]:
        return {a: s.paid for a, s in self.seats.items() if s.paid}


class LedgerV2(EventBooks):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[bytes, JobRecordV2] = {}
        self.disputes: dict[bytes, GameRecord] = {}  # the games, by id
        self.demands: dict[bytes, DemandRecord] = {}
        self.burned = 0
        self._root_seat: dict[tuple[bytes, bytes], str] = {}

    def _apply(self, item: LoggedEvent, at: float) -> None:
        e: Any = item.event
        moved: list[str] = []
        if isinstance(e, Withdrawn):
            book = self.book(e.account)
            book.credit = max(0, book.credit - e.amount)
            book.withdrawn += e.amount
            moved.append(e.account)
        elif isinstance(e, JobOpened):
            t = e.terms
            self.jobs[e.job_id] = JobRecordV2(e.job_id, e.client, t.price, t.provider_stake, t.providers_wanted, at)
            self.book(e.client).escrowed += t.price
        elif isinstance(e, SeatTaken):
            self.jobs[e.job_id].seats[e.seat] = SeatRecord(e.seat, at)
            self.book(e.seat).locked += e.locked
            moved.append(e.seat)
        elif isinstance(e, TraceCommitted):
            self.jobs[e.job_id].seats[e.seat].committed_at = at
        elif isinstance(e, TraceRevealed):
            seat = self.jobs[e.job_id].seats[e.seat]
            seat.root, seat.revealed_at = e.trace_root, at
            self._root_seat.setdefault((e.job_id, e.trace_root), e.seat)
        elif isinstance(e, SeatForfeited):
            self.jobs[e.job_id].seats[e.seat].forfeit = ForfeitReason(e.reason)
        elif isinstance(e, StakeUnlocked):
            self.book(e.account).locked -= e.amount
            moved.append(e.account)
        elif isinstance(e, StakeSlashed):
            slash = SlashRecord(e.job_id, e.loser, e.amount, e.beneficiary, e.to_beneficiary, e.burned, at, None)
            self.slashes.append(slash)
            if e.job_id in self.jobs:
                self.jobs[e.job_id].slashes.append(slash)
            self._take(e.loser, e.amount, e.burned, moved)
            self.book(e.beneficiary).credit += e.to_beneficiary
            moved.append(e.beneficiary)
        elif isinstance(e, ProviderPaid):
            self.jobs[e.job_id].seats[e.provider].paid = e.amount
            self.book(e.provider).credit += e.amount
            moved.append(e.provider)
        elif isinstance(e, ClientRefunded):
            self.jobs[e.job_id].refunded += e.amount
            self.book(e.client).credit += e.amount
            moved.append(e.client)
        elif isinstance(e, JobSettled):
            job = self.jobs[e.job_id]
            job.status, job.settled_at = JobStatus(e.status), at
        elif isinstance(e, DataDemanded):
            self.demands[e.demand_id] = DemandRecord(e.demand_id, e.job_id, e.seat, e.demander, e.item, e.bond, at)
            self.jobs[e.job_id].demands.append(e.demand_id)
        elif isinstance(e, DemandAttested) and not e.served:
            # a refusal attested ends nothing: another witness is drawn, or the demand fails
            self.demands[e.demand_id].refusers.append(e.witness)
        elif isinstance(e, (DemandReleased, DemandFailed, DemandVoided, DemandAttested)):
            d = self.demands[e.demand_id]
            d.outcome = {DemandFailed: "failed", DemandVoided: "void"}.get(type(e), "served")
            if isinstance(e, DemandAttested):
                # the demander pays the witness and the seat's calls; each refuser the contradicted
                # witness pays its D (the seat's redraw, the rest back to it as credit)
                for account in (d.demander, *d.refusers):
                    self._take(account, d.bond, 0, moved)
        elif isinstance(e, GameOpened):
            respondent = self._root_seat.get((e.job_id, e.trace_root), "")
            self.disputes[e.game_id] = GameRecord(e.game_id, e.job_id, e.trace_root, e.interval, e.opener,
                                                  respondent, at)
            self.jobs[e.job_id].games.append(e.game_id)
        elif isinstance(e, ClaimResolved):
            if e.claim_id in self.disputes:  # a game's own claim resolved: the game is over
                self.disputes[e.claim_id].closed_at = at
        elif isinstance(e, BondForfeited):
            self._take(e.author, e.bond, e.burned, moved)
        elif isinstance(e, (RefereeTimedOut, WitnessTimedOut)):
            self._take(e.referee if isinstance(e, RefereeTimedOut) else e.witness, e.burned, e.burned, moved)
        elif isinstance(e, AppealSettled):
            self._take(e.loser, e.amount, e.burned, moved)
        for account in moved:
            self.book(account).record(at)

    def _take(self, account: str, amount: int, burned: int, moved: list[str]) -> None:
        """``amount`` leaves the account's stake (a slash or a forfeited bond), ``burned`` of it to the burn address."""
        self.book(account).stake -= amount
        self.burned += burned
        moved.append(account)

    # -- views --------------------------------------------------------------------------

    @property
    def open_disputes(self) -> int:
        return sum(1 for g in self.disputes.values() if g.open)

    def escrow_of(self, account: str) -> int:
        """Prices of the account's jobs not settled yet: still the contract's, owed back or paid on."""
        return sum(j.price for j in self.jobs.values() if j.client == account and not j.settled)

    def money(self) -> dict[str, int]:
        """Where the ether sent in is, by the events: ``held`` (what the contract's balance must be:
        sent in, less withdrawn and burned), ``burned``, ``withdrawn``; together ``deposited``."""
        books = self.accounts.values()
        deposited = sum(b.deposited + b.escrowed for b in books)
        withdrawn = sum(b.withdrawn for b in books)
        return {"deposited": deposited, "held": deposited - withdrawn - self.burned, "burned": self.burned,
                "withdrawn": withdrawn}

    def nets(self, settlement: Any) -> dict[str, int]:
        """account -> its money now less what it put in: the contract's stake and credit reads,
        the events' deposits, escrows and withdrawals (blocking)."""
        out = {}
        for account, book in sorted(self.accounts.items()):
            node = settlement.node(account)
            out[account] = (node.stake + settlement.credit_of(account) + self.escrow_of(account) + book.withdrawn
                            - book.deposited - book.escrowed)
        return out

    def mismatches(self, settlement: Any) -> list[str]:
        """Accounts whose stake as the events leave it differs from the contract's read (blocking)."""
        out = []
        for account, book in sorted(self.accounts.items()):
            stake = settlement.node(account).stake
            if stake != book.stake:
                out.append(f"{account}: stake by the events {book.stake}, contract {stake}")
        return out


__all__ = ["DemandRecord", "GameRecord", "JobRecordV2", "LedgerV2", "SeatRecord"]
