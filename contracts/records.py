"""Typed mirrors of the contract's enums, stored records and events (frozen dataclasses).

Field names are the Solidity names in snake_case; amounts are wei (int), times unix seconds,
ids and roots 32-byte ``bytes``, accounts checksummed address strings.
"""

from __future__ import annotations

import enum
import re
import typing
from dataclasses import dataclass, fields
from typing import Any, ClassVar


class Role(enum.IntFlag):
    """Role bits of a node."""

    PROVIDER = 1
    AUDITOR = 2
    CLIENT = 4
    REFEREE = 8  # version 2 only: may be drawn to rule claims and appeals


class NodeStatus(enum.IntEnum):
    NONE = 0
    ACTIVE = 1
    UNBONDING = 2


class JobStatus(enum.IntEnum):
    NONE = 0
    OPEN = 1
    ACCEPTED = 2
    COMMITTED = 3
    DISPUTED = 4
    FINALIZED = 5
    REFUNDED = 6


class DisputeStatus(enum.IntEnum):
    NONE = 0
    OPEN = 1
    RULED = 2
    LAPSED = 3


class Outcome(enum.IntEnum):
    NONE = 0
    CHALLENGER_WINS = 1
    RESPONDENT_WINS = 2
    BOTH_LOSE = 3


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _check_bytes32(record: object) -> None:
    for f in fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        if f.type == "bytes" and len(value) != 32:
            raise ValueError(f"{type(record).__name__}.{f.name} must be 32 bytes, got {len(value)}")


class _FromAbi:
    """Builds a record from ABI values named in camelCase, converting enums and flags."""

    @classmethod
    def from_abi(cls, values: dict[str, Any] | tuple[Any, ...]):
        hints = typing.get_type_hints(cls)
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        if isinstance(values, tuple):
            values = dict(zip(names, values))
        else:
            values = {_snake(k): v for k, v in values.items()}
        converted = {}
        for name in names:
            kind = hints[name]
            value = values[name]
            converted[name] = kind(value) if isinstance(kind, type) and issubclass(kind, enum.Enum) else value
        return cls(**converted)


# ---------------------------------------------------------------- stored records (views)


@dataclass(frozen=True)
class NodeInfo(_FromAbi):
    """A registered node (status NONE and zeros when the account is not registered)."""

    ed25519_key: bytes
    stake: int
    locked: int
    unbonding_since: int
    obligations: int
    roles: Role
    status: NodeStatus

    @property
    def free_stake(self) -> int:
        """Stake not locked by seats or challenge bonds."""
        return self.stake - self.locked


@dataclass(frozen=True)
class JobInfo(_FromAbi):
    """A job as stored (status NONE and zeros when unknown)."""

    client: str
    accept_by: int
    providers_wanted: int
    providers_accepted: int
    referee: str
    commit_by: int
    commitments: int
    open_disputes: int
    challenge_by: int
    ruling_period: int
    status: JobStatus
    price: int
    provider_stake: int


@dataclass(frozen=True)
class SeatInfo(_FromAbi):
    """A provider's seat in a job."""

    trace_root: bytes
    accepted: bool
    committed: bool
    forfeited: bool


@dataclass(frozen=True)
class DisputeInfo(_FromAbi):
    """A dispute as stored (status NONE when unknown)."""

    job_id: bytes
    challenger: str
    opened_at: int
    status: DisputeStatus
    outcome: Outcome
    respondent: str
    rule_by: int
    bond: int
    step: int
    node: int
    transcript_hash: bytes


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class SettlementEvent(_FromAbi):
    """Base of the contract's events. ``EVENT_NAME`` is the Solidity event's name."""

    EVENT_NAME: ClassVar[str] = ""

    def __post_init__(self) -> None:
        _check_bytes32(self)


@dataclass(frozen=True)
class NodeRegistered(SettlementEvent):
    EVENT_NAME = "NodeRegistered"
    account: str
    ed25519_key: bytes
    roles: Role
    stake: int


