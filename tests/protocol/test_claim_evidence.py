"""Evidence for a node claim over a real training job: an honest defender's is judged right at every
kind of node, a cheater's first wrong node is judged wrong, tampered evidence is judged wrong by name,
and a transcript recomputes its ruling."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from node.cheats import FlippedBit, SwappedBatch
from node.training_oracle import TrainingOracle, batch_hashes
from protocol.claim_evidence import (
    ClaimEvidence, ClaimRef, Judgement, StateLeafProof, Transcript, build_evidence, check_transcript,
    evidence_hash, judge, transcript_hash,
)
from protocol.claim_lists import first_difference, node_list, step_index, steps_list
from protocol.claims import NODE, claim_id, game_id
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.listtree import list_root
from protocol.messages import TensorPayload
from protocol.program import NodeSpec, Program
from repops_cupy.hashing import hash_tensor
from tests.protocol.test_claim_lists import WRONG_STEP, honest, operator_nodes, training, wrong_node_at  # noqa: F401

JOB_ID = bytes([0x1B]) * 32
KINDS = {"operator", "state-leaf", "batch-leaf", "state-outputs"}


class Claim:
    """One oracle's side of a node claim at step `step`: its lists, the claim id and how the referee judges."""

    def __init__(self, training, oracle: TrainingOracle, step: int = WRONG_STEP) -> None:
        self.training, self.oracle, self.step = training, oracle, step
        self.program = oracle.program()
        self.c, self.j = step_index(oracle.schedule, step)
        self.trace_root = list_root(list(oracle.checkpoint_states()))
        self.steps = steps_list(oracle, self.c)
        self.nodes = node_list(oracle, step)

    def claim_id(self, node: int, nodes=None) -> bytes:
        return claim_id(game_id(JOB_ID, self.trace_root, self.c), NODE, list_root(nodes or self.nodes), node)

    def evidence(self, node: int, nodes=None) -> ClaimEvidence:
        nodes = nodes or self.nodes
        return build_evidence(self.oracle, claim_id=self.claim_id(node, nodes), step=self.step, node=node,
                              node_list=nodes)

    def judge(self, evidence: ClaimEvidence, nodes=None, **kw) -> Judgement:
        """The referee's judgement of `evidence` for the claim on its node (the chain's step and id)."""
        nodes = nodes or self.nodes
        claim = ClaimRef(self.claim_id(evidence.node, nodes), self.step, evidence.node)
        args = dict(claim=claim, program_root=self.program.root, program_size=self.program.size, node_list=nodes,
                    state_before=self.steps[self.j - 1], batch_hashes=batch_hashes(self.training))
        return judge(evidence, **{**args, **kw})


@pytest.fixture(scope="module")
def ours(training, honest) -> Claim:
    return Claim(training, honest)


def kind_of(judgement: Judgement) -> str:
    return judgement.reason.split(" ")[0]


def test_honest_evidence_is_judged_right_at_every_node_of_the_step(ours):
    kinds = set()
    for n in range(ours.program.size):
        judgement = ours.judge(ours.evidence(n))
        assert judgement.defender_right, (n, judgement.reason)
        assert judgement.recomputed == ours.nodes[n]
        kinds.add(kind_of(judgement))
    assert kinds == KINDS


def test_a_cheaters_first_wrong_operator_is_judged_wrong_and_recomputed_to_the_truth(training, honest, ours):
    wrong = operator_nodes(honest)[1]
    theirs = Claim(training, wrong_node_at(training, honest, WRONG_STEP, wrong))
    n = first_difference(ours.nodes, theirs.nodes)
    assert n == wrong
    judgement = theirs.judge(theirs.evidence(n), state_before=ours.steps[ours.j - 1])
    assert not judgement.defender_right and kind_of(judgement) == "operator"
    assert judgement.recomputed == ours.nodes[n] != theirs.nodes[n]


def test_a_cheaters_wrong_state_after_the_step_is_judged_wrong_at_the_state_outputs_entry(training, honest, ours):
    name = next(x for x in ours.program.outputs.names if x != "step")
    theirs = Claim(training, FlippedBit(training, at=WRONG_STEP, name=name, index=0, bit=3, program=ours.program))
    n = first_difference(ours.nodes, theirs.nodes)
    assert n == ours.program.size - 1
    judgement = theirs.judge(theirs.evidence(n))
    assert not judgement.defender_right and kind_of(judgement) == "state-outputs"
    assert judgement.recomputed == ours.nodes[n]


