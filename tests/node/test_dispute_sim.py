"""gavel dispute-sim: against every cheat, as provider or auditor, the honest party wins and the cheat is located.

Each cheat records where its run departs from the job; the tests check that record
against the two runs themselves (the first step whose state hash differs, the first
node of that step whose output hash differs), then the verdict against the record.
The honest run of the job is made once and shared by every simulation.
"""
from __future__ import annotations

import json

import pytest

from protocol import EQUIVOCATION, INVALID_MOVE, TIMEOUT, WRONG_RESULT, max_rounds
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram

from node import cli
from node.cheats import STRATEGIES, FlippedBit
from node.cli.dispute_sim import RULES, simulate
from node.training_oracle import TrainingOracle

JOB = """
[job]
name = "tiny-mlp"
seed = 3
steps = 7
batch_size = 8
checkpoint_interval = 3

[data]
kind = "synthetic"
n_samples = 64
n_features = 4
n_classes = 3

[model]
kind = "mlp"
hidden = [8]
dropout = 0.1

[optimizer]
kind = "sgd"
lr = 0.1
momentum = 0.9
weight_decay = 0.0001
"""

CHEATS = [name for name in STRATEGIES if name != "honest"]
ROLES = ("provider", "auditor")
SEEDS = (0, 1, 2)
EXPECTED_REASON = {"lie-in-bisection": INVALID_MOVE, "equivocate": EQUIVOCATION, "stall": TIMEOUT}
JSON_KEYS = {"strategy", "dispute", "winner", "step", "node", "rounds", "bound", "bytes"}


@pytest.fixture(scope="module", autouse=True)
def one_numba_thread():
    """These arrays are tiny: starting numba's threads costs more than the work (the bits are the same)."""
    numba = pytest.importorskip("numba")
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    path = tmp_path_factory.mktemp("job") / "tiny-mlp.toml"
    path.write_text(JOB)
    return path


@pytest.fixture(scope="module")
def training(job) -> TrainingProgram:
    return TrainingProgram(load_job(job))


@pytest.fixture(scope="module")
def honest(training) -> TrainingOracle:
    oracle = TrainingOracle(training)
    oracle.train()
    return oracle


def first_difference(a: list[bytes], b: list[bytes]) -> int | None:
    assert len(a) == len(b)
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def referee_bytes(result) -> int:
    """What the referee sent and accepted (its transcript), and its verdict delivered to both parties."""
    records = result.referee.transcript.records
    return sum(len(data) for kind, _, data in records if kind != "timeout") \
        + 2 * len(result.referee.verdict_envelope.encode())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("strategy", CHEATS)
def test_the_honest_party_wins_and_the_cheat_is_located(training, honest, strategy, role, seed):
    r = simulate(training, strategy, cheater_role=role, seed=seed, honest=honest)
    print(json.dumps(r.to_json(), sort_keys=True))
    truth, cheat_run, verdict = r.truth, r.cheater_run, r.verdict
    # the cheat's record, checked against the two runs
    s = truth.step
    assert first_difference(honest.state_hashes, cheat_run.state_hashes) == s
    assert first_difference(list(honest.node_outputs(s)) + [honest.state_hashes[s]],
                            list(cheat_run.node_outputs(s)) + [cheat_run.state_hashes[s]]) == truth.node
    assert truth.reason == EXPECTED_REASON.get(strategy, WRONG_RESULT)

    assert r.dispute and r.winner == "honest"
    assert [(f.party, f.reason) for f in verdict.faults] == [(r.cheater_id, truth.reason)]
    assert 1 <= r.rounds <= r.bound == max_rounds(3, 3, len(training.graph.nodes))
    # however far the descent got, it went where the cheat is
    schedule = honest.schedule
    located = (schedule.interval_of_step(s) + 1, s, truth.node)
    assert (verdict.checkpoint, verdict.step, verdict.node)[:verdict.depth] == located[:verdict.depth]
    if truth.depth is not None:
        assert verdict.depth == truth.depth
    if verdict.depth == 3:
        honest_leaves = list(honest.node_outputs(s)) + [honest.state_hashes[s]]
        assert verdict.recomputed == honest_leaves[truth.node]
    if truth.reason == EQUIVOCATION:
        assert verdict.equivocation.verify() and verdict.equivocation.culprit == r.cheater_id
    if truth.reason == TIMEOUT:
        assert r.referee.transcript.records[-1][0] == "timeout"
        assert r.simulated_ms > RULES.move_timeout_ms
    assert r.refused == 0
    assert r.bytes == referee_bytes(r) and r.messages == len(
        [k for k, _, _ in r.referee.transcript.records if k != "timeout"]) + 2


