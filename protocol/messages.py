"""Every message body of the protocol: job announcement, commitment, dispute moves, verdict.

Each is a frozen dataclass registered under a type tag and schema version; it is
signed inside an `Envelope` (job id, sender, sequence number, deadline). Requests
go from the referee to both parties; each party answers with the matching move.
Every move carries the signed root it speaks for and Merkle proofs against it, so
one move can be checked on its own.

    referee  -> party      party -> referee
    ------------------     -----------------------------------------
                            OpenDispute (challenger only; starts it)
    RevealRequest           RevealChildren   (one level of a descent)
    IntervalRequest         IntervalCommit   (per-step states of one interval)
    StepRequest             StepCommit       (node outputs of one step)
    EvidenceRequest         NodeEvidence     (one node's program entry and inputs)
    Verdict
"""
from __future__ import annotations

from dataclasses import dataclass, field

import blake3
import numpy as np

from repops_cupy.hashing import hash_tensor

from .commitments import EquivocationProof, SignedRoot
from .envelope import MAX_TENSOR_MESSAGE_SIZE, Envelope, Message, message
from .errors import LocalProtocolError
from .identity import NODE_ID_SIZE
from .jobs import SignedJobTerms
from .merkle import HASH_SIZE, MAX_TREE_SIZE, ChildrenProof, InclusionProof
from .program import MAX_INPUTS, MAX_PROGRAM_LEAF_SIZE, MAX_STATE_TENSORS
from .wire import Bytes, Maybe, Nested, SeqOf, Text, UInt, WireStruct, wire

LEVELS = (1, 2, 3)  # 1: checkpoints of the trace, 2: steps of an interval, 3: nodes of a step
LEVEL_KINDS = {1: "trace", 2: "interval", 3: "step"}

# why a party lost
TIMEOUT = "timeout"                # missed a per-move deadline or ran out of clock
INVALID_MOVE = "invalid-move"      # a proof that does not hold, a wrong range, size or root
CONTRADICTION = "contradiction"    # a new commitment that disagrees with the party's earlier one
EQUIVOCATION = "equivocation"      # signed two different roots for one key
WRONG_RESULT = "wrong-result"      # its claim differs from what the referee recomputed
UNCOMPUTABLE = "uncomputable"      # the agreed inputs make the operator fail: no claim can be right
FAULT_REASONS = (TIMEOUT, INVALID_MOVE, CONTRADICTION, EQUIVOCATION, WRONG_RESULT, UNCOMPUTABLE)

# dtypes a tensor may have on the wire: the canonical (little-endian) numpy codes
TENSOR_DTYPES = ("|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8")
MAX_RANK = 8
_DISPUTE_ID_DOMAIN = b"gavel/dispute-id/v1\0"

_H = Bytes(HASH_SIZE)
_ID = Bytes(NODE_ID_SIZE)
_POS = UInt(0, MAX_TREE_SIZE)


def _hash() -> Bytes:
    return _H


@dataclass(frozen=True)
class TensorPayload(WireStruct):
    dtype: str = field(metadata=wire(Text(4, choices=TENSOR_DTYPES)))
    shape: tuple[int, ...] = field(metadata=wire(SeqOf(UInt(0, 1 << 40), MAX_RANK)))
    data: bytes = field(metadata=wire(Bytes(max_size=MAX_TENSOR_MESSAGE_SIZE)))

    def _validate(self) -> None:
        count = 1
        for d in self.shape:
            count *= d
        if count * np.dtype(self.dtype).itemsize != len(self.data):
            raise LocalProtocolError(f"tensor {self.dtype} {self.shape} needs {count} items, data has {len(self.data)} bytes")

    @classmethod
    def from_array(cls, array: object) -> TensorPayload:
        arr = np.asarray(array)
        if arr.dtype.kind not in "biuf":
            raise LocalProtocolError(f"tensors of dtype {arr.dtype} do not travel on the wire")
        canon = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).reshape(arr.shape)
        return cls(canon.dtype.str, tuple(int(d) for d in canon.shape), canon.tobytes())

    def to_array(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.dtype(self.dtype)).reshape(self.shape).copy()

    def tensor_hash(self) -> bytes:
        return hash_tensor(self.to_array())


# --- announcements -------------------------------------------------------------------


@message("job-offer")
@dataclass(frozen=True)
class JobOffer(Message):
    """A client announces a job: its signed terms. The envelope's job id must be their hash."""

    terms: SignedJobTerms = field(metadata=wire(Nested(SignedJobTerms)))

    def check_envelope(self, envelope: Envelope) -> None:
        if envelope.sender != self.terms.terms.client:
            raise LocalProtocolError("a job is offered by its client only")
        if envelope.job_id != self.terms.job_id:
            raise LocalProtocolError("the envelope's job id is not the hash of the offered terms")
        if not self.terms.verify():
            raise LocalProtocolError("the job terms' signature does not hold")