def test_a_cheaters_other_batch_is_judged_wrong_at_its_batch_leaf(training, honest, ours):
    theirs = Claim(training, SwappedBatch(training, at=WRONG_STEP, batch=lambda s: training.batch(0),
                                          program=ours.program))
    n = first_difference(ours.nodes, theirs.nodes)
    assert ours.program.entry(n).leaf_role == "batch"
    evidence = theirs.evidence(n)
    judgement = theirs.judge(evidence)
    assert not judgement.defender_right and kind_of(judgement) == "batch-leaf"
    assert judgement.recomputed == ours.nodes[n]
    # naming the step whose batch it trained on instead is evidence for another claim
    elsewhere = theirs.judge(dataclasses.replace(evidence, step=1))
    assert not elsewhere.defender_right and "not the claim's" in elsewhere.reason


def test_a_wrong_state_leaf_is_judged_wrong_whether_its_proof_tells_the_truth_or_not(ours):
    n = next(i for i, x in enumerate(ours.program.nodes) if x.is_leaf and x.leaf_role == "state")
    lying = list(ours.nodes)
    lying[n] = bytes(32)
    truthful = ours.evidence(n, lying)  # proves the true hash, which is not the list's entry
    judgement = ours.judge(truthful, lying)
    assert not judgement.defender_right and judgement.recomputed == ours.nodes[n]
    forged = dataclasses.replace(truthful, state_leaf=StateLeafProof(bytes(32), truthful.state_leaf.proof))
    judgement = ours.judge(forged, lying)
    assert not judgement.defender_right and "not proven in the state before" in judgement.reason


def tampered(ours: Claim) -> dict[str, tuple[ClaimEvidence, str]]:
    """Honest evidence changed one way each, with the words the judgement must give."""
    op = next(n for n in operator_nodes(ours.oracle) if len(ours.program.entry(n).inputs) == 3)
    ev = ours.evidence(op)
    t = ev.tensors
    flipped = TensorPayload(t[1].dtype, t[1].shape, bytes([t[1].data[0] ^ 1]) + t[1].data[1:])
    state = next(i for i, x in enumerate(ours.program.nodes) if x.is_leaf and x.leaf_role == "state")
    other_state = next(i for i, x in enumerate(ours.program.nodes) if x.is_leaf and x.leaf_role == "state" and i != state)
    leaf = ours.evidence(state)
    return {
        "flipped byte": (dataclasses.replace(ev, tensors=(t[0], flipped, t[2])), f"input 1 of node {op} does not hash"),
        "swapped inputs": (dataclasses.replace(ev, tensors=(t[2], t[1], t[0])), f"input 0 of node {op} does not hash"),
        "missing input": (dataclasses.replace(ev, tensors=t[:2]), "2 input tensors"),
        "wrong entry proof": (dataclasses.replace(ev, entry_proof=ours.program.proof(op - 1)),
                              f"program entry {op} is not proven"),
        "another node's entry": (dataclasses.replace(ev, entry=ours.program.leaves[op - 1]),
                                 f"program entry {op} is not proven"),
        "wrong state proof": (dataclasses.replace(leaf, state_leaf=StateLeafProof(
            leaf.state_leaf.hash, ours.evidence(other_state).state_leaf.proof)), "not proven in the state before"),
        "tensors on a leaf": (dataclasses.replace(leaf, tensors=t[:1]), "takes no tensors"),
        "no state proof": (dataclasses.replace(leaf, state_leaf=None), "lacks a state tensor proof"),
    }


@pytest.mark.parametrize("case", ["flipped byte", "swapped inputs", "missing input", "wrong entry proof",
                                  "another node's entry", "wrong state proof", "tensors on a leaf", "no state proof"])
def test_tampered_evidence_is_judged_wrong_with_a_reason_that_names_it(ours, case):
    evidence, words = tampered(ours)[case]
    judgement = ours.judge(evidence)
    assert not judgement.defender_right and judgement.recomputed == b""
    assert words in judgement.reason


def test_evidence_for_another_claim_is_judged_wrong(ours):
    evidence = ours.evidence(4)
    assert ours.judge(evidence, claim=ClaimRef(evidence.claim_id, ours.step, 4)).defender_right
    for claim in (ClaimRef(bytes(32), ours.step, 4), ClaimRef(evidence.claim_id, ours.step + 1, 4),
                  ClaimRef(evidence.claim_id, ours.step, 5)):
        judgement = ours.judge(evidence, claim=claim)
        assert not judgement.defender_right and "not the claim's" in judgement.reason


