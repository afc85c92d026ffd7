"""gavel dispute-sim --on-chain-step: after levels 1-3, the fourth level and the one-step ruling on
the embedded EVM, with the client offline. The honest side wins on chain wherever the located
operator has an element program; elsewhere the report says it is left to the referee."""
from __future__ import annotations

import json

import pytest

from node import cli
from node.cli.dispute_sim import simulate
from node.cli.onchain_step import GAS_TARGET, play_fourth_level
from node.training_oracle import TrainingOracle
from protocol.step_programs import COVERED
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram
from tests.node.test_dispute_sim import JOB

pytestmark = pytest.mark.settlement


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    path = tmp_path_factory.mktemp("job") / "tiny-mlp.toml"
    path.write_text(JOB.replace("dropout = 0.1", "dropout = 0.0"))
    return path


@pytest.mark.parametrize("role", ("provider", "auditor"))
def test_a_wrong_operator_output_is_ruled_on_chain_for_the_honest_side(job, role):
    training = TrainingProgram(load_job(job))
    honest = TrainingOracle(training)
    played = 0
    for seed in range(6):
        result = simulate(training, "wrong-op-output", cheater_role=role, seed=seed, honest=honest)
        fourth = play_fourth_level(result, honest, seed=seed)
        assert fourth is not None and fourth.op == result.node_name(result.located(3))
        if fourth.op not in COVERED:
            assert not fourth.covered and "referee" in fourth.lines()[0]
            continue
        played += 1
        assert fourth.honest_won, (seed, fourth.lines())
        assert fourth.game.worst.gas < GAS_TARGET
        assert fourth.game.rounds == (fourth.program_length - 1).bit_length()
        if played == 2:
            break
    assert played, "no seed located a covered operator"


def test_cli_prints_each_transaction_and_the_worst(job, capsys):
    code = cli.main(["dispute-sim", str(job), "--cheat", "wrong-op-output", "--seed", "1", "--on-chain-step",
                     "--json"])
    out = capsys.readouterr().out.splitlines()
    report = json.loads(out[-1])["on_chain_step"]
    assert code == 0
    if report["covered"]:
        assert report["honest_won"] and report["worst_gas"] < GAS_TARGET
        assert any(line.startswith("  tx ") for line in out) and any("worst single transaction" in x for x in out)
    else:
        assert any("referee-with-appeal" in line for line in out)
