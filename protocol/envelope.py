"""Signed envelopes: every protocol message travels in one, and replays are refused.

An envelope is the canonical msgpack map::

    {"type": tag, "v": schema version, "job": job id, "from": sender node id,
     "seq": sequence number, "deadline": ms, "body": {...}, "sig": Ed25519 signature}

The signature (domain ``envelope/v1``) covers every field but ``sig``, so a message
is bound to its job (no reuse in another job), its sender, its place in the
sender's sequence (no replay: `ReplayGuard` keeps the highest sequence seen per
sender and job) and its deadline (no late delivery: a message is refused once the
receiver's clock, passed in, is past it). Times are integer milliseconds on a clock
the parties agree on; the protocol never reads a clock itself.

Each body type is a `WireStruct` registered with `@message(tag, version)`; decoding
looks the pair up, checks the size limit of that type, and builds the body, which
validates itself. `decode_envelope` raises only `RemoteProtocolError`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, TypeVar

from .errors import LocalProtocolError, RemoteProtocolError
from .identity import DOMAIN_ENVELOPE, NODE_ID_SIZE, SIGNATURE_SIZE, Identity, verify_signature
from .wire import U64_MAX, WireStruct, packb, remote, unpackb_canonical

JOB_ID_SIZE = 32
MAX_MESSAGE_SIZE = 1 << 20            # every message but those that carry tensors
MAX_TENSOR_MESSAGE_SIZE = 256 << 20   # a referee's node inputs
NEVER = U64_MAX                       # deadline of messages that stay valid (verdicts)

_ENVELOPE_KEYS = ["type", "v", "job", "from", "seq", "deadline", "body", "sig"]


class Message(WireStruct):
    """Base of message bodies. `TYPE`, `VERSION` and `MAX_SIZE` are set by `@message`."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 0
    MAX_SIZE: ClassVar[int] = MAX_MESSAGE_SIZE

    def check_envelope(self, envelope: Envelope) -> None:
        """Checks that tie the body to its envelope (sender, job); raise LocalProtocolError."""


M = TypeVar("M", bound=type[Message])
MESSAGE_TYPES: dict[tuple[str, int], type[Message]] = {}


def message(tag: str, version: int = 1, *, max_size: int = MAX_MESSAGE_SIZE) -> Callable[[M], M]:
    """Class decorator: register a message body type under its tag and schema version."""

    def register(cls: M) -> M:
        if (tag, version) in MESSAGE_TYPES:
            raise RuntimeError(f"message type {tag!r} v{version} registered twice")
        cls.TYPE, cls.VERSION, cls.MAX_SIZE = tag, version, max_size
        MESSAGE_TYPES[(tag, version)] = cls
        return cls

    return register


@dataclass(frozen=True)
class Envelope:
    body: Message
    job_id: bytes
    sender: bytes
    seq: int
    deadline: int
    signature: bytes
    encoded: bytes = field(compare=False, repr=False)

    @property
    def type(self) -> str:
        return self.body.TYPE

    @classmethod
    def seal(cls, body: Message, *, identity: Identity, job_id: bytes, seq: int, deadline: int) -> Envelope:
        """Sign `body` into an envelope from `identity`."""
        if not isinstance(body, Message) or not body.TYPE:
            raise LocalProtocolError(f"{type(body).__name__} is not a registered message type")
        if type(job_id) is not bytes or len(job_id) != JOB_ID_SIZE:
            raise LocalProtocolError("a job id is 32 bytes")
        for name, value in (("seq", seq), ("deadline", deadline)):
            if type(value) is not int or not 0 <= value <= U64_MAX:
                raise LocalProtocolError(f"{name} must be an int in [0, 2**64)")
        unsigned = _unsigned_map(body, job_id, identity.node_id, seq, deadline)
        signature = identity.sign(DOMAIN_ENVELOPE, packb(unsigned))
        encoded = packb({**unsigned, "sig": signature})
        if len(encoded) > body.MAX_SIZE:
            raise LocalProtocolError(f"{body.TYPE} message of {len(encoded)} bytes exceeds its limit {body.MAX_SIZE}")
        return cls(body, job_id, identity.node_id, seq, deadline, signature, encoded)

    def encode(self) -> bytes:
        return self.encoded