def test_an_unknown_operator_or_one_that_fails_on_the_evidence_is_judged_against_the_defender():
    """A program of three nodes by hand: the registry has no `no_such_op`; matmul refuses shapes 2x3 @ 2x3."""
    x = np.ones((2, 3), dtype=np.float32)
    for op in ("no_such_op", "matmul"):
        program = Program([NodeSpec("leaf", {"name": "w", "role": "state"}, ()), NodeSpec(op, {}, (0, 0))], {"w": 0})
        nodes = [hash_tensor(x), bytes([9]) * 32, bytes([7]) * 32]
        evidence = ClaimEvidence(bytes(32), 1, 1, program.leaves[1], program.proof(1),
                                 (TensorPayload.from_array(x),) * 2, None)
        judgement = judge(evidence, claim=ClaimRef(bytes(32), 1, 1), program_root=program.root,
                          program_size=program.size, node_list=nodes, state_before=bytes(32), batch_hashes=None)
        assert not judgement.defender_right
        assert ("not in the registry" if op == "no_such_op" else "matmul fails on the given inputs") in judgement.reason


def test_missing_batch_data_is_the_referees_own_error(ours):
    n = next(i for i, x in enumerate(ours.program.nodes) if x.is_leaf and x.leaf_role == "batch")
    with pytest.raises(LocalProtocolError, match="needs batch_hashes"):
        ours.judge(ours.evidence(n), batch_hashes=None)
    with pytest.raises(LocalProtocolError, match="has no tensor"):
        ours.judge(ours.evidence(n), batch_hashes=lambda step: {})


def test_evidence_hash_binds_every_field_and_decoding_is_strict(ours):
    op = operator_nodes(ours.oracle)[1]
    ev, leaf = ours.evidence(op), ours.evidence(4)
    changed = {
        "claim_id": bytes(32), "step": ev.step + 1, "node": op + 1, "entry": ours.program.leaves[op + 1],
        "entry_proof": ours.program.proof(op + 1), "tensors": ev.tensors[::-1], "state_leaf": leaf.state_leaf,
    }
    assert set(changed) == {f.name for f in dataclasses.fields(ClaimEvidence)}
    hashes = {evidence_hash(dataclasses.replace(ev, **{k: v})) for k, v in changed.items()}
    assert len(hashes | {evidence_hash(ev)}) == len(changed) + 1
    assert ClaimEvidence.decode(ev.encode()) == ev
    for bad in (b"", b"\xc1", ev.encode()[:-1], ev.encode() + b"\x00"):
        with pytest.raises(RemoteProtocolError):
            ClaimEvidence.decode(bad)


def transcript_of(claim: Claim, evidence: ClaimEvidence, judgement: Judgement) -> Transcript:
    return Transcript(JOB_ID, claim.trace_root, claim.c, claim.j, claim.program.root, tuple(claim.steps),
                      tuple(claim.nodes), evidence.encode(), judgement)


def test_a_transcript_recomputes_its_ruling_and_its_hash_binds_it(training, honest, ours):
    wrong = operator_nodes(honest)[2]
    theirs = Claim(training, wrong_node_at(training, honest, WRONG_STEP, wrong))
    first_step = honest.schedule.checkpoint_step(theirs.c)
    for claim, n in ((ours, wrong), (theirs, wrong)):
        evidence = claim.evidence(n)
        ruling = claim.judge(evidence)
        transcript = transcript_of(claim, evidence, ruling)
        assert Transcript.decode(transcript.encode()) == transcript
        assert transcript.node_claim_id == evidence.claim_id and transcript.evidence_hash == evidence_hash(evidence)
        again = check_transcript(transcript, first_step=first_step, program_size=claim.program.size,
                                 batch_hashes=batch_hashes(training))
        assert again == ruling and ruling.defender_right is (claim is ours)
        flipped = dataclasses.replace(transcript, judgement=dataclasses.replace(ruling, defender_right=not ruling.defender_right))
        assert transcript_hash(flipped) != transcript_hash(transcript)
    # lists that do not join as the contract checks: the transcript is refused
    broken = dataclasses.replace(transcript, steps=tuple(ours.steps))
    with pytest.raises(RemoteProtocolError, match="does not end in"):
        check_transcript(broken, first_step=first_step, program_size=ours.program.size, batch_hashes=None)
