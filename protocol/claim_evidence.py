"""The evidence for a node claim, its hash, the referee's judgement and its transcript (docs/economics.md 8.2, 9).

A node claim says "entry n of this node list is wrong". The defenders answer with
`ClaimEvidence`: node n's program entry proven against the job's program root, and what
the referee needs to recompute that entry's output from agreed or the defenders' own data:

    node kind          evidence carries                         recomputed output
    operator           each input's tensor                      registry.run(op, tensors, attrs)
    state leaf         its tensor hash, proven in state s-1     that hash
    batch leaf         nothing (the referee has the data)       the referee's own batch hash
    StateOutputs (N)   nothing                                  state root of the listed entries

An operator input is the output of an earlier node: its tensor must hash to that node's
entry of the node list. The referee holds the whole list (posted on chain, its root the
claim's), so an entry needs no proof; the state before the step is the picked steps list's
entry s-1, and a state leaf's hash is proven in it with the state tree's BLAKE3 proof.
`judge` rules the defender right when the recomputed output is the list's entry n. Evidence
that does not hold (a bad proof, a tensor of another hash, an input missing or extra, an
operator the registry lacks, an operator that fails on it) rules against the defender: it
posted it. Missing batch data is the referee's own fault (`LocalProtocolError`).

`evidence_hash` (keccak of the canonical encoding) is what `postEvidence` posts. The
`Transcript` holds everything a third party needs to recompute a ruling without the chain:
the game's on-chain references, both lists, the evidence and the judgement; keccak of its
encoding is the `transcriptHash` of `rule`, and `check_transcript` recomputes it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .keccak import keccak

from repops_cupy import registry
from repops_cupy.hashing import hash_tensor

from .claims import NODE, STEP, claim_id as claim_id_of, game_id as game_id_of
from .commitments import state_leaf, state_root, state_tree
from .envelope import MAX_TENSOR_MESSAGE_SIZE
from .errors import LocalProtocolError, RemoteProtocolError
from .listtree import ENTRY_SIZE, MAX_LIST, list_root
from .merkle import HASH_SIZE, MAX_TREE_SIZE, InclusionProof
from .messages import TensorPayload
from .oracle import BatchOracle, TraceOracle
from .program import MAX_INPUTS, MAX_PROGRAM_LEAF_SIZE, NodeSpec, StateOutputs, decode_program_leaf
from .wire import Bytes, Maybe, Nested, SeqOf, Spec, Text, UInt, WireStruct, decode_struct, wire

MAX_EVIDENCE_SIZE = MAX_TENSOR_MESSAGE_SIZE
MAX_TRANSCRIPT_SIZE = MAX_EVIDENCE_SIZE + (1 << 20)  # the evidence and two lists of at most MAX_LIST hashes
_H = Bytes(HASH_SIZE)


class BadEvidence(RemoteProtocolError):
    """Evidence that does not hold: the party that posted it loses."""


class _Flag(Spec):
    """A bool (msgpack true / false)."""

    def check(self, value: Any, where: str) -> None:
        if type(value) is not bool:
            raise LocalProtocolError(f"{where}: must be a bool, got {type(value).__name__}")


# --- what node n is, and its output (shared with version 1's referee) ----------------------------


def proven_entry(entry: bytes, proof: InclusionProof, *, program_root: bytes, program_size: int,
                 node: int) -> NodeSpec | StateOutputs:
    """Program entry `node`, proven against the program root and of the kind its index says."""
    if not proof.verify(program_root, entry, size=program_size, index=node):
        raise BadEvidence(f"program entry {node} is not proven in the job's program root")
    try:
        spec = decode_program_leaf(entry)
    except RemoteProtocolError as exc:
        raise BadEvidence(f"program entry {node} does not decode: {exc}") from None
    if isinstance(spec, StateOutputs) != (node == program_size - 1):
        raise BadEvidence(f"program entry {node} is of the wrong kind")
    return spec


def operator_output(spec: NodeSpec, arrays: Sequence[Any]) -> bytes:
    """The tensor hash of `spec`'s operator on `arrays`; an operator that fails on them raises BadEvidence."""
    try:
        return hash_tensor(registry.run(spec.op, list(arrays), spec.attrs))
    except Exception as exc:  # the operator refuses these inputs: no claimed output can be right
        raise BadEvidence(f"{spec.op} fails on the given inputs: {type(exc).__name__}") from None


