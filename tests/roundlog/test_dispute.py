"""The dispute game on rounding-log runs: an honest trainer against cheaters, either side challenging."""
import json
import math
import shutil

import numpy as np
import pytest
import torch

from node.cli.roundlog_dispute import RunDirectoryParty, initial_state_hash, play_dispute, referee_for
from protocol.identity import Identity
from protocol.roundlog_dispute import LOG_LEAF, StateOpening, log_digest, max_rounds, opened_state_hash
from repops_cupy.roundlog import StepLog
from repops_cupy.roundlog import state as roundlog_state
from repops_cupy.roundlog.roundlog_job import Job, train_job

from .test_replay import _job_raw

STEPS, INTERVAL, CHEAT_STEP = 6, 2, 3
RAW = _job_raw(steps=STEPS, interval=INTERVAL)


def _keeper(kept, cheat=None):
    """An after_step hook that cheats (optionally) and keeps every state, as a cheater would."""
    def hook(i, tr):
        if cheat is not None:
            cheat(i, tr)
        kept[i] = StateOpening(tr.named_state(), tr.last_log_hash)
    return hook


def _weight_cheat(i, tr):
    if i == CHEAT_STEP:
        with torch.no_grad():
            w = tr.params["head.weight"]
            w[0, 0] = (w[0, 0] + 1e-3).to(torch.float32).to(torch.float64)


def _lr_cheat(i, tr):
    if i == CHEAT_STEP - 1:
        tr.optimizer.hyper["lr"] *= 1.5  # applies from the next step on


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    train_job(RAW, base / "honest")
    kept = {}
    for name, cheat in (("weight", _weight_cheat), ("lr", _lr_cheat)):
        kept[name] = {}
        train_job(RAW, base / name, after_step=_keeper(kept[name], cheat))
    return base, kept


def _party(runs, name, kept=True):
    base, states = runs
    return RunDirectoryParty(RAW, base / name, Identity.generate(), kept_states=states.get(name) if kept else None)


def _sides(honest, cheater, honest_challenges):
    return ((honest, cheater), "challenger", "defender") if honest_challenges else ((cheater, honest), "defender", "challenger")


def test_protocol_log_leaf_matches_the_trainers():
    log = b"\x01\x02 some log bytes"
    assert LOG_LEAF == roundlog_state.LOG_LEAF
    assert log_digest(log) == roundlog_state.log_digest(log)


@pytest.mark.parametrize("honest_challenges", [True, False], ids=["honest-challenges", "cheater-challenges"])
@pytest.mark.parametrize("cheat", ["weight", "lr"])
def test_honest_trainer_wins_and_the_cheated_step_is_located(runs, cheat, honest_challenges):
    (challenger, defender), honest_side, cheater_side = _sides(_party(runs, "honest"), _party(runs, cheat),
                                                              honest_challenges)
    referee = referee_for(RAW)
    replays = []
    replay = referee.replay
    referee.replay = lambda *a: replays.append(a[1]) or replay(*a)
    verdict = referee.play(challenger, defender)
    assert verdict.winner == honest_side, verdict
    assert set(verdict.faults) == {cheater_side}
    assert "does not reach its claimed state" in verdict.faults[cheater_side] or "implausible" in verdict.faults[cheater_side]
    assert verdict.step == CHEAT_STEP and verdict.level == "replay"
    assert verdict.checkpoint == Job(RAW).checkpoint_steps().index(4)  # interval (2, 4]
    assert replays == [CHEAT_STEP, CHEAT_STEP]  # one step replayed, once per party's log
    # rounds: 4 fixed exchanges, log2 over 4 checkpoints, log2 over the 3 states of the interval
    assert verdict.rounds == 4 + 2 + 2 <= max_rounds(Job(RAW).checkpoint_steps())


def test_cheater_that_kept_no_states_cannot_prove_its_log(runs):
    verdict = play_dispute(RAW, _party(runs, "weight", kept=False), _party(runs, "honest"))
    assert verdict.winner == "defender" and verdict.step == CHEAT_STEP
    assert "not the one committed" in verdict.faults["challenger"]


def test_two_honest_runs_agree_without_a_game(runs, tmp_path):
    train_job(RAW, tmp_path / "again", backend="numpy", micro_batch=4)
    verdict = play_dispute(RAW, tmp_path / "again", runs[0] / "honest")
    assert verdict.level == "agreed" and verdict.winner is None and verdict.rounds == 1 and not verdict.faults


class _SwappedLog(RunDirectoryParty):
    """Hands some other log than the one its state commits to."""

    def __init__(self, *a, log, **k):
        super().__init__(*a, **k)
        self.fake_log = log

    def step_evidence(self, step):
        evidence = super().step_evidence(step)
        return type(evidence)(evidence.agreed_state, self.fake_log, evidence.log_proof)


@pytest.mark.parametrize("log", ["other-step", "garbage"])
def test_a_log_not_committed_in_the_claimed_state_loses(runs, log):
    base, kept = runs
    fake = (base / "weight" / "logs" / "step_000002.rlog").read_bytes() if log == "other-step" else b"\xff" * 40
    cheater = _SwappedLog(RAW, base / "weight", Identity.generate(), kept_states=kept["weight"], log=fake)
    verdict = play_dispute(RAW, _party(runs, "honest"), cheater)
    assert verdict.winner == "challenger"
    assert "not the one committed" in verdict.faults["defender"]


