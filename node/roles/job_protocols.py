"""The roles' wire: stream protocols, gossip topics and their messages.

Stream protocols (request/response, ``node.streams``; bodies are msgpack maps):

``/gavel/job/1.0.0`` — job hand-over and results, ``{"op": ...}``:
  offer       client -> provider: the signed terms (a JobOffer envelope), the job bundle's
              blob id (spec and data, fetched from the client), the contract, the client's
              account and addresses. The provider checks the terms against the bundle and
              the chain, takes a seat on chain, and answers with its account.
  commitment  provider -> client: its signed trace root (a Commitment envelope), the
              checkpoint state hashes it covers and the checkpoints' blob ids. Acknowledged
              only once stored; the provider retries until then.
  trace       anyone -> provider: the same, for auditors and late clients.
  challenge   client -> provider: "your root and this provider's differ: challenge it".
              The provider opens the dispute on chain and at the referee; answers with the
              on-chain dispute id.

``/gavel/dispute/1.0.0`` — dispute moves, one signed envelope per request:
  challenger -> referee  ``{"env": OpenDispute, "chain_dispute": id}``, answered empty
  referee -> party       ``{"env": request}``, answered with the party's move (an envelope)
  referee -> party       ``{"env": Verdict}``, answered empty

Gossip topics (hashes, roots and signatures only; anything that must arrive also travels
over a stream): provider adverts, job announcements (for auditors), commitments, verdicts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BadMessage
from ..streams import StreamLimits

JOB_PROTOCOL = "/gavel/job/1.0.0"
DISPUTE_PROTOCOL = "/gavel/dispute/1.0.0"

TOPIC_PROVIDERS = "gavel/providers/1"
TOPIC_JOBS = "gavel/jobs/1"
TOPIC_COMMITMENTS = "gavel/commitments/1"
TOPIC_VERDICTS = "gavel/verdicts/1"
TOPIC_STATEMENTS = "gavel/statements/2"  # settlement 2: seats' signed statements (v2.statements_keeper)

# Checking an offer fetches the bundle and builds the training program (seconds).
JOB_LIMITS = StreamLimits(max_frame=4 << 20, read_timeout=10.0, write_timeout=10.0, idle_timeout=60.0)
# Node evidence carries the operator's input tensors.
MAX_DISPUTE_FRAME = 64 << 20
DISPUTE_LIMITS = StreamLimits(max_frame=MAX_DISPUTE_FRAME, read_timeout=10.0, write_timeout=20.0, idle_timeout=60.0)
MAX_CHECKPOINTS = 1 << 16
MAX_ADDRS = 16
HASH = 32


def _fail(what: str, peer: object) -> BadMessage:
    return BadMessage(f"malformed {what}", peer=peer)


def _bytes(obj: dict, key: str, what: str, peer: object, *, size: int | None = None, max_size: int = 4 << 20) -> bytes:
    value = obj.get(key)
    if not isinstance(value, bytes) or (size is not None and len(value) != size) or len(value) > max_size:
        raise _fail(f"{what}: {key}", peer)
    return value


def _text(obj: dict, key: str, what: str, peer: object, *, max_len: int = 256) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or len(value) > max_len:
        raise _fail(f"{what}: {key}", peer)
    return value


def _int(obj: dict, key: str, what: str, peer: object) -> int:
    value = obj.get(key)
    if type(value) is not int or value < 0:
        raise _fail(f"{what}: {key}", peer)
    return value


def _hashes(obj: dict, key: str, what: str, peer: object) -> list[bytes]:
    value = obj.get(key)
    if not isinstance(value, list) or not 0 < len(value) <= MAX_CHECKPOINTS \
            or any(not isinstance(h, bytes) or len(h) != HASH for h in value):
        raise _fail(f"{what}: {key}", peer)
    return value


def _addrs(obj: dict, key: str, what: str, peer: object) -> list[str]:
    value = obj.get(key)
    if not isinstance(value, list) or len(value) > MAX_ADDRS or any(not isinstance(a, str) or len(a) > 512 for a in value):
        raise _fail(f"{what}: {key}", peer)
    return value


def _account(obj: dict, key: str, what: str, peer: object) -> str:
    value = _text(obj, key, what, peer, max_len=42)
    if len(value) != 42 or not value.startswith("0x"):
        raise _fail(f"{what}: {key}", peer)
    try:
        int(value[2:], 16)
    except ValueError:
        raise _fail(f"{what}: {key}", peer) from None
    return value


def request_op(obj: Any, peer: object) -> str:
    if not isinstance(obj, dict) or not isinstance(obj.get("op"), str):
        raise BadMessage("a job request is a map with an op", peer=peer)
    return obj["op"]


@dataclass(frozen=True)
class Offer:
    offer: bytes  # JobOffer envelope
    bundle: bytes  # blob id
    contract: str
    client_account: str
    client_addrs: list[str]

    def to_wire(self) -> dict:
        return {"op": "offer", "offer": self.offer, "bundle": self.bundle, "contract": self.contract,
                "client_account": self.client_account, "client_addrs": self.client_addrs}

    @classmethod
    def from_wire(cls, obj: dict, peer: object) -> "Offer":
        return cls(_bytes(obj, "offer", "offer", peer), _bytes(obj, "bundle", "offer", peer, size=HASH),
                   _account(obj, "contract", "offer", peer), _account(obj, "client_account", "offer", peer),
                   _addrs(obj, "client_addrs", "offer", peer))


@dataclass(frozen=True)
class TraceReport:
    """A provider's commitment with what it covers: sent to the client, answered to ``trace``."""

    commitment: bytes  # Commitment envelope
    trace: list[bytes]  # checkpoint state hashes 0..C
    checkpoints: list[bytes]  # blob ids of the checkpoint files, in the same order
    trace_file: bytes  # blob id of trace.json
    account: str

    def to_wire(self, op: str = "commitment") -> dict:
        return {"op": op, "commitment": self.commitment, "trace": self.trace, "checkpoints": self.checkpoints,
                "trace_file": self.trace_file, "account": self.account}

    @classmethod
    def from_wire(cls, obj: Any, peer: object) -> "TraceReport":
        if not isinstance(obj, dict):
            raise _fail("trace report", peer)
        report = cls(_bytes(obj, "commitment", "trace report", peer), _hashes(obj, "trace", "trace report", peer),
                     _hashes(obj, "checkpoints", "trace report", peer),
                     _bytes(obj, "trace_file", "trace report", peer, size=HASH),
                     _account(obj, "account", "trace report", peer))
        if len(report.checkpoints) != len(report.trace):
            raise _fail("trace report: one checkpoint blob per state hash", peer)
        return report


