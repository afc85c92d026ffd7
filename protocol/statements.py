"""EIP-712 statements signed by account keys: what a seat says about its lists, what a referee rules.

docs/economics.md, sections 9-10. A provider signs a `SeatStatement` wherever it hands a
list to anyone off chain; a referee signs a `Verdict` into the transcript of each ruling.
The contract checks both with ecrecover, so the signatures are secp256k1 over the EIP-712
digest, made and recovered by `eth_account` (this module builds the typed data only):

    domain          EIP712Domain(string name "gavel", string version "2", uint256 chainId,
                                 address verifyingContract)
    SeatStatement   (bytes32 jobId, address seat, uint8 kind, uint64 index, bytes32 value)
                    kind TRACE (0): index 0, value the trace root; STEPS (1): index c, value the
                    interval's step-list root; NODES (2): index s (a global step), the node-list root
    Verdict         (bytes32 claimId, bool defenderRight, bytes32 outputHash)

Two statements by one seat **equivocate** when they share job, kind and index and differ in
value (`slashEquivocation`); a statement **contradicts** the chain when its value is not the
one the chain holds for that (job, seat, kind, index) (`slashContradiction`).

Choices: kinds are numbered TRACE 0, STEPS 1, NODES 2 in that order; the Python class of
the `Verdict` type is `VerdictStatement` (protocol.messages already has a `Verdict`); two
verdicts by one referee on one claim that differ also count as an equivocation; a
signature that does not recover (malformed, or v not 27/28) is a RemoteProtocolError, one
that recovers to someone else is simply not that signer's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from eth_account import Account
from eth_account.messages import SignableMessage, encode_typed_data
from .keccak import keccak
from eth_utils import is_address, to_checksum_address

from .errors import LocalProtocolError, RemoteProtocolError

DOMAIN_NAME = "gavel"
DOMAIN_VERSION = "2"
TRACE, STEPS, NODES = 0, 1, 2
STATEMENT_KINDS = (TRACE, STEPS, NODES)
SIGNATURE_SIZE = 65  # r ‖ s ‖ v, as ecrecover's caller splits it
_U64_MAX = (1 << 64) - 1

_DOMAIN_TYPE = [
    {"name": "name", "type": "string"}, {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"}, {"name": "verifyingContract", "type": "address"},
]
_SEAT_STATEMENT_TYPE = [
    {"name": "jobId", "type": "bytes32"}, {"name": "seat", "type": "address"}, {"name": "kind", "type": "uint8"},
    {"name": "index", "type": "uint64"}, {"name": "value", "type": "bytes32"},
]
_VERDICT_TYPE = [
    {"name": "claimId", "type": "bytes32"}, {"name": "defenderRight", "type": "bool"},
    {"name": "outputHash", "type": "bytes32"},
]


def _check_hash(owner: str, name: str, value: object) -> None:
    if type(value) is not bytes or len(value) != 32:
        raise LocalProtocolError(f"{owner}.{name} must be 32 bytes")


def _checksummed(owner: str, name: str, value: object) -> str:
    if not isinstance(value, str) or not is_address(value):
        raise LocalProtocolError(f"{owner}.{name} must be a 20-byte hex address, got {value!r}")
    return to_checksum_address(value)


@dataclass(frozen=True)
class StatementDomain:
    """The EIP-712 domain: one settlement contract on one chain."""

    chain_id: int
    contract: str

    def __post_init__(self) -> None:
        if type(self.chain_id) is not int or not 1 <= self.chain_id < 1 << 256:
            raise LocalProtocolError(f"chain id must be a positive uint256, got {self.chain_id!r}")
        object.__setattr__(self, "contract", _checksummed("StatementDomain", "contract", self.contract))

    def typed(self) -> dict[str, Any]:
        return {"name": DOMAIN_NAME, "version": DOMAIN_VERSION, "chainId": self.chain_id,
                "verifyingContract": self.contract}


@dataclass(frozen=True)
class SeatStatement:
    """A seat's word on one of its lists: `value` is its list of `kind` at `index` for `job_id`."""

    job_id: bytes
    seat: str
    kind: int
    index: int
    value: bytes

    PRIMARY_TYPE = "SeatStatement"

    def __post_init__(self) -> None:
        _check_hash("SeatStatement", "job_id", self.job_id)
        _check_hash("SeatStatement", "value", self.value)
        object.__setattr__(self, "seat", _checksummed("SeatStatement", "seat", self.seat))
        if self.kind not in STATEMENT_KINDS or type(self.kind) is not int:
            raise LocalProtocolError(f"statement kind must be one of {STATEMENT_KINDS}, got {self.kind!r}")
        if type(self.index) is not int or not 0 <= self.index <= _U64_MAX:
            raise LocalProtocolError(f"statement index must be a uint64, got {self.index!r}")
        if self.kind == TRACE and self.index != 0:
            raise LocalProtocolError("a TRACE statement has index 0")

    def message(self) -> dict[str, Any]:
        return {"jobId": self.job_id, "seat": self.seat, "kind": self.kind, "index": self.index, "value": self.value}

    @property
    def slot(self) -> tuple[bytes, str, int, int]:
        """What two statements must share to be about the same list."""
        return self.job_id, self.seat, self.kind, self.index


@dataclass(frozen=True)
class VerdictStatement:
    """A referee's ruling on one claim (EIP-712 type `Verdict`): who was right, and the recomputed output."""

    claim_id: bytes
    defender_right: bool
    output_hash: bytes

    PRIMARY_TYPE = "Verdict"

    def __post_init__(self) -> None:
        _check_hash("VerdictStatement", "claim_id", self.claim_id)
        _check_hash("VerdictStatement", "output_hash", self.output_hash)
        if type(self.defender_right) is not bool:
            raise LocalProtocolError(f"defender_right must be a bool, got {self.defender_right!r}")

    def message(self) -> dict[str, Any]:
        return {"claimId": self.claim_id, "defenderRight": self.defender_right, "outputHash": self.output_hash}


