"""The dispute game end to end: a referee and two parties, honest and cheating, on synthetic jobs.

Every game runs through `protocol_world.play`, which delivers each message as bytes
and asserts that the receiver decoded exactly what the sender sealed.
"""
from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from protocol import (
    CHALLENGER, CONTRADICTION, DEFENDER, EQUIVOCATION, INVALID_MOVE, TIMEOUT, UNCOMPUTABLE, WRONG_RESULT,
    DisputeRules, Envelope, EvidenceRequest, IntervalCommit, LocalProtocolError, NodeEvidence, OpenDispute,
    Program, Referee, RemoteProtocolError, RevealChildren, RevealRequest, SignedRoot, StepCommit, TensorPayload, Transcript,
    commit_trace, decode_envelope, hash_tree, max_rounds,
)
from .protocol_world import (
    ALICE, BOB, CLIENT, RULES, Adversary, Tamper, World, batch_hashes_for, chain_program, expected_location,
    live_nodes, make_game, make_terms, play, random_program, resign,
)
from repops_cupy.hashing import hash_tensor

STEPS, EVERY = 10, 3
PROGRAM = chain_program(6)  # 3 leaves (w, v state; x batch) and 6 operators: nodes 0..8, outputs entry 9
OP_NODE = 6


def duel(tamper: Tamper, *, cheater: str = DEFENDER, program=PROGRAM, steps=STEPS, every=EVERY, rewrite=None,
         delay: int = 1, rules: DisputeRules = RULES, batch: bool = True, cheat_ops=None, honest_ops=None,
         cheat_world=None, defender_root=None):
    honest = World(program, steps, every, ops=honest_ops)
    cheat = cheat_world or World(program, steps, every, tamper=tamper, ops=cheat_ops)
    worlds = (cheat, honest) if cheater == CHALLENGER else (honest, cheat)
    game = make_game(program, steps, every, challenger_world=worlds[0], defender_world=worlds[1], rules=rules,
                     batch=batch)
    if rewrite is not None or delay != 1:
        wrapped = Adversary(getattr(game, cheater), rewrite or (lambda env, i: env), delay)
        setattr(game, cheater, wrapped)
    outcome = play(game, defender_root=defender_root)
    check_outcome(game, outcome, program, steps, every)
    return outcome.verdict, honest, cheat, game