@message("commitment")
@dataclass(frozen=True)
class Commitment(Message):
    """A provider or auditor publishes its signed trace root (its checkpoint count is `leaf_count - 1`)."""

    root: SignedRoot = field(metadata=wire(Nested(SignedRoot)))

    def check_envelope(self, envelope: Envelope) -> None:
        _own_root(self.root, envelope, "trace")


def _own_root(root: SignedRoot, envelope: Envelope, kind: str | None) -> None:
    if root.job_id != envelope.job_id or root.signer != envelope.sender:
        raise LocalProtocolError("a signed root travels in its own job, from its own signer")
    if kind is not None and root.kind != kind:
        raise LocalProtocolError(f"expected a {kind} root, got {root.kind}")
    if not root.verify():
        raise LocalProtocolError("the signed root's signature does not hold")


# --- the dispute game ------------------------------------------------------------------


@message("dispute-open")
@dataclass(frozen=True)
class OpenDispute(Message):
    """The challenger's claim: its trace and the defender's differ. The dispute id is this envelope's hash."""

    challenger_root: SignedRoot = field(metadata=wire(Nested(SignedRoot)))
    defender_root: SignedRoot = field(metadata=wire(Nested(SignedRoot)))

    def check_envelope(self, envelope: Envelope) -> None:
        _own_root(self.challenger_root, envelope, "trace")
        d = self.defender_root
        if d.job_id != envelope.job_id or d.kind != "trace" or not d.verify():
            raise LocalProtocolError("the defender's root must be a validly signed trace root of this job")
        if d.signer == envelope.sender:
            raise LocalProtocolError("a party cannot challenge itself")


def dispute_id_of(open_envelope: Envelope) -> bytes:
    """A dispute is named by the hash of the challenger's OpenDispute envelope."""
    return blake3.blake3(_DISPUTE_ID_DOMAIN + open_envelope.encode()).digest()


@message("reveal-request")
@dataclass(frozen=True)
class RevealRequest(Message):
    """Reveal the children of node [lo, hi) of your tree at `level`."""

    dispute_id: bytes = field(metadata=wire(_hash()))
    level: int = field(metadata=wire(UInt(1, 3)))
    lo: int = field(metadata=wire(_POS))
    hi: int = field(metadata=wire(_POS))


@message("reveal")
@dataclass(frozen=True)
class RevealChildren(Message):
    dispute_id: bytes = field(metadata=wire(_hash()))
    level: int = field(metadata=wire(UInt(1, 3)))
    root: SignedRoot = field(metadata=wire(Nested(SignedRoot)))
    proof: ChildrenProof = field(metadata=wire(Nested(ChildrenProof)))

    def check_envelope(self, envelope: Envelope) -> None:
        _own_root(self.root, envelope, LEVEL_KINDS[self.level])


@message("interval-request")
@dataclass(frozen=True)
class IntervalRequest(Message):
    """Recompute interval `checkpoint` from the agreed checkpoint and commit its per-step states."""

    dispute_id: bytes = field(metadata=wire(_hash()))
    checkpoint: int = field(metadata=wire(_POS))


@message("interval-commit")
@dataclass(frozen=True)
class IntervalCommit(Message):
    """The interval tree's signed root, tied at both ends to the party's trace, and its root's children.

    trace_start/trace_end: the party's checkpoint states c and c+1, proven in its trace.
    interval_start/interval_end: the first and last leaves of its interval tree.
    Honest parties have trace_start == interval_start and trace_end == interval_end.
    """

    dispute_id: bytes = field(metadata=wire(_hash()))
    checkpoint: int = field(metadata=wire(_POS))
    trace_start: bytes = field(metadata=wire(_hash()))
    trace_start_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    trace_end: bytes = field(metadata=wire(_hash()))
    trace_end_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    root: SignedRoot = field(metadata=wire(Nested(SignedRoot)))
    interval_start: bytes = field(metadata=wire(_hash()))
    interval_start_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    interval_end: bytes = field(metadata=wire(_hash()))
    interval_end_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    children: ChildrenProof = field(metadata=wire(Nested(ChildrenProof)))

    def check_envelope(self, envelope: Envelope) -> None:
        _own_root(self.root, envelope, "interval")


@message("step-request")
@dataclass(frozen=True)
class StepRequest(Message):
    """Commit the node outputs of `step`, followed by the state after it."""

    dispute_id: bytes = field(metadata=wire(_hash()))
    step: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))