def batch_hash(batch_hashes: BatchOracle | None, step: int, name: str) -> bytes:
    """The referee's own hash of batch tensor `name` of step `step`."""
    if batch_hashes is None:
        raise LocalProtocolError("the claim is on a batch leaf: the referee needs batch_hashes")
    hashes: Mapping[str, bytes] = batch_hashes(step)
    if name not in hashes:
        raise LocalProtocolError(f"batch_hashes({step}) has no tensor {name!r}")
    return hashes[name]


# --- the evidence --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateLeafProof(WireStruct):
    """A state tensor's hash, proven in the state tree of the state before the step."""

    hash: bytes = field(metadata=wire(_H))
    proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))


@dataclass(frozen=True)
class ClaimEvidence(WireStruct):
    """A defender's evidence for node claim `claim_id`: node `node` of step `step`."""

    claim_id: bytes = field(metadata=wire(_H))
    step: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))
    node: int = field(metadata=wire(UInt(0, MAX_LIST - 1)))
    entry: bytes = field(metadata=wire(Bytes(max_size=MAX_PROGRAM_LEAF_SIZE)))
    entry_proof: InclusionProof = field(metadata=wire(Nested(InclusionProof)))
    tensors: tuple[TensorPayload, ...] = field(metadata=wire(SeqOf(Nested(TensorPayload), MAX_INPUTS)))
    state_leaf: StateLeafProof | None = field(metadata=wire(Maybe(Nested(StateLeafProof))))

    @classmethod
    def decode(cls, data: bytes) -> ClaimEvidence:
        """Strictly decode evidence from untrusted bytes; raises only RemoteProtocolError."""
        return decode_struct(cls, data, max_size=MAX_EVIDENCE_SIZE)


def evidence_hash(evidence: ClaimEvidence) -> bytes:
    """keccak256 of the canonical encoding: what `postEvidence` posts."""
    return keccak(evidence.encode())


def build_evidence(oracle: TraceOracle, *, claim_id: bytes, step: int, node: int,
                   node_list: Sequence[bytes]) -> ClaimEvidence:
    """The evidence for node `node` of step `step`, from the oracle that computed `node_list`.

    Raises LocalProtocolError when the oracle's tensors do not hash to the list's entries:
    this oracle did not compute that list.
    """
    program = oracle.program()
    if len(node_list) != program.size:
        raise LocalProtocolError(f"a node list of {len(node_list)} entries, the program has {program.size}")
    if type(node) is not int or not 0 <= node < program.size:
        raise LocalProtocolError(f"node {node!r} is outside a program of {program.size} entries")
    spec = program.entry(node)
    tensors: tuple[TensorPayload, ...] = ()
    leaf: StateLeafProof | None = None
    if isinstance(spec, NodeSpec) and spec.is_leaf and spec.leaf_role == "state":
        hashes = dict(oracle.state_tensor_hashes(step - 1))
        tree, names = state_tree(hashes)
        leaf = StateLeafProof(hashes[spec.leaf_name], tree.inclusion_proof(names.index(spec.leaf_name)))
    elif isinstance(spec, NodeSpec) and not spec.is_leaf:
        arrays = list(oracle.node_inputs(step, node))
        if len(arrays) != len(spec.inputs):
            raise LocalProtocolError(f"the oracle gave {len(arrays)} inputs for node {node}, it has {len(spec.inputs)}")
        tensors = tuple(TensorPayload.from_array(a) for a in arrays)
        for m, t in zip(spec.inputs, tensors):
            if t.tensor_hash() != node_list[m]:
                raise LocalProtocolError(f"the oracle's output of node {m} is not the node list's entry {m}")
    return ClaimEvidence(claim_id, step, node, program.leaves[node], program.proof(node), tensors, leaf)


# --- the judgement -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimRef(WireStruct):
    """A node claim as the chain holds it: its id, the step (global) and the node it picked."""

    claim_id: bytes = field(metadata=wire(_H))
    step: int = field(metadata=wire(UInt(1, MAX_TREE_SIZE)))
    node: int = field(metadata=wire(UInt(0, MAX_LIST - 1)))