@pytest.mark.parametrize("role", ROLES)
def test_two_honest_parties_have_nothing_to_dispute(training, honest, role):
    r = simulate(training, "honest", cheater_role=role, seed=0, honest=honest)
    assert r.cheater_run is not honest  # a run of its own, with the same bits
    assert r.cheater_run.state_hashes == honest.state_hashes
    assert not r.dispute and r.winner is None and r.verdict is None
    assert (r.rounds, r.bytes, r.messages) == (0, 0, 0)
    assert r.honest_won


def test_the_referee_sides_with_the_correct_run_whoever_is_called_honest(training):
    """Hand the simulator a corrupted run as its 'honest' party: the job's own run wins against it."""
    corrupted = FlippedBit(training, at=2, name="params/0.weight", index=5, bit=20)
    r = simulate(training, "honest", cheater_role="provider", honest=corrupted)
    assert r.dispute and r.winner == "cheater" and not r.honest_won
    assert [f.reason for f in r.verdict.faults] == [WRONG_RESULT]
    assert (r.verdict.step, r.verdict.node) == (2, len(training.graph.nodes))


def test_the_seed_draws_the_cheat_and_the_job_stays(training, honest):
    results = [simulate(training, "wrong-op-output", seed=seed, honest=honest) for seed in SEEDS]
    assert len({r.terms.job_id for r in results}) == 1
    assert len({r.description for r in results}) > 1
    again = simulate(training, "wrong-op-output", seed=SEEDS[1], honest=honest)
    assert again.description == results[1].description
    assert again.verdict.transcript_hash == results[1].verdict.transcript_hash  # fixed keys, simulated clock


def run_cli(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli.main(["dispute-sim", *argv])
    return code, capsys.readouterr().out.strip().splitlines()


def test_cli_says_on_stderr_what_it_is_doing_round_by_round(job, capsys):
    code = cli.main(["dispute-sim", str(job), "--cheat", "wrong-op-output", "--steps", "6", "--seed", "4", "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    said = [line.split("] ", 1)[1] for line in captured.err.strip().splitlines()]
    assert code == 0 and said[0].startswith("training: the honest")
    rounds = [line for line in said if line.startswith("round ")]
    assert [int(line.split(":")[0].split()[1]) for line in rounds] == list(range(1, result["rounds"] + 1))
    assert rounds[0].startswith("round 1: level 1 (checkpoints)")
    assert said.index("the trace roots differ: the auditor opens a dispute "
                      f"(at most {result['bound']} rounds)") < said.index(rounds[0])
    assert said[-1] == f"the referee ruled after {result['rounds']} rounds"


def test_cli_prints_the_verdict_and_ends_with_json(job, capsys):
    code, lines = run_cli(capsys, str(job), "--cheat", "wrong-op-output", "--steps", "6", "--seed", "4",
                          "--cheater-role", "auditor", "--json")
    assert code == 0
    result = json.loads(lines[-1])
    assert JSON_KEYS <= set(result)
    assert (result["strategy"], result["cheater_role"], result["steps"]) == ("wrong-op-output", "auditor", 6)
    assert result["dispute"] is True and result["winner"] == "honest"
    assert (result["step"], result["node"]) == (result["truth"]["step"], result["truth"]["node"])
    assert result["node_op"] == result["truth"]["node_op"] != "state outputs"
    assert result["bound"] == max_rounds(result["intervals"], result["checkpoint_every"], result["graph_nodes"])
    assert 1 <= result["rounds"] <= result["bound"] and result["bytes"] > 0
    text = "\n".join(lines[:-1])
    assert "verdict: honest wins" in text and f"step {result['step']}, node {result['node']}" in text
    assert f"rounds: {result['rounds']} (bound {result['bound']})" in text


def test_cli_honest_strategy_reports_no_dispute(job, capsys):
    code, lines = run_cli(capsys, str(job), "--cheat", "honest", "--steps", "4", "--json")
    assert code == 0
    result = json.loads(lines[-1])
    assert result["dispute"] is False and result["winner"] is None
    assert (result["step"], result["node"], result["rounds"], result["bytes"]) == (None, None, 0, 0)
    assert "no dispute" in lines[-2] or any("no dispute" in line for line in lines)


def test_cli_usage_errors(tmp_path, capsys):
    assert run_cli(capsys, str(tmp_path / "missing.toml"), "--cheat", "stall")[0] == 2
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, str(tmp_path / "missing.toml"), "--cheat", "bribe-the-referee")
    assert exc.value.code == 2