@dataclass(frozen=True)
class StakeAdded(SettlementEvent):
    EVENT_NAME = "StakeAdded"
    account: str
    amount: int
    stake: int


@dataclass(frozen=True)
class UnbondingBegun(SettlementEvent):
    EVENT_NAME = "UnbondingBegun"
    account: str
    available_at: int


@dataclass(frozen=True)
class UnbondingCancelled(SettlementEvent):
    EVENT_NAME = "UnbondingCancelled"
    account: str


@dataclass(frozen=True)
class NodeExited(SettlementEvent):
    EVENT_NAME = "NodeExited"
    account: str
    stake_credited: int


@dataclass(frozen=True)
class JobOpened(SettlementEvent):
    EVENT_NAME = "JobOpened"
    job_id: bytes
    client: str
    referee: str
    price: int
    provider_stake: int
    providers_wanted: int
    accept_by: int
    commit_by: int
    challenge_by: int
    ruling_period: int


@dataclass(frozen=True)
class JobAdvanced(SettlementEvent):
    EVENT_NAME = "JobAdvanced"
    job_id: bytes
    status: JobStatus


@dataclass(frozen=True)
class ProviderAccepted(SettlementEvent):
    EVENT_NAME = "ProviderAccepted"
    job_id: bytes
    provider: str
    locked: int


@dataclass(frozen=True)
class TraceCommitted(SettlementEvent):
    EVENT_NAME = "TraceCommitted"
    job_id: bytes
    provider: str
    trace_root: bytes


@dataclass(frozen=True)
class DisputeOpened(SettlementEvent):
    EVENT_NAME = "DisputeOpened"
    dispute_id: int
    job_id: bytes
    challenger: str
    respondent: str
    bond: int
    rule_by: int


@dataclass(frozen=True)
class DisputeRuled(SettlementEvent):
    EVENT_NAME = "DisputeRuled"
    dispute_id: int
    outcome: Outcome
    step: int
    node: int
    transcript_hash: bytes


@dataclass(frozen=True)
class DisputeLapsed(SettlementEvent):
    EVENT_NAME = "DisputeLapsed"
    dispute_id: int


@dataclass(frozen=True)
class StakeSlashed(SettlementEvent):
    EVENT_NAME = "StakeSlashed"
    job_id: bytes
    loser: str
    amount: int
    beneficiary: str
    to_beneficiary: int
    burned: int


@dataclass(frozen=True)
class StakeUnlocked(SettlementEvent):
    EVENT_NAME = "StakeUnlocked"
    job_id: bytes
    account: str
    amount: int


@dataclass(frozen=True)
class ProviderPaid(SettlementEvent):
    EVENT_NAME = "ProviderPaid"
    job_id: bytes
    provider: str
    amount: int


@dataclass(frozen=True)
class ClientRefunded(SettlementEvent):
    EVENT_NAME = "ClientRefunded"
    job_id: bytes
    client: str
    amount: int


@dataclass(frozen=True)
class Withdrawn(SettlementEvent):
    EVENT_NAME = "Withdrawn"
    account: str
    amount: int


EVENT_TYPES: dict[str, type[SettlementEvent]] = {
    cls.EVENT_NAME: cls
    for cls in (
        NodeRegistered,
        StakeAdded,
        UnbondingBegun,
        UnbondingCancelled,
        NodeExited,
        JobOpened,
        JobAdvanced,
        ProviderAccepted,
        TraceCommitted,
        DisputeOpened,
        DisputeRuled,
        DisputeLapsed,
        StakeSlashed,
        StakeUnlocked,
        ProviderPaid,
        ClientRefunded,
        Withdrawn,
    )
}


@dataclass(frozen=True)
class LoggedEvent:
    """An event with where it was emitted, as returned by ``Settlement.events``."""

    event: SettlementEvent
    block_number: int
    tx_hash: bytes
    log_index: int
