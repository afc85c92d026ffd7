"""gavel verify-verdict over a real game: a cheater's lists of a real mlp job go through the embedded
GavelSettlementV2 to a node claim, the client rules on its evidence with `judge`, the transcript's hash
goes on chain; the command finds the ruling holds (from the chain, and from the transcript alone), and
a transcript that rules otherwise does not. The cheater ends poorer, the honest seat and the finder not."""
from __future__ import annotations

import dataclasses

import pytest

from contracts.settlement_v2 import ForfeitReason
from contracts.settlement_v2_games import ClaimPicked, ClaimStatus, GameOpened
from node.cli import main
from node.cli.verify_verdict import EXIT_HOLDS, EXIT_OVERTURN, EXIT_UNCHECKED, VerdictError, verify_verdict
from node.training_oracle import TrainingOracle, batch_hashes
from protocol.claim_evidence import ClaimRef, Transcript, build_evidence, evidence_hash, judge, transcript_hash
from protocol.claim_lists import first_difference, node_list, node_list_proof, step_index, steps_list, steps_proofs
from protocol.listtree import list_root
from node.cheats import FlippedBit
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram
from tests.contracts.game_world_v2 import holdings, register_auditors
from tests.contracts.settlement_world_v2 import PRICE, _stage_v2, cast_v2  # noqa: F401  (the fixtures)
from tests.node.test_training_oracle import MLP_JOB
from tests.protocol.test_claim_lists import WRONG_STEP, operator_nodes, wrong_node_at

pytestmark = pytest.mark.settlement


@pytest.fixture(scope="module")
def job_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("job") / "job.toml"
    path.write_text(MLP_JOB)
    return path


def _after(w, deadline: int) -> None:
    """Mines up to `deadline`: the next transaction lands after it."""
    if deadline > w.chain.now():
        w.mine_at(deadline)


def _play_to_ruling(w, training: TrainingProgram, state_only: bool = False):
    """The auditor plays the cheater's root down to its first wrong node; the client rules. Returns the
    transcript, the seats and what each party held before. `state_only`: the cheat keeps every node
    output of its step and flips a bit of the state after it (wrong only at the node list's entry N)."""
    honest = TrainingOracle(training)
    program = honest.program()
    if state_only:
        name = sorted(honest.state_tensor_hashes(0))[0]
        cheat = FlippedBit(training, at=WRONG_STEP, name=name, index=0, bit=3, program=program)
    else:
        cheat = wrong_node_at(training, honest, WRONG_STEP, operator_nodes(honest)[2])
    traces = [list(o.checkpoint_states()) for o in (honest, cheat)]
    jid = w.seated_job(2, steps=training.spec.steps, checkpoint_every=training.spec.checkpoint_interval,
                       graph_nodes=program.size - 1, initial_state=traces[0][0])
    seats = w.providers[:2]
    for seat, trace in zip(seats, traces):
        w.commit(jid, seat, trace)
    for seat, trace in zip(seats, traces):
        w.reveal(jid, seat, trace)
    auditor, _ = register_auditors(w)
    before = {a: holdings(w, a) for a in (auditor, *seats)}
    cheater, cheat_trace = seats[1], traces[1]
    c, j = step_index(honest.schedule, WRONG_STEP)
    steps, nodes = steps_list(cheat, c), node_list(cheat, WRONG_STEP)
    n = first_difference(node_list(honest, WRONG_STEP), nodes)
    assert (n == program.size - 1) == state_only  # entry N: the state after the step

    game = w.as_(auditor).open_game(jid, list_root(cheat_trace), c).one(GameOpened).game_id
    w.as_(cheater).post_steps(game, steps, *(p.siblings for p in steps_proofs(cheat_trace, c)))
    step_claim = w.as_(auditor).pick_step(game, list_root(steps), j).one(ClaimPicked).claim_id
    w.as_(cheater).post_nodes(step_claim, nodes, node_list_proof(steps, j).siblings)
    node_claim = w.as_(auditor).pick_node(step_claim, list_root(nodes), n).one(ClaimPicked).claim_id
    evidence = build_evidence(cheat, claim_id=node_claim, step=WRONG_STEP, node=n, node_list=nodes)
    w.as_(cheater).post_evidence(node_claim, evidence_hash(evidence))

    judgement = judge(evidence, claim=ClaimRef(node_claim, WRONG_STEP, n), program_root=program.root,
                      program_size=program.size, node_list=nodes, state_before=steps[j - 1],
                      batch_hashes=batch_hashes(training))
    assert not judgement.defender_right
    transcript = Transcript(jid, list_root(cheat_trace), c, j, program.root, tuple(steps), tuple(nodes),
                            evidence.encode(), judgement)
    w.as_(w.client).rule(node_claim, judgement.defender_right, transcript_hash(transcript))
    w.assert_every_coin_accounted()
    return transcript, (game, step_claim, node_claim), auditor, seats, before