def _forged_run(runs, tmp_path, forge):
    """A copy of the honest run whose step-3 log is replaced by `forge(log)` and committed:
    its state hashes from step 3 on are recomputed around the new log's digest."""
    base, _ = runs
    run = tmp_path / "forged"
    shutil.copytree(base / "honest", run)
    honest = RunDirectoryParty(RAW, run, Identity.generate())
    state3 = honest.state_at(CHEAT_STEP)
    bad_log = forge((run / "logs" / f"step_{CHEAT_STEP:06d}.rlog").read_bytes())
    (run / "logs" / f"step_{CHEAT_STEP:06d}.rlog").write_bytes(bad_log)
    forged3 = StateOpening(state3.tensors, log_digest(bad_log))
    trace = json.loads((run / "trace.json").read_text())
    hashes = {CHEAT_STEP: opened_state_hash(forged3)}
    hashes.update({s: bytes([s]) * 32 for s in range(CHEAT_STEP + 1, STEPS + 1)})  # later claims: anything
    for entry in trace["steps"] + trace["checkpoints"]:
        if entry["step"] in hashes:
            entry["state_hash"] = hashes[entry["step"]].hex()
    (run / "trace.json").write_text(json.dumps(trace))
    return RunDirectoryParty(RAW, run, Identity.generate(), kept_states={CHEAT_STEP: forged3})


def _moved_positions(log_bytes):
    """Every logged decision moved one position on: far from any rounding boundary."""
    log = StepLog.decode(log_bytes)
    pos = np.unique((log.bit_pos + 1) % log.stream_length)
    value_pos = np.setdiff1d(log.value_pos, pos)
    return StepLog(log.step, log.stream_length, pos, log.bit_up[: pos.size], value_pos,
                   log.value[np.isin(log.value_pos, value_pos)]).encode()


@pytest.mark.parametrize("forge,reason", [(lambda log: b"garbage" * 9, "cannot be replayed"),
                                          (_moved_positions, "implausible")], ids=["garbage", "moved"])
@pytest.mark.parametrize("honest_challenges", [True, False], ids=["honest-challenges", "cheater-challenges"])
def test_a_committed_forged_log_loses_without_crashing_the_referee(runs, tmp_path, forge, reason, honest_challenges):
    if forge is _moved_positions:
        log = StepLog.decode((runs[0] / "honest" / "logs" / f"step_{CHEAT_STEP:06d}.rlog").read_bytes())
        if log.bit_pos.size == 0:
            pytest.skip("this step logged no direction bits to move")
    (challenger, defender), honest_side, cheater_side = _sides(_party(runs, "honest"), _forged_run(runs, tmp_path, forge),
                                                              honest_challenges)
    verdict = play_dispute(RAW, challenger, defender)
    assert verdict.winner == honest_side and verdict.step == CHEAT_STEP, verdict
    assert reason in verdict.faults[cheater_side]


class _BadChildren(RunDirectoryParty):
    """Answers the checkpoint bisection with the children of its interval tree instead."""

    def trace_children(self, lo, hi):
        return self._interval_tree(1).children_proof(0, 2)


class _Mute(RunDirectoryParty):
    def interval_opening(self, index):
        raise OSError("disk gone")


@pytest.mark.parametrize("party,level", [(_BadChildren, "checkpoints"), (_Mute, "steps")])
def test_an_answer_that_does_not_verify_loses_at_once(runs, party, level):
    base, kept = runs
    cheater = party(RAW, base / "weight", Identity.generate(), kept_states=kept["weight"])
    verdict = play_dispute(RAW, cheater, _party(runs, "honest"))
    assert verdict.winner == "defender" and set(verdict.faults) == {"challenger"}
    assert verdict.level == level and verdict.step is None


def test_a_wrong_initial_state_is_caught_at_checkpoint_zero(runs, tmp_path):
    raw = json.loads(json.dumps(RAW))
    shutil.copytree(runs[0] / "honest", tmp_path / "shifted")
    trace = json.loads((tmp_path / "shifted" / "trace.json").read_text())
    trace["checkpoints"][0]["state_hash"] = "11" * 32
    (tmp_path / "shifted" / "trace.json").write_text(json.dumps(trace))
    verdict = play_dispute(raw, runs[0] / "honest", tmp_path / "shifted")
    assert verdict.winner == "challenger" and verdict.checkpoint == 0
    assert "initial state" in verdict.faults["defender"]
    assert initial_state_hash(Job(raw)).hex() == json.loads((runs[0] / "honest" / "trace.json").read_text())["checkpoints"][0]["state_hash"]
    assert verdict.rounds == 1 + math.ceil(math.log2(len(Job(raw).checkpoint_steps())))


def _toml(raw) -> str:
    def value(v):
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()
    lines = []
    for table in ("job", "model", "data", "optimizer"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {value(v)}" for k, v in raw[table].items() if not isinstance(v, dict)]
    lines.append("[model.args]")
    lines += [f"{k} = {value(v)}" for k, v in raw["model"]["args"].items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("cheat,role", [("weight", "provider"), ("lr", "auditor"), ("honest", "provider")])
def test_dispute_sim_routes_a_roundlog_job_to_this_game(tmp_path, capsys, cheat, role):
    from node.cli.dispute_sim import dispute_sim_main

    job = tmp_path / "tiny.toml"
    job.write_text(_toml(_job_raw(steps=4, interval=2)))
    assert dispute_sim_main([str(job), "--cheat", cheat, "--cheater-role", role, "--seed", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["honest_won"]
    if cheat == "honest":
        assert result["level"] == "agreed" and result["winner"] is None
    else:
        assert result["winner"] == ("challenger" if role == "provider" else "defender")
        assert result["step"] == result["cheat_step"] and result["rounds"] <= result["bound"]