@dataclass(frozen=True)
class Judgement(WireStruct):
    """The ruling on one node claim: the recomputed output hash (empty when the evidence did not hold)."""

    defender_right: bool = field(metadata=wire(_Flag()))
    reason: str = field(metadata=wire(Text(512)))
    recomputed: bytes = field(metadata=wire(Bytes(max_size=HASH_SIZE)))

    def _validate(self) -> None:
        if len(self.recomputed) not in (0, HASH_SIZE):
            raise LocalProtocolError(f"a recomputed hash is {HASH_SIZE} bytes, or empty when none was")


def judge(evidence: ClaimEvidence, *, claim: ClaimRef, program_root: bytes, program_size: int,
          node_list: Sequence[bytes], state_before: bytes, batch_hashes: BatchOracle | None) -> Judgement:
    """Rule on `evidence` for `claim`: is entry n of the defenders' `node_list` what node n computes?

    `claim` is the node claim as the chain holds it; evidence that names another claim, step or
    node rules against the defender (a step of its choosing would pick the batch it is judged by).
    `node_list` is the picked list (N + 1 entries, its root the claim's), `state_before` the
    picked steps list's entry before the step.
    """
    if len(node_list) != program_size or any(type(e) is not bytes or len(e) != ENTRY_SIZE for e in node_list):
        raise LocalProtocolError(f"the node list must be {program_size} hashes (the contract fixes N + 1)")
    try:
        if (evidence.claim_id, evidence.step, evidence.node) != (claim.claim_id, claim.step, claim.node):
            raise BadEvidence(f"evidence for step {evidence.step} node {evidence.node} of claim "
                              f"{evidence.claim_id.hex()[:8]}, not the claim's")
        n = evidence.node
        spec = proven_entry(evidence.entry, evidence.entry_proof, program_root=program_root,
                            program_size=program_size, node=n)
        kind, recomputed = _recompute(evidence, spec, node_list, state_before, batch_hashes)
    except BadEvidence as exc:
        return Judgement(False, f"invalid evidence: {exc}"[:512], b"")
    claimed = node_list[n]
    if recomputed == claimed:
        return Judgement(True, f"{kind} node {n} of step {evidence.step} recomputes to the claimed "
                               f"{claimed.hex()[:16]}", recomputed)
    return Judgement(False, f"{kind} node {n} of step {evidence.step} claims {claimed.hex()[:16]}, "
                            f"recomputed {recomputed.hex()[:16]}", recomputed)


def _recompute(evidence: ClaimEvidence, spec: NodeSpec | StateOutputs, node_list: Sequence[bytes],
               state_before: bytes, batch_hashes: BatchOracle | None) -> tuple[str, bytes]:
    n = evidence.node
    is_state_leaf = isinstance(spec, NodeSpec) and spec.is_leaf and spec.leaf_role == "state"
    is_operator = isinstance(spec, NodeSpec) and not spec.is_leaf
    if evidence.tensors and not is_operator:
        raise BadEvidence(f"node {n} takes no tensors, the evidence gives {len(evidence.tensors)}")
    if (evidence.state_leaf is not None) != is_state_leaf:
        raise BadEvidence(f"node {n} {'lacks' if is_state_leaf else 'has'} a state tensor proof")
    if isinstance(spec, StateOutputs):
        if any(m >= n for m in spec.nodes):
            raise BadEvidence(f"the state outputs name a node at or after {n}")
        return "state-outputs", state_root({name: node_list[m] for name, m in zip(spec.names, spec.nodes)})
    if is_state_leaf:
        leaf = evidence.state_leaf
        if not leaf.proof.verify(state_before, state_leaf(spec.leaf_name, leaf.hash)):
            raise BadEvidence(f"state tensor {spec.leaf_name!r} is not proven in the state before the step")
        return "state-leaf", leaf.hash
    if spec.is_leaf:
        return "batch-leaf", batch_hash(batch_hashes, evidence.step, spec.leaf_name)
    if spec.op not in registry.names():
        raise BadEvidence(f"operator {spec.op!r} is not in the registry")
    if len(evidence.tensors) != len(spec.inputs):
        raise BadEvidence(f"{len(evidence.tensors)} input tensors for node {n}, which takes {len(spec.inputs)}")
    for i, (m, tensor) in enumerate(zip(spec.inputs, evidence.tensors)):
        if m >= n:
            raise BadEvidence(f"node {n} reads node {m}, which does not come before it")
        if tensor.tensor_hash() != node_list[m]:
            raise BadEvidence(f"input {i} of node {n} does not hash to the node list's entry {m}")
    return "operator", operator_output(spec, [t.to_array() for t in evidence.tensors])