@dataclass(frozen=True)
class Challenge:
    job: bytes
    respondent: bytes  # the other provider's Commitment envelope
    account: str  # its account

    def to_wire(self) -> dict:
        return {"op": "challenge", "job": self.job, "respondent": self.respondent, "account": self.account}

    @classmethod
    def from_wire(cls, obj: dict, peer: object) -> "Challenge":
        return cls(_bytes(obj, "job", "challenge", peer, size=HASH), _bytes(obj, "respondent", "challenge", peer),
                   _account(obj, "account", "challenge", peer))


def trace_request(job: bytes) -> dict:
    return {"op": "trace", "job": job}


def parse_trace_request(obj: dict, peer: object) -> bytes:
    return _bytes(obj, "job", "trace request", peer, size=HASH)


@dataclass(frozen=True)
class DisputeMessage:
    envelope: bytes
    chain_dispute: int = 0

    def to_wire(self) -> dict:
        return {"env": self.envelope, "chain_dispute": self.chain_dispute}

    @classmethod
    def from_wire(cls, obj: Any, peer: object) -> "DisputeMessage":
        if not isinstance(obj, dict):
            raise _fail("dispute message", peer)
        return cls(_bytes(obj, "env", "dispute message", peer, max_size=MAX_DISPUTE_FRAME),
                   _int(obj, "chain_dispute", "dispute message", peer))