def _unsigned_map(body: Message, job_id: bytes, sender: bytes, seq: int, deadline: int) -> dict[str, Any]:
    return {"type": body.TYPE, "v": body.VERSION, "job": job_id, "from": sender, "seq": seq,
            "deadline": deadline, "body": body.to_wire()}


def decode_envelope(data: bytes, *, max_size: int = MAX_MESSAGE_SIZE) -> Envelope:
    """Parse, validate and signature-check one envelope. Raises only RemoteProtocolError."""
    raw = unpackb_canonical(data, max_size=max_size)
    return remote(lambda: _build(raw, bytes(data)))


def _build(raw: Any, data: bytes) -> Envelope:
    if type(raw) is not dict or list(raw) != _ENVELOPE_KEYS:
        raise RemoteProtocolError(f"an envelope is a map with exactly the keys {_ENVELOPE_KEYS}")
    tag, version = raw["type"], raw["v"]
    cls = MESSAGE_TYPES.get((tag, version)) if type(tag) is str and type(version) is int else None
    if cls is None:
        raise RemoteProtocolError(f"unknown message type {tag!r} version {version!r}")
    if len(data) > cls.MAX_SIZE:
        raise RemoteProtocolError(f"{tag} message of {len(data)} bytes exceeds its limit {cls.MAX_SIZE}")
    job, sender, seq, deadline, sig = raw["job"], raw["from"], raw["seq"], raw["deadline"], raw["sig"]
    if type(job) is not bytes or len(job) != JOB_ID_SIZE:
        raise RemoteProtocolError("envelope job id must be 32 bytes")
    if type(sender) is not bytes or len(sender) != NODE_ID_SIZE:
        raise RemoteProtocolError("envelope sender must be a 32-byte node id")
    if type(sig) is not bytes or len(sig) != SIGNATURE_SIZE:
        raise RemoteProtocolError("envelope signature must be 64 bytes")
    for name, value in (("seq", seq), ("deadline", deadline)):
        if type(value) is not int or not 0 <= value <= U64_MAX:
            raise RemoteProtocolError(f"envelope {name} must be an unsigned 64-bit int")
    body = cls.from_wire(raw["body"], tag)
    unsigned = {k: raw[k] for k in _ENVELOPE_KEYS[:-1]}
    if not verify_signature(sender, DOMAIN_ENVELOPE, packb(unsigned), sig):
        raise RemoteProtocolError(f"bad signature on a {tag} message")
    envelope = Envelope(body, job, sender, seq, deadline, sig, data)
    body.check_envelope(envelope)
    return envelope


class ReplayGuard:
    """Per (sender, job): the highest sequence number accepted. Refuses replays, stale and foreign messages."""

    def __init__(self) -> None:
        self._highest: dict[tuple[bytes, bytes], int] = {}

    def highest(self, sender: bytes, job_id: bytes) -> int | None:
        return self._highest.get((sender, job_id))

    def check(self, envelope: Envelope, *, now: int, job_id: bytes | None = None) -> None:
        """Raise RemoteProtocolError unless `envelope` is fresh; records nothing."""
        if job_id is not None and envelope.job_id != job_id:
            raise RemoteProtocolError(f"message for job {envelope.job_id[:4].hex()} arrived in job {job_id[:4].hex()}")
        if now > envelope.deadline:
            raise RemoteProtocolError(f"{envelope.type} message expired at {envelope.deadline}, now is {now}")
        seen = self._highest.get((envelope.sender, envelope.job_id))
        if seen is not None and envelope.seq <= seen:
            raise RemoteProtocolError(f"{envelope.type} message replays sequence {envelope.seq} (seen up to {seen})")

    def accept(self, envelope: Envelope, *, now: int, job_id: bytes | None = None) -> None:
        """Check freshness, then record the sequence number."""
        self.check(envelope, now=now, job_id=job_id)
        self._highest[(envelope.sender, envelope.job_id)] = envelope.seq