# --- the transcript ------------------------------------------------------------------------------

_LIST = SeqOf(_H, MAX_LIST, min_len=1)


@dataclass(frozen=True)
class Transcript(WireStruct):
    """What the referee publishes: enough to recompute its ruling (section 9).

    The game is keccak(job_id, trace_root, interval); `steps` the picked steps list, `step_index`
    the step claim's index j in it; `nodes` the picked node list; `evidence` the encoded
    evidence ruled on (its keccak the posted evidence hash). The claim ids follow from them.
    """

    job_id: bytes = field(metadata=wire(_H))
    trace_root: bytes = field(metadata=wire(_H))
    interval: int = field(metadata=wire(UInt(0, MAX_LIST - 2)))
    step_index: int = field(metadata=wire(UInt(1, MAX_LIST - 1)))
    program_root: bytes = field(metadata=wire(_H))
    steps: tuple[bytes, ...] = field(metadata=wire(_LIST))
    nodes: tuple[bytes, ...] = field(metadata=wire(_LIST))
    evidence: bytes = field(metadata=wire(Bytes(max_size=MAX_EVIDENCE_SIZE)))
    judgement: Judgement = field(metadata=wire(Nested(Judgement)))

    def _validate(self) -> None:
        if self.step_index >= len(self.steps):
            raise LocalProtocolError(f"step {self.step_index} is outside a steps list of {len(self.steps)}")

    @classmethod
    def decode(cls, data: bytes) -> Transcript:
        """Strictly decode a transcript from untrusted bytes; raises only RemoteProtocolError."""
        return decode_struct(cls, data, max_size=MAX_TRANSCRIPT_SIZE)

    @property
    def game_id(self) -> bytes:
        return game_id_of(self.job_id, self.trace_root, self.interval)

    @property
    def step_claim_id(self) -> bytes:
        return claim_id_of(self.game_id, STEP, list_root(self.steps), self.step_index)

    @property
    def node_claim_id(self) -> bytes:
        """The node claim ruled on, from the node index the evidence names."""
        return claim_id_of(self.game_id, NODE, list_root(self.nodes), ClaimEvidence.decode(self.evidence).node)

    @property
    def evidence_hash(self) -> bytes:
        return keccak(self.evidence)


def transcript_hash(transcript: Transcript) -> bytes:
    """keccak256 of the canonical encoding: the `transcriptHash` of `rule`."""
    return keccak(transcript.encode())


def check_transcript(transcript: Transcript, *, first_step: int, program_size: int,
                     batch_hashes: BatchOracle | None) -> Judgement:
    """Recompute the ruling a transcript records, from its own lists and evidence.

    `first_step` is the global step before the interval's first (checkpoint_step of the
    interval) and `program_size` the job's: both from the job's terms, like the program root
    the caller compares with `transcript.program_root`. Raises RemoteProtocolError when the
    transcript does not hang together (its lists do not join as the contract checks, its
    evidence does not decode); returns the judgement the referee should have made.
    """
    steps, nodes, j = transcript.steps, transcript.nodes, transcript.step_index
    if len(nodes) != program_size:
        raise RemoteProtocolError(f"the node list has {len(nodes)} entries, the program {program_size}")
    if nodes[-1] != steps[j]:
        raise RemoteProtocolError(f"the node list does not end in the steps list's entry {j}")
    evidence = ClaimEvidence.decode(transcript.evidence)
    claim = ClaimRef(claim_id_of(transcript.game_id, NODE, list_root(nodes), evidence.node), first_step + j,
                     evidence.node)
    return judge(evidence, claim=claim, program_root=transcript.program_root, program_size=program_size,
                 node_list=nodes, state_before=steps[j - 1], batch_hashes=batch_hashes)