Statement = Union[SeatStatement, VerdictStatement]
_TYPES = {SeatStatement: _SEAT_STATEMENT_TYPE, VerdictStatement: _VERDICT_TYPE}


def typed_data(statement: Statement, domain: StatementDomain) -> dict[str, Any]:
    """The EIP-712 typed data of a statement (what a wallet shows and signs)."""
    if type(statement) not in _TYPES:
        raise LocalProtocolError(f"not a statement: {type(statement).__name__}")
    return {"types": {"EIP712Domain": _DOMAIN_TYPE, statement.PRIMARY_TYPE: _TYPES[type(statement)]},
            "primaryType": statement.PRIMARY_TYPE, "domain": domain.typed(), "message": statement.message()}


def signable(statement: Statement, domain: StatementDomain) -> SignableMessage:
    return encode_typed_data(full_message=typed_data(statement, domain))


def digest(statement: Statement, domain: StatementDomain) -> bytes:
    """keccak256(0x19 ‖ 0x01 ‖ domainSeparator ‖ hashStruct(statement)): what ecrecover is given."""
    message = signable(statement, domain)
    return keccak(b"\x19" + message.version + message.header + message.body)


@dataclass(frozen=True)
class SignedStatement:
    """A statement and its 65-byte signature (r ‖ s ‖ v)."""

    statement: Statement
    signature: bytes

    def __post_init__(self) -> None:
        if type(self.statement) not in _TYPES:
            raise LocalProtocolError(f"not a statement: {type(self.statement).__name__}")
        if type(self.signature) is not bytes or len(self.signature) != SIGNATURE_SIZE:
            raise LocalProtocolError(f"a signature is {SIGNATURE_SIZE} bytes")

    def signer(self, domain: StatementDomain) -> str:
        """The account that signed it (RemoteProtocolError when the signature recovers to nobody)."""
        return recover_signer(self.statement, self.signature, domain)

    def is_by(self, account: str, domain: StatementDomain) -> bool:
        """True when `account` signed it; False for a forged or malformed signature."""
        try:
            return self.signer(domain) == to_checksum_address(account)
        except RemoteProtocolError:
            return False

    def verify(self, domain: StatementDomain) -> bool:
        """A SeatStatement is valid only when signed by its seat (a Verdict names no signer: use `is_by`)."""
        if not isinstance(self.statement, SeatStatement):
            raise LocalProtocolError("a verdict names no signer: check it with is_by(referee, domain)")
        return self.is_by(self.statement.seat, domain)


def sign_statement(statement: Statement, private_key: bytes, domain: StatementDomain) -> SignedStatement:
    """Sign with an account key; a seat signs only its own statements."""
    signed = Account.sign_message(signable(statement, domain), private_key)
    result = SignedStatement(statement, bytes(signed.signature))
    if isinstance(statement, SeatStatement) and not result.verify(domain):
        raise LocalProtocolError(f"this key is not the account of seat {statement.seat}")
    return result


def recover_signer(statement: Statement, signature: bytes, domain: StatementDomain) -> str:
    """ecrecover over the statement's digest; only RemoteProtocolError on a signature that recovers to nobody."""
    if type(signature) is not bytes or len(signature) != SIGNATURE_SIZE:
        raise RemoteProtocolError(f"a signature is {SIGNATURE_SIZE} bytes")
    if signature[64] not in (27, 28):  # the contract's ecrecover takes only these
        raise RemoteProtocolError(f"signature v must be 27 or 28, got {signature[64]}")
    try:
        return Account.recover_message(signable(statement, domain), signature=signature)
    except Exception as exc:  # eth_keys raises several types on an impossible (r, s); all mean "forged"
        raise RemoteProtocolError(f"signature recovers to no account: {type(exc).__name__}") from None


@dataclass(frozen=True)
class Equivocation:
    """Two statements, both signed by `culprit`, that cannot both be true: `slashEquivocation(a, sigA, b, sigB)`."""

    culprit: str
    first: SignedStatement
    second: SignedStatement


def find_equivocation(a: SignedStatement, b: SignedStatement, domain: StatementDomain) -> Equivocation | None:
    """The proof that `a` and `b` conflict, or None (consistent, about different things, or not both provably signed)."""
    if type(a.statement) is not type(b.statement) or a.statement == b.statement:
        return None
    if isinstance(a.statement, SeatStatement):
        if a.statement.slot != b.statement.slot or not (a.verify(domain) and b.verify(domain)):
            return None
        return Equivocation(a.statement.seat, a, b)
    if a.statement.claim_id != b.statement.claim_id:
        return None
    try:
        signer = a.signer(domain)
    except RemoteProtocolError:
        return None
    return Equivocation(signer, a, b) if b.is_by(signer, domain) else None


def contradicts(signed: SignedStatement, on_chain_value: bytes, domain: StatementDomain) -> bool:
    """True when a validly signed seat statement names a list other than the chain's: `slashContradiction`.

    `on_chain_value` is what the chain holds for the statement's slot: the revealed trace root
    for TRACE, the root of the list the seat covers in the game for STEPS and NODES.
    """
    _check_hash("contradicts", "on_chain_value", on_chain_value)
    if not isinstance(signed.statement, SeatStatement):
        raise LocalProtocolError("only seat statements can contradict the chain")
    return signed.verify(domain) and signed.statement.value != on_chain_value