@dataclass(frozen=True)
class Advert:
    peer: str
    addrs: list[str]
    price_per_step: int
    capacity: int
    account: str
    contract: str

    def to_wire(self) -> dict:
        return {"peer": self.peer, "addrs": self.addrs, "price_per_step": self.price_per_step,
                "capacity": self.capacity, "account": self.account, "contract": self.contract}

    @classmethod
    def from_wire(cls, obj: Any, peer: object = None) -> "Advert":
        if not isinstance(obj, dict):
            raise _fail("advert", peer)
        return cls(_text(obj, "peer", "advert", peer), _addrs(obj, "addrs", "advert", peer),
                   _int(obj, "price_per_step", "advert", peer), _int(obj, "capacity", "advert", peer),
                   _account(obj, "account", "advert", peer), _account(obj, "contract", "advert", peer))


@dataclass(frozen=True)
class JobAnnouncement:
    offer: bytes
    bundle: bytes
    contract: str
    client_addrs: list[str]

    def to_wire(self) -> dict:
        return {"offer": self.offer, "bundle": self.bundle, "contract": self.contract, "client_addrs": self.client_addrs}

    @classmethod
    def from_wire(cls, obj: Any, peer: object = None) -> "JobAnnouncement":
        if not isinstance(obj, dict):
            raise _fail("job announcement", peer)
        return cls(_bytes(obj, "offer", "job announcement", peer), _bytes(obj, "bundle", "job announcement", peer, size=HASH),
                   _account(obj, "contract", "job announcement", peer),
                   _addrs(obj, "client_addrs", "job announcement", peer))


@dataclass(frozen=True)
class CommitmentNotice:
    commitment: bytes
    account: str
    addrs: list[str]

    def to_wire(self) -> dict:
        return {"commitment": self.commitment, "account": self.account, "addrs": self.addrs}

    @classmethod
    def from_wire(cls, obj: Any, peer: object = None) -> "CommitmentNotice":
        if not isinstance(obj, dict):
            raise _fail("commitment notice", peer)
        return cls(_bytes(obj, "commitment", "commitment notice", peer), _account(obj, "account", "commitment notice", peer),
                   _addrs(obj, "addrs", "commitment notice", peer))


def _valid(parse: Any) -> Any:
    """A gossip validator: forward only what parses (signatures are checked by the readers)."""
    from ..framing import unpack

    def validate(message: Any) -> bool:
        try:
            parse(unpack(message.data))
        except BadMessage:
            return False
        return True

    return validate


def _verdict_notice(obj: Any) -> None:
    if not isinstance(obj, dict) or not isinstance(obj.get("verdict"), bytes) or len(obj["verdict"]) > 64 * 1024:
        raise BadMessage("malformed verdict notice")


def _statement_notice(obj: Any) -> None:
    # the shape only; the keeper checks the signature (the statement's own parse is version 2's)
    fields = {"job": bytes, "seat": str, "kind": int, "index": int, "value": bytes, "signature": bytes}
    if not isinstance(obj, dict) or any(not isinstance(obj.get(k), t) for k, t in fields.items()):
        raise BadMessage("malformed seat statement")


GOSSIP_VALIDATORS = {
    TOPIC_PROVIDERS: _valid(Advert.from_wire),
    TOPIC_JOBS: _valid(JobAnnouncement.from_wire),
    TOPIC_COMMITMENTS: _valid(CommitmentNotice.from_wire),
    TOPIC_VERDICTS: _valid(_verdict_notice),
    TOPIC_STATEMENTS: _valid(_statement_notice),
}