def _ruling_stands(w, transcript, claims, auditor, honest, cheater, before) -> None:
    """The claims end upheld, the cheater forfeits, the job settles; the cheater ends poorer."""
    for claim in reversed(claims):
        info = w.settlement.claim(claim)
        _after(w, max(info.answer_by, info.pick_until, info.rule_by))
        keeper = w.as_(w.keeper)
        (keeper.resolve_game if info.level == 0 else keeper.timeout)(claim)
        assert w.settlement.claim(claim).status == ClaimStatus.UPHELD
    assert w.settlement.seat(transcript.job_id, cheater).forfeit == ForfeitReason.LOST_GAME
    deadlines = w.settlement.deadlines(transcript.job_id)
    _after(w, max(deadlines.reveal_by, deadlines.challenge_end))
    w.as_(w.keeper).settle(transcript.job_id)
    w.assert_every_coin_accounted()
    assert holdings(w, cheater) < before[cheater]
    assert holdings(w, auditor) > before[auditor]
    assert holdings(w, honest) >= before[honest] + PRICE // 2


def test_a_ruling_on_real_evidence_holds_from_the_chain_and_the_cheater_ends_poorer(cast_v2, job_file, tmp_path,
                                                                                      capsys):
    w = cast_v2
    training = TrainingProgram(load_job(job_file))
    transcript, claims, auditor, (honest, cheater), before = _play_to_ruling(w, training)

    check = verify_verdict(transcript, training, settlement=w.settlement)
    assert check.holds and not check.recomputed.defender_right
    assert any(line.startswith("on chain:") for line in check.lines)

    # the same transcript ruling the other way is not the chain's, and does not hold on its own
    flipped = dataclasses.replace(transcript, judgement=dataclasses.replace(transcript.judgement, defender_right=True))
    with pytest.raises(VerdictError, match="no ruling on chain carries"):
        verify_verdict(flipped, training, settlement=w.settlement)
    files = {"ruled": transcript, "flipped": flipped}
    for name, t in files.items():
        (tmp_path / name).write_bytes(t.encode())
    assert main(["verify-verdict", str(tmp_path / "ruled"), str(job_file)]) == EXIT_HOLDS
    assert "the ruling holds" in capsys.readouterr().out
    assert main(["verify-verdict", str(tmp_path / "flipped"), str(job_file)]) == EXIT_OVERTURN
    assert f"appeal(0x{claims[2].hex()})" in capsys.readouterr().out

    _ruling_stands(w, transcript, claims, auditor, honest, cheater, before)


def test_a_cheat_only_in_the_state_after_its_step_is_picked_at_entry_n_and_loses(cast_v2, job_file):
    # Every node output right, the state after the step wrong: only the node list's entry N differs.
    w = cast_v2
    training = TrainingProgram(load_job(job_file))
    transcript, claims, auditor, (honest, cheater), before = _play_to_ruling(w, training, state_only=True)
    assert verify_verdict(transcript, training, settlement=w.settlement).holds
    _ruling_stands(w, transcript, claims, auditor, honest, cheater, before)


def test_transcripts_that_cannot_be_checked_exit_2_in_one_line(job_file, tmp_path, capsys):
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xc1 not msgpack")
    cases = [
        ([str(garbage), str(job_file)], "not a transcript"),
        ([str(tmp_path / "missing"), str(job_file)], "No such file"),
        ([str(garbage), str(job_file), "--chain", "http://127.0.0.1:9"], "go together"),
    ]
    for argv, words in cases:
        assert main(["verify-verdict", *argv]) == EXIT_UNCHECKED
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_transcript_of_another_jobs_program_cannot_be_checked(job_file, tmp_path, capsys):
    """Evidence proven against one program is not checked against another job's."""
    training = TrainingProgram(load_job(job_file))
    honest = TrainingOracle(training)
    program = honest.program()
    c, j = step_index(honest.schedule, WRONG_STEP)
    steps, nodes = steps_list(honest, c), node_list(honest, WRONG_STEP)
    evidence = build_evidence(honest, claim_id=bytes(32), step=WRONG_STEP, node=0, node_list=nodes)
    judgement = judge(evidence, claim=ClaimRef(bytes(32), WRONG_STEP, 0), program_root=program.root,
                      program_size=program.size, node_list=nodes, state_before=steps[j - 1], batch_hashes=None)
    transcript = Transcript(bytes(32), bytes(32), c, j, program.root, tuple(steps), tuple(nodes), evidence.encode(),
                            judgement)
    (tmp_path / "t").write_bytes(transcript.encode())
    other_job = tmp_path / "other.toml"
    other_job.write_text(MLP_JOB.replace("hidden = [8]", "hidden = [6]"))
    assert main(["verify-verdict", str(tmp_path / "t"), str(other_job)]) == EXIT_UNCHECKED
    assert "not this job's program" in capsys.readouterr().err