@message("step-commit")
@dataclass(frozen=True)
class StepCommit(Message):
    """The step tree's signed root, tied to the interval tree, and its root's children.

    before/after: the states before and after the step, proven in the interval tree.
    state_after: the step tree's last leaf. Honest parties have state_after == after.
    """

    dispute_id: bytes = field(metadata=wire(_hash()))
    step: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))
    before: bytes = field(metadata=wire(_hash()))
    before_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    after: bytes = field(metadata=wire(_hash()))
    after_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    root: SignedRoot = field(metadata=wire(Nested(SignedRoot)))
    state_after: bytes = field(metadata=wire(_hash()))
    state_after_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    children: ChildrenProof = field(metadata=wire(Nested(ChildrenProof)))

    def check_envelope(self, envelope: Envelope) -> None:
        _own_root(self.root, envelope, "step")


@message("evidence-request")
@dataclass(frozen=True)
class EvidenceRequest(Message):
    """Give node `node` of step `step`: its program entry, its output and its inputs."""

    dispute_id: bytes = field(metadata=wire(_hash()))
    step: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))
    node: int = field(metadata=wire(_POS))


@dataclass(frozen=True)
class InputEvidence(WireStruct):
    """One agreed hash with its proof, and (for operator inputs) the tensor itself.

    For an operator node: input i is the output of an earlier node, proven in the
    party's step tree, with the tensor. For a state leaf: the tensor's hash proven in
    the state before the step (leaf data `state_leaf(name, hash)`). For the state
    outputs: each output node's hash, proven in the step tree, without tensor.
    """

    hash: bytes = field(metadata=wire(_hash()))
    proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    tensor: TensorPayload | None = field(metadata=wire(Maybe(Nested(TensorPayload))))


@message("node-evidence", max_size=MAX_TENSOR_MESSAGE_SIZE)
@dataclass(frozen=True)
class NodeEvidence(Message):
    dispute_id: bytes = field(metadata=wire(_hash()))
    step: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))
    node: int = field(metadata=wire(_POS))
    entry: bytes = field(metadata=wire(Bytes(max_size=MAX_PROGRAM_LEAF_SIZE)))
    entry_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    output: bytes = field(metadata=wire(_hash()))
    output_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    inputs: tuple[InputEvidence, ...] = field(
        metadata=wire(SeqOf(Nested(InputEvidence), max(MAX_INPUTS, MAX_STATE_TENSORS))))


@dataclass(frozen=True)
class Fault(WireStruct):
    party: bytes = field(metadata=wire(_ID))
    reason: str = field(metadata=wire(Text(16, choices=FAULT_REASONS)))
    detail: str = field(metadata=wire(Text(256)))


@message("verdict")
@dataclass(frozen=True)
class Verdict(Message):
    """The referee's ruling, signed in its envelope.

    faults: the losers (none, one or both) and why. depth: how far the descent got
    (0: not located; 1: `checkpoint` is the first differing checkpoint; 2: `step`
    too; 3: `node` too). recomputed: the hash the referee computed for that node
    (empty when it computed none). transcript_hash: the hash chain over every
    message of the dispute, in the order the referee sent and accepted them.
    """

    dispute_id: bytes = field(metadata=wire(_hash()))
    challenger: bytes = field(metadata=wire(_ID))
    defender: bytes = field(metadata=wire(_ID))
    faults: tuple[Fault, ...] = field(metadata=wire(SeqOf(Nested(Fault), 2)))
    depth: int = field(metadata=wire(UInt(0, 3)))
    checkpoint: int = field(metadata=wire(_POS))
    step: int = field(metadata=wire(_POS))
    node: int = field(metadata=wire(_POS))
    recomputed: bytes = field(metadata=wire(Bytes(max_size=HASH_SIZE)))
    rounds: int = field(metadata=wire(UInt(0, 1 << 16)))
    transcript_hash: bytes = field(metadata=wire(_hash()))
    equivocation: EquivocationProof | None = field(metadata=wire(Maybe(Nested(EquivocationProof))))

    def _validate(self) -> None:
        parties = {self.challenger, self.defender}
        if len(parties) != 2 or any(f.party not in parties for f in self.faults):
            raise LocalProtocolError("a verdict names two distinct parties, and faults only of them")
        if len({f.party for f in self.faults}) != len(self.faults):
            raise LocalProtocolError("a verdict names each losing party once")
        if len(self.recomputed) not in (0, HASH_SIZE):
            raise LocalProtocolError("recomputed is empty or a 32-byte hash")

    @property
    def losers(self) -> frozenset[bytes]:
        return frozenset(f.party for f in self.faults)

    def lost(self, party: bytes) -> bool:
        return party in self.losers
