"""What the game machines hand back to their caller, and the bookkeeping they share.

A machine takes an event (bytes or an envelope received, or just the time passing)
and returns a list of actions: `Send` an envelope to a node, or `GameOver` with the
signed verdict. The caller does the sending; the machine never touches a network.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .envelope import Envelope, Message
from .errors import LocalProtocolError
from .identity import Identity
from .messages import Verdict
from .wire import U64_MAX


@dataclass(frozen=True)
class Send:
    to: bytes
    envelope: Envelope


@dataclass(frozen=True)
class GameOver:
    verdict: Verdict
    envelope: Envelope


Action = Union[Send, GameOver]


@dataclass(frozen=True)
class Received:
    """The envelope a machine accepted from the bytes it was given, and the actions that followed."""

    envelope: Envelope
    actions: list[Action]


class Outbox:
    """Seals a node's messages for one job with increasing sequence numbers."""

    def __init__(self, identity: Identity, job_id: bytes, first_seq: int = 1) -> None:
        if type(first_seq) is not int or not 0 <= first_seq <= U64_MAX:
            raise LocalProtocolError("first_seq must be an int in [0, 2**64)")
        self.identity = identity
        self.job_id = job_id
        self.next_seq = first_seq

    def seal(self, body: Message, deadline: int) -> Envelope:
        envelope = Envelope.seal(body, identity=self.identity, job_id=self.job_id, seq=self.next_seq,
                                 deadline=deadline)
        self.next_seq += 1
        return envelope


class MonotonicTime:
    """The last time a machine was told; time given to it may never run backwards."""

    def __init__(self) -> None:
        self.now: int | None = None

    def advance(self, now: int) -> int:
        if type(now) is not int or now < 0:
            raise LocalProtocolError(f"time is a non-negative int of milliseconds, got {now!r}")
        if self.now is not None and now < self.now:
            raise LocalProtocolError(f"time ran backwards: {now} after {self.now}")
        self.now = now
        return now
