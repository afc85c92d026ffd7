"""The dispute game over libp2p: the referee drives, the parties answer, logs make both resumable.

The protocol machines (`protocol.Referee`, `protocol.DisputeParty`) are sans-IO; this
module is their trio shell. The referee (the job's client) sends each request to a
party as one request/response exchange on ``/gavel/dispute/1.0.0``; the party's answer
is its move. Deadlines are the machines' own (milliseconds of wall-clock time, which
all processes on a machine share): the referee retries a request that failed until the
party's deadline, and a ticker hands the clock to the machine, which rules against a
party whose time ran out. A party that answers garbage, or stops answering, or stops
reading, therefore loses by the clock.

Resuming: a machine is a pure function of what it was told. Each session logs every
event it accepted (``[kind, time, bytes]``) in the dispute's storage row before acting
on it, and a restarted node rebuilds the machine by replaying the log: the same
signatures and sequence numbers come out (Ed25519 is deterministic), so nothing it
said before can be contradicted. A party answers a repeated request with its stored
answer; a restarted referee re-sends what it is still waiting for.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable

import trio

from protocol import (
    NEVER, DisputeParty, Envelope, GameOver, Identity, Referee, RemoteProtocolError, Send, SignedJobTerms, SignedRoot,
    Verdict,
)

from protocol.wire import decode_struct

from ..errors import PeerError
from ..framing import pack, unpack
from ..peer_identity import peer_id_of_key
from ..storage import Dispute
from .job_protocols import DISPUTE_LIMITS, DISPUTE_PROTOCOL, DisputeMessage

log = logging.getLogger(__name__)

# Sequence numbers of one signer in one job never repeat across its disputes.
SEQ_BLOCK = 1 << 32
VERDICT_DELIVERY = 30.0
TICK = 0.25
RETRY_MIN, RETRY_MAX = 0.25, 4.0

OPEN, RECV, TICKED = "open", "recv", "tick"


class GameClock:
    """Wall-clock milliseconds that never run backwards for one machine."""

    def __init__(self, last: int = 0) -> None:
        self.last = last

    def now(self) -> int:
        self.last = max(self.last, int(time.time() * 1000))
        return self.last


def first_seq(index: int) -> int:
    return 1 + index * SEQ_BLOCK


def outcome_of(verdict: Verdict) -> str:
    """How a verdict ended, in one word: challenger, defender (who won), both-lose, or none."""
    losers = verdict.losers
    if losers == {verdict.defender}:
        return "challenger"
    if losers == {verdict.challenger}:
        return "defender"
    return "both-lose" if losers else "none"


# -- a party ----------------------------------------------------------------------------


class PartySession:
    """One side of one dispute at a provider or an auditor."""

    def __init__(self, *, identity: Identity, terms: SignedJobTerms, oracle: Any, role: str, side: str,
                 seq: int, rewrite: Any = None, chain_dispute: int = 0) -> None:
        self.identity = identity
        self.terms = terms
        self.role = role
        self.side = side
        self.seq = seq
        self.party = DisputeParty(identity=identity, terms=terms, oracle=oracle, role=role, side=side, first_seq=seq)
        self.rewrite = rewrite
        self.chain_dispute = chain_dispute
        self.log: list[list[Any]] = []
        self.last_request: bytes | None = None
        self.last_answer: bytes | None = None
        self.verdict: Verdict | None = None
        self.lock = trio.Lock()
        self.clock = GameClock()

    @property
    def job_id(self) -> bytes:
        return self.terms.job_id

    @property
    def dispute_id(self) -> bytes | None:
        return self.party.dispute_id

    @property
    def status(self) -> str:
        if self.verdict is None:
            return "open"
        if not self.verdict.losers:
            return "no-fault"
        return "lost" if self.verdict.lost(self.identity.node_id) else "won"

    def open_sync(self, defender_root: SignedRoot, now: int) -> Envelope:
        """The challenger's first move (blocking: it may hash the whole trace)."""
        send = self.party.open_dispute(defender_root, now=now)
        self.log.append([OPEN, now, defender_root.encode()])
        return send.envelope

    def answer_sync(self, data: bytes, now: int) -> bytes | None:
        """This party's move for the referee's message ``data`` (b"" for a verdict, None
        to stay silent). A repeat of the last message gets the same answer; anything else
        the machine refuses raises RemoteProtocolError. Blocking: answers recompute."""
        if data == self.last_request:
            return self.last_answer
        received = self.party.receive_bytes(data, now=now)
        self.log.append([RECV, now, data])
        answer: bytes | None = b""
        for action in received.actions:
            if isinstance(action, GameOver):
                self.verdict = action.verdict
            elif isinstance(action, Send):
                envelope = action.envelope
                if self.rewrite is not None:
                    envelope = self.rewrite(received.envelope, envelope, self.identity)
                answer = envelope.encode() if envelope is not None else None
        self.last_request, self.last_answer = data, answer
        return answer

    def record(self) -> bytes:
        return pack({"kind": "party", "side": self.side, "role": self.role, "seq": self.seq,
                     "chain_dispute": self.chain_dispute, "log": self.log})

    def row(self) -> Dispute:
        return Dispute(self.dispute_id, self.job_id, self.record(), self.status)

    @classmethod
    def restore(cls, record: bytes, *, identity: Identity, terms: SignedJobTerms, oracle: Any,
                rewrite: Any = None) -> "PartySession":
        """Rebuild a session from its stored record by replaying its log (blocking)."""
        r = unpack(record)
        session = cls(identity=identity, terms=terms, oracle=oracle, role=r["role"], side=r["side"], seq=r["seq"],
                      rewrite=rewrite, chain_dispute=r["chain_dispute"])
        for kind, now, data in r["log"]:
            if kind == OPEN:
                session.open_sync(decode_struct(SignedRoot, data), now)
            else:
                session.answer_sync(data, now)
            session.clock.last = now
        return session