def check_outcome(game, outcome, program, steps, every) -> None:
    verdict = outcome.verdict
    assert verdict is game.referee.verdict
    for party, seen in outcome.party_verdicts.items():
        assert seen == verdict
    decoded = decode_envelope(outcome.verdict_envelope.encode())
    assert decoded.sender == CLIENT.node_id and decoded.body == verdict
    assert Transcript.replay(verdict.dispute_id, game.referee.transcript.records).head == verdict.transcript_hash
    intervals = -(-steps // every)
    assert verdict.rounds <= max_rounds(intervals, every, len(program.nodes))
    if verdict.equivocation is not None:
        assert verdict.equivocation.verify()


def party_id(side: str):
    return ALICE.node_id if side == CHALLENGER else BOB.node_id


def faults(verdict) -> dict[bytes, str]:
    return {f.party: f.reason for f in verdict.faults}


# --- honest against a consistent cheater: the game finds the exact node ---------------------------


@pytest.mark.parametrize("cheater", [DEFENDER, CHALLENGER])
def test_wrong_operator_output_is_found_and_loses(cheater):
    verdict, honest, cheat, _ = duel(Tamper("node", 5, OP_NODE), cheater=cheater)
    assert faults(verdict) == {party_id(cheater): WRONG_RESULT}
    assert (verdict.depth, verdict.checkpoint, verdict.step, verdict.node) == expected_location(honest, cheat) == (3, 2, 5, 6)
    assert verdict.recomputed == honest.node_hashes[5][OP_NODE] != cheat.node_hashes[5][OP_NODE]


def test_both_wrong_at_the_same_node_both_lose():
    honest_but_wrong = World(PROGRAM, STEPS, EVERY, tamper=Tamper("node", 4, OP_NODE, amount=2))
    cheat = World(PROGRAM, STEPS, EVERY, tamper=Tamper("node", 4, OP_NODE, amount=1))
    game = make_game(PROGRAM, STEPS, EVERY, challenger_world=cheat, defender_world=honest_but_wrong)
    outcome = play(game)
    check_outcome(game, outcome, PROGRAM, STEPS, EVERY)
    assert faults(outcome.verdict) == {ALICE.node_id: WRONG_RESULT, BOB.node_id: WRONG_RESULT}
    assert outcome.verdict.recomputed == World(PROGRAM, STEPS, EVERY).node_hashes[4][OP_NODE]


def test_wrong_state_leaf_loses_to_the_agreed_state():
    verdict, honest, cheat, _ = duel(Tamper("node", 7, 1))  # node 1 is the state leaf "v"
    assert faults(verdict) == {BOB.node_id: WRONG_RESULT}
    assert (verdict.step, verdict.node) == (7, 1)
    assert verdict.recomputed == hash_tensor(honest.states[6]["v"])


def test_wrong_batch_loses_to_the_clients_own_batch():
    verdict, honest, _, _ = duel(Tamper("node", 2, 2))  # node 2 is the batch leaf "x"
    assert faults(verdict) == {BOB.node_id: WRONG_RESULT}
    assert (verdict.step, verdict.node) == (2, 2)
    assert verdict.recomputed == batch_hashes_for(1)(2)["x"]


def test_a_batch_leaf_needs_the_referees_batch_source():
    with pytest.raises(LocalProtocolError, match="batch_hashes"):
        duel(Tamper("node", 2, 2), batch=False)


def test_state_not_assembled_from_the_nodes_loses_at_the_outputs_entry():
    verdict, honest, _, _ = duel(Tamper("state", 8))
    assert faults(verdict) == {BOB.node_id: WRONG_RESULT}
    assert (verdict.step, verdict.node) == (8, PROGRAM.size - 1)
    assert verdict.recomputed == honest.state_hashes[8]


@pytest.mark.parametrize("cheater", [DEFENDER, CHALLENGER])
def test_wrong_initial_state_is_decided_at_checkpoint_zero(cheater):
    verdict, honest, _, _ = duel(Tamper("initial"), cheater=cheater)
    assert faults(verdict) == {party_id(cheater): WRONG_RESULT}
    assert (verdict.depth, verdict.checkpoint) == (1, 0)
    assert verdict.recomputed == honest.state_hashes[0]


def test_last_short_interval_and_single_step_intervals():
    for steps, every, step in ((11, 4, 10), (5, 1, 3), (1, 1, 1), (7, 7, 7)):
        verdict, honest, cheat, _ = duel(Tamper("node", step, OP_NODE), steps=steps, every=every)
        assert faults(verdict) == {BOB.node_id: WRONG_RESULT}
        assert (verdict.depth, verdict.checkpoint, verdict.step, verdict.node) == expected_location(honest, cheat)


def test_operator_failing_on_agreed_inputs_makes_both_lose():
    program = chain_program(4, last_op="ptest.explode")
    identity = {"ptest.explode": lambda a: a}
    honest = World(program, 6, 2, ops=identity)
    cheat = World(program, 6, 2, ops=identity, tamper=Tamper("node", 3, len(program.nodes) - 1))
    game = make_game(program, 6, 2, challenger_world=honest, defender_world=cheat)
    outcome = play(game)
    check_outcome(game, outcome, program, 6, 2)
    assert faults(outcome.verdict) == {ALICE.node_id: UNCOMPUTABLE, BOB.node_id: UNCOMPUTABLE}


def test_referee_without_the_operator_says_so_and_keeps_its_state():
    program = chain_program(3, last_op="ptest.not-registered")
    identity = {"ptest.not-registered": lambda a: a}
    honest = World(program, 4, 2, ops=identity)
    cheat = World(program, 4, 2, ops=identity, tamper=Tamper("node", 2, len(program.nodes) - 1))
    game = make_game(program, 4, 2, challenger_world=honest, defender_world=cheat)
    with pytest.raises(LocalProtocolError, match="no operator"):
        play(game)
    assert game.referee.state == "EVIDENCE" and game.referee.verdict is None


# --- cheating moves -------------------------------------------------------------------------------


def rewriter(identity, kind, at: int, change):
    """Rewrite the cheater's `at`-th and later moves of type `kind` with `change(body)`, re-signed."""
    def rewrite(envelope, i):
        if i >= at and isinstance(envelope.body, kind):
            body = change(envelope.body)
            return None if body is None else resign(envelope, body, identity)
        return envelope
    return rewrite


def test_lie_in_bisection_loses():
    lie = rewriter(BOB, RevealChildren, 1,
                   lambda b: dataclasses.replace(b, proof=dataclasses.replace(b.proof, left=bytes(32))))
    verdict, _, _, _ = duel(Tamper("node", 5, OP_NODE), rewrite=lie)
    assert faults(verdict) == {BOB.node_id: INVALID_MOVE}
    assert verdict.depth == 0


def test_equivocation_loses_with_a_proof_anyone_can_check():
    def other_root(body):
        r = body.root
        forged = SignedRoot.sign(ALICE, job_id=r.job_id, role=r.role, kind=r.kind, sequence=r.sequence,
                                 leaf_count=r.leaf_count, root=bytes([7]) * 32)
        return dataclasses.replace(body, root=forged)
    verdict, _, _, _ = duel(Tamper("node", 5, OP_NODE), cheater=CHALLENGER,
                            rewrite=rewriter(ALICE, RevealChildren, 0, other_root))
    assert faults(verdict) == {ALICE.node_id: EQUIVOCATION}
    assert verdict.equivocation is not None and verdict.equivocation.verify()
    assert verdict.equivocation.culprit == ALICE.node_id


def test_defender_that_signed_two_traces_is_caught_by_its_first_move():
    honest = World(PROGRAM, STEPS, EVERY)
    terms = make_terms(PROGRAM, STEPS, EVERY)
    other = commit_trace(BOB, job_id=terms.job_id, role="provider",
                         checkpoint_states=[bytes([i]) * 32 for i in range(honest.checkpoint_states().__len__())])
    verdict, _, _, _ = duel(Tamper("node", 5, OP_NODE), defender_root=other)
    assert faults(verdict) == {BOB.node_id: EQUIVOCATION}
    assert verdict.equivocation.verify()


def test_stalling_loses_on_time():
    verdict, _, _, game = duel(Tamper("node", 5, OP_NODE), rewrite=rewriter(BOB, object, 3, lambda b: None))
    assert faults(verdict) == {BOB.node_id: TIMEOUT}
    assert game.referee.transcript.records[-1] == ("timeout", game.referee._time.now, BOB.node_id)


def test_chess_clock_runs_out_though_every_move_is_within_its_deadline():
    rules = DisputeRules(move_timeout_ms=10_000, clock_ms=25_000)
    verdict, _, _, _ = duel(Tamper("node", 5, OP_NODE), rules=rules, delay=9_000)
    assert faults(verdict) == {BOB.node_id: TIMEOUT}
    assert verdict.rounds == 3  # two moves of ~9 s fit in 25 s, the third does not


def test_wrong_input_tensor_at_the_referee_loses():
    def swap_tensor(body):
        first = body.inputs[0]
        bad = TensorPayload.from_array(first.tensor.to_array() + 1)
        return dataclasses.replace(body, inputs=(dataclasses.replace(first, tensor=bad),) + body.inputs[1:])
    verdict, _, _, _ = duel(Tamper("node", 5, OP_NODE), rewrite=rewriter(BOB, NodeEvidence, 0, swap_tensor))
    assert faults(verdict) == {BOB.node_id: INVALID_MOVE}
    assert verdict.depth == 3 and verdict.recomputed == b""


def test_evidence_for_another_node_entry_loses():
    def other_entry(body):
        return dataclasses.replace(body, entry=PROGRAM.leaves[OP_NODE - 1])
    verdict, _, _, _ = duel(Tamper("node", 5, OP_NODE), rewrite=rewriter(BOB, NodeEvidence, 0, other_entry))
    assert faults(verdict) == {BOB.node_id: INVALID_MOVE}


class ForgedCheckpoint(World):
    """Claims a checkpoint it never computed; recomputing the interval shows its own contradiction."""

    def checkpoint_states(self):
        states = super().checkpoint_states()
        states[2] = bytes([5]) * 32
        return states


def test_checkpoint_the_party_cannot_reproduce_is_a_contradiction():
    verdict, _, _, _ = duel(None, cheat_world=ForgedCheckpoint(PROGRAM, STEPS, EVERY))
    assert faults(verdict) == {BOB.node_id: CONTRADICTION}
    assert (verdict.depth, verdict.checkpoint) == (1, 2)


def test_step_tree_ending_elsewhere_than_its_interval_is_a_contradiction():
    cheat = World(PROGRAM, STEPS, EVERY, tamper=Tamper("node", 5, OP_NODE))

    def end_elsewhere(body):
        leaves = list(cheat.node_outputs(body.step)) + [bytes([6]) * 32]
        tree = hash_tree(leaves)
        r = body.root
        root = SignedRoot.sign(BOB, job_id=r.job_id, role=r.role, kind="step", sequence=r.sequence,
                               leaf_count=tree.size, root=tree.root)
        return dataclasses.replace(body, root=root, state_after=leaves[-1],
                                   state_after_proof=tree.inclusion_proof(tree.size - 1),
                                   children=tree.children_proof(0, tree.size))
    verdict, _, _, _ = duel(None, cheat_world=cheat, rewrite=rewriter(BOB, StepCommit, 0, end_elsewhere))
    assert faults(verdict) == {BOB.node_id: CONTRADICTION}
    assert verdict.depth == 2


def test_interval_commit_with_a_bad_proof_loses():
    def bad(body):
        proof = body.trace_start_proof
        return dataclasses.replace(body, trace_start_proof=dataclasses.replace(
            proof, siblings=(bytes(32),) + proof.siblings[1:]))
    verdict, _, _, _ = duel(Tamper("node", 5, OP_NODE), rewrite=rewriter(BOB, IntervalCommit, 0, bad))
    assert faults(verdict) == {BOB.node_id: INVALID_MOVE}


# --- the referee refuses what is not a move --------------------------------------------------------


def opened(tamper=Tamper("node", 5, OP_NODE)):
    honest, cheat = World(PROGRAM, STEPS, EVERY), World(PROGRAM, STEPS, EVERY, tamper=tamper)
    game = make_game(PROGRAM, STEPS, EVERY, challenger_world=honest, defender_world=cheat)
    opening = game.challenger.open_dispute(game.defender.trace_root, now=1000)
    requests = game.referee.receive(opening.envelope, now=1001)
    return game, opening, requests


def test_open_is_refused_when_the_roots_agree_or_do_not_cover_the_job():
    game, _, _ = opened()
    terms = game.terms
    mine = game.challenger.trace_root
    same = SignedRoot.sign(BOB, job_id=terms.job_id, role="provider", kind="trace", sequence=mine.sequence,
                           leaf_count=mine.leaf_count, root=mine.root)
    short = SignedRoot.sign(BOB, job_id=terms.job_id, role="provider", kind="trace", sequence=1, leaf_count=2,
                            root=bytes(32))
    for defender_root in (same, short):
        referee = Referee(identity=CLIENT, terms=terms)
        envelope = Envelope.seal(OpenDispute(mine, defender_root), identity=ALICE, job_id=terms.job_id, seq=1,
                                 deadline=5000)
        with pytest.raises(RemoteProtocolError):
            referee.receive(envelope, now=1000)
        assert referee.state == "AWAIT_OPEN"
    with pytest.raises(LocalProtocolError):
        game.challenger.open_dispute(game.challenger.trace_root, now=1002)


def test_referee_refuses_strangers_replays_wrong_moves_and_backwards_time():
    game, opening, requests = opened()
    referee = game.referee
    assert [a.to for a in requests] == [ALICE.node_id, BOB.node_id]
    assert all(isinstance(a.envelope.body, RevealRequest) for a in requests)
    with pytest.raises(RemoteProtocolError, match="replays"):
        referee.receive(opening.envelope, now=1002)
    answer = game.challenger.receive(requests[0].envelope, now=1003)[0].envelope
    stranger = Envelope.seal(answer.body, identity=CLIENT, job_id=answer.job_id, seq=99, deadline=answer.deadline)
    with pytest.raises(RemoteProtocolError):
        referee.receive(stranger, now=1004)
    wrong_type = Envelope.seal(EvidenceRequest(referee.dispute_id, 1, 0), identity=ALICE, job_id=answer.job_id,
                               seq=50, deadline=answer.deadline)
    with pytest.raises(RemoteProtocolError, match="not a move"):
        referee.receive(wrong_type, now=1004)
    assert referee.receive(answer, now=1005) == []  # waiting for the defender
    again = Envelope.seal(answer.body, identity=ALICE, job_id=answer.job_id, seq=100, deadline=answer.deadline)
    with pytest.raises(RemoteProtocolError, match="already moved"):
        referee.receive(again, now=1006)
    with pytest.raises(LocalProtocolError, match="backwards"):
        referee.tick(now=1000)
    assert referee.next_deadline == requests[1].envelope.deadline
    actions = referee.tick(now=referee.next_deadline + 1)
    assert referee.verdict.losers == {BOB.node_id} and actions[-1].verdict == referee.verdict
    with pytest.raises(RemoteProtocolError, match="over"):
        referee.receive(answer, now=referee.next_deadline or 10**6)


def test_referee_must_be_the_jobs_client():
    with pytest.raises(LocalProtocolError):
        Referee(identity=ALICE, terms=make_terms(PROGRAM, STEPS, EVERY))


def test_max_rounds_formula():
    assert max_rounds(1, 1, 1) == 4
    assert max_rounds(8, 4, 100) == 3 + 2 + 7 + 4
    assert max_rounds(9, 5, 128) == 4 + 3 + 7 + 4
    with pytest.raises(LocalProtocolError):
        max_rounds(0, 1, 1)


# --- properties over random jobs and random adversaries ---------------------------------------------

MISBEHAVIOURS = ("none", "lie", "equivocate", "stall", "bad-tensor", "bad-proof", "slow")


def misbehave(kind: str, identity, at: int):
    if kind == "lie":
        return rewriter(identity, RevealChildren, at,
                        lambda b: dataclasses.replace(b, proof=dataclasses.replace(b.proof, right=bytes(32))))
    if kind == "equivocate":
        def other(b):
            r = b.root
            return dataclasses.replace(b, root=SignedRoot.sign(identity, job_id=r.job_id, role=r.role, kind=r.kind,
                                                               sequence=r.sequence, leaf_count=r.leaf_count,
                                                               root=bytes([at % 256]) * 32))
        return rewriter(identity, RevealChildren, at, other)
    if kind == "stall":
        return rewriter(identity, object, at, lambda b: None)
    if kind == "bad-tensor":
        def swap(b):
            if not b.inputs or b.inputs[0].tensor is None:
                return dataclasses.replace(b, output=bytes(32))
            t = b.inputs[0].tensor
            return dataclasses.replace(b, inputs=(dataclasses.replace(
                b.inputs[0], tensor=TensorPayload.from_array(t.to_array() ^ 1)),) + b.inputs[1:])
        return rewriter(identity, NodeEvidence, 0, swap)
    if kind == "bad-proof":
        def corrupt(b):
            fields = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
            for name, value in fields.items():
                if hasattr(value, "siblings") and value.siblings:
                    sib = (bytes(32),) + value.siblings[1:]
                    return dataclasses.replace(b, **{name: dataclasses.replace(value, siblings=sib)})
            return b
        return rewriter(identity, (RevealChildren, IntervalCommit, StepCommit, NodeEvidence), at, corrupt)
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_an_honest_party_never_loses_and_the_cheat_is_located_exactly(data):
    rng = random.Random(data.draw(st.integers(0, 2**32), label="program seed"))
    steps = data.draw(st.integers(1, 20), label="steps")
    every = data.draw(st.integers(1, 6), label="every")
    program = random_program(rng, data.draw(st.integers(2, 9), label="operators"))
    kind = data.draw(st.sampled_from(("node", "node", "node", "state", "initial")), label="tamper")
    tamper = Tamper(kind, data.draw(st.integers(1, steps)), data.draw(st.sampled_from(live_nodes(program))),
                    amount=data.draw(st.integers(1, 4)))
    cheater = data.draw(st.sampled_from((CHALLENGER, DEFENDER)), label="cheater")
    behaviour = data.draw(st.sampled_from(MISBEHAVIOURS), label="misbehaviour")
    at = data.draw(st.integers(0, 8), label="from move")
    honest = World(program, steps, every)
    cheat = World(program, steps, every, tamper=tamper)
    location = expected_location(honest, cheat)
    assume(location is not None)
    identity = ALICE if cheater == CHALLENGER else BOB
    verdict, _, _, _ = duel(tamper, cheater=cheater, program=program, steps=steps, every=every,
                            rewrite=misbehave(behaviour, identity, at), delay=40_000 if behaviour == "slow" else 1,
                            rules=DisputeRules(move_timeout_ms=60_000, clock_ms=100_000), cheat_world=cheat)
    honest_id = BOB.node_id if cheater == CHALLENGER else ALICE.node_id
    assert not verdict.lost(honest_id)
    assert verdict.lost(identity.node_id)
    if behaviour == "none":
        assert faults(verdict) == {identity.node_id: WRONG_RESULT}
        assert (verdict.depth, verdict.checkpoint, verdict.step, verdict.node)[:len(location)] == location


# --- a real traced step graph with the library's operators ---------------------------------------


def regression_graph():
    """A real traced step: elementwise model, mean squared error, its gradient, an SGD update.

    Elementwise operators keep the test quick; matmul's first call compiles its kernels.
    """
    graph_module = pytest.importorskip("repops_cupy.graph")
    import numpy as np

    import repops_cupy.ops  # noqa: F401 - fills the registry

    def init(seed):
        return {"step": np.zeros((), np.int64), "w": np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)}

    def batch(seed, step):
        rng = np.random.default_rng([seed, step])
        return {"x": rng.standard_normal((4, 3)).astype(np.float32), "y": rng.standard_normal((4, 3)).astype(np.float32)}

    b = graph_module.GraphBuilder()
    state0, batch0 = init(1), batch(1, 1)
    w, step = b.leaf("w", state0["w"]), b.leaf("step", state0["step"])
    x, y = b.leaf("x", batch0["x"], "batch"), b.leaf("y", batch0["y"], "batch")
    diff = b.op("sub", b.op("mul", x, w), y)
    loss = b.op("mean", b.op("mul", diff, diff))
    (grad,) = b.gradients(loss, [w])
    graph = b.finish({"w": b.op("sgd_update", w, grad, lr=0.1), "step": b.op("step_increment", step), "loss": loss})
    return graph_module, graph, init, batch


def test_dispute_over_a_real_step_graph_recomputes_a_library_operator():
    graph_module, graph, init, batch = regression_graph()
    program = Program.from_step_graph(graph)
    target = next(i for i, node in enumerate(graph.nodes) if node.op == "sub")  # feeds the update
    honest = World(program, 6, 2, init=init, batch=batch)
    # the oracle's node hashes are the training interpreter's
    run = graph_module.execute(graph, {**init(1), **batch(1, 1)}, hashes=True)
    assert run.node_hashes == honest.node_hashes[1]
    cheat = World(program, 6, 2, init=init, batch=batch, tamper=Tamper("node", 4, target))
    for cheater in (DEFENDER, CHALLENGER):
        worlds = (cheat, honest) if cheater == CHALLENGER else (honest, cheat)
        game = make_game(program, 6, 2, challenger_world=worlds[0], defender_world=worlds[1], init=init,
                         batch_of=batch)
        outcome = play(game)
        check_outcome(game, outcome, program, 6, 2)
        assert faults(outcome.verdict) == {party_id(cheater): WRONG_RESULT}
        assert (outcome.verdict.step, outcome.verdict.node) == (4, target)
        assert outcome.verdict.recomputed == honest.node_hashes[4][target]