# -- the referee ------------------------------------------------------------------------


class RefereeSession:
    """One dispute refereed by this node (the job's client), driven over the network.

    ``on_verdict(session)`` is awaited once, after the verdict is stored: the client
    records it on chain there. ``save(session)`` stores the session's row.
    """

    def __init__(self, *, host: Any, referee: Referee, seq: int, chain_dispute: int,
                 save: Callable[["RefereeSession"], Awaitable[None]],
                 on_verdict: Callable[["RefereeSession"], Awaitable[None]]) -> None:
        self.host = host
        self.referee = referee
        self.seq = seq
        self.chain_dispute = chain_dispute
        self.log: list[list[Any]] = []
        self.pending: dict[bytes, Envelope] = {}  # party -> the request it has yet to answer
        self.verdict_envelope: Envelope | None = None
        self.recorded = False  # the verdict is on chain
        self.refused = 0  # answers the machine refused
        self._save = save
        self._on_verdict = on_verdict
        self._lock = trio.Lock()
        self._done = trio.Event()
        self.clock = GameClock()
        self._nursery: trio.Nursery | None = None

    @property
    def job_id(self) -> bytes:
        return self.referee.job_id

    @property
    def dispute_id(self) -> bytes:
        return self.referee.dispute_id

    @property
    def verdict(self) -> Verdict | None:
        return self.referee.verdict

    @property
    def status(self) -> str:
        if self.verdict is None:
            return "refereeing"
        return "recorded" if self.recorded else "ruled"

    def record(self) -> bytes:
        return pack({"kind": "referee", "seq": self.seq, "chain_dispute": self.chain_dispute, "log": self.log,
                     "recorded": self.recorded})

    def row(self) -> Dispute:
        return Dispute(self.dispute_id, self.job_id, self.record(), self.status)

    # -- the machine, fed in order ---------------------------------------------------------

    def _apply_sync(self, kind: str, now: int, data: bytes) -> list[Any]:
        if kind == TICKED:
            actions = self.referee.tick(now=now)
        else:
            received = self.referee.receive_bytes(data, now=now)
            self.pending.pop(received.envelope.sender, None)
            actions = received.actions
        if actions or kind != TICKED:
            self.log.append([kind, now, data])
        for action in actions:
            if isinstance(action, Send) and action.envelope.deadline != NEVER:
                self.pending[action.to] = action.envelope
            elif isinstance(action, GameOver):
                self.pending.clear()
                self.verdict_envelope = action.envelope
        return actions

    def open_sync(self, data: bytes, now: int) -> list[Any]:
        """Start from the challenger's OpenDispute (blocking). Raises RemoteProtocolError."""
        self.clock.last = max(self.clock.last, now)
        return self._apply_sync(OPEN, now, data)

    def receive_sync(self, data: bytes, now: int) -> list[Any]:
        """A party's move (blocking: the last one makes the referee recompute a node)."""
        self.clock.last = max(self.clock.last, now)
        return self._apply_sync(RECV, now, data)

    @classmethod
    def restore(cls, record: bytes, *, host: Any, referee: Referee, save: Any, on_verdict: Any) -> "RefereeSession":
        r = unpack(record)
        session = cls(host=host, referee=referee, seq=r["seq"], chain_dispute=r["chain_dispute"], save=save,
                      on_verdict=on_verdict)
        for kind, now, data in r["log"]:
            session._apply_sync(kind, now, data)
            session.clock.last = now
        session.recorded = r["recorded"]
        return session

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Drive the game to its verdict, record it, deliver it. The requests not yet
        answered (the open's, or a restored session's) go out first."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.verdict is None:
                nursery.start_soon(self._ticker)
                for party, envelope in list(self.pending.items()):
                    nursery.start_soon(self._deliver, party, envelope)
            else:
                self._done.set()
            await self._done.wait()
            nursery.cancel_scope.cancel()
        if not self.recorded:
            await self._on_verdict(self)
        assert self.verdict_envelope is not None
        with trio.move_on_after(VERDICT_DELIVERY):
            async with trio.open_nursery() as nursery:
                for party in (self.verdict.challenger, self.verdict.defender):
                    nursery.start_soon(self._deliver, party, self.verdict_envelope)

    async def _dispatch(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, GameOver):
                await self._save(self)
                self._done.set()
            elif isinstance(action, Send) and action.envelope.deadline != NEVER and self._nursery is not None:
                self._nursery.start_soon(self._deliver, action.to, action.envelope)
        await trio.lowlevel.checkpoint()

    async def _event(self, kind: str, data: bytes = b"") -> None:
        async with self._lock:
            if self.verdict is not None:
                return
            now = self.clock.now()
            try:
                actions = await trio.to_thread.run_sync(self._apply_sync, kind, now, data)
            except RemoteProtocolError as error:
                self.refused += 1
                log.info("dispute %s: refused a move: %s", self.dispute_id.hex()[:12], error)
                return
            if actions:
                await self._save(self)
        await self._dispatch(actions)

    async def _next_deadline(self) -> int | None:
        async with self._lock:  # the machine may be changing in a worker thread otherwise
            return self.referee.next_deadline

    async def _ticker(self) -> None:
        while self.verdict is None:
            deadline = await self._next_deadline()
            wait = TICK if deadline is None else min(TICK, max(0.0, (deadline + 1) / 1000 - time.time()))
            await trio.sleep(wait)
            deadline = await self._next_deadline()
            if deadline is not None and time.time() * 1000 > deadline:
                await self._event(TICKED)

    async def _deliver(self, party: bytes, envelope: Envelope) -> None:
        """Send one request (or the verdict) to a party until it answers or its time is up."""
        peer = peer_id_of_key(party)
        verdict = envelope.deadline == NEVER
        end = time.time() + VERDICT_DELIVERY if verdict else envelope.deadline / 1000
        message = pack(DisputeMessage(envelope.encode()).to_wire())
        delay = RETRY_MIN
        while (remaining := end - time.time()) > 0:
            if not verdict and self.pending.get(party) is not envelope:
                return  # answered, or the game moved on
            try:
                answer = await self.host.request(peer, DISPUTE_PROTOCOL, message, timeout=max(remaining, 0.05),
                                                 limits=DISPUTE_LIMITS)
            except PeerError as error:
                log.info("dispute %s: %s", self.dispute_id.hex()[:12], error)
                self.host.metrics.peer_error(error)
            else:
                if verdict:
                    return
                if answer:
                    await self._event(RECV, answer)
                    return
            await trio.sleep(min(delay, max(0.0, end - time.time())))
            delay = min(delay * 2, RETRY_MAX)
