"""OneStepVerifier.sol on the embedded EVM: a whole fourth level per covered operator family, with
the client offline (only the two parties and the contract): the cheater loses in either seat, the
honest side never does, the contract agrees with its Python twin, and every transaction stays
under 5M gas."""
from __future__ import annotations

import numpy as np
import pytest

from contracts.embedded_chain import EmbeddedChain
from contracts.errors import ContractRevert
from contracts.step_verifier import StepVerifier, play
from protocol.step_game import CHALLENGER_WON, CHEATS, DEFENDER_WON, play_offline, players_for
from protocol.step_trace import COORD, GATHER, INPUT
from repops_cupy import ops
from tests.protocol.test_step_programs import cases

pytestmark = pytest.mark.settlement

FAMILIES = ("add", "mul_scalar", "relu", "exp", "log", "tanh", "softmax", "layer_norm", "matmul", "adamw_update",
            "sum_to", "transpose", "reshape", "gelu_grad", "layer_norm_grad_x", "causal_mask", "embedding",
            "cross_entropy", "cross_entropy_grad", "step_increment", "full", "mean", "sqrt_grad",
            "log_softmax", "erf", "unfold2d", "embedding_grad", "dropout", "dropout_at_step")
GAS_CAP = 5_000_000


@pytest.fixture(scope="module")
def verifier() -> StepVerifier:
    return StepVerifier.deploy(EmbeddedChain())


def accounts(v: StepVerifier) -> tuple[str, str]:
    return v.chain.accounts[1], v.chain.accounts[2]


def game(op: str, cheater_side: int | None, kind: str = "step", seed: int = 0, inputs=None, attrs=None):
    rng = np.random.default_rng(seed)
    if inputs is None:
        inputs, attrs = cases(rng)[op]
    output = np.asarray(ops.run(op, inputs, attrs))
    element = int(rng.integers(0, output.size))
    return players_for(op, attrs, inputs, output, element, cheater_side=cheater_side, rng=rng, kind=kind)


@pytest.mark.parametrize("op", FAMILIES)
def test_a_cheaters_wrong_element_is_caught_by_the_contract_alone(verifier, op):
    from protocol.step_programs import COVERED
    if op not in COVERED:
        pytest.skip(f"{op} has no element program yet")
    for cheater_side in (0, 1):
        setup, players = game(op, cheater_side, "step", seed=cheater_side)
        honest = 1 - cheater_side
        played = play(verifier, setup, players, accounts(verifier), ruler=honest)
        want = DEFENDER_WON if cheater_side == 0 else CHALLENGER_WON
        assert played.outcome == want, (op, cheater_side)
        assert play_offline(setup, players).outcome == want
        assert played.worst.gas < GAS_CAP, (op, played.worst)


@pytest.mark.parametrize("op, kind", [("embedding", GATHER), ("cross_entropy", GATHER), ("causal_mask", COORD),
                                      ("cross_entropy_grad", COORD), ("matmul", INPUT),
                                      ("dropout", COORD), ("dropout_at_step", INPUT)])
def test_a_step_reading_the_data_or_the_coordinates_is_ruled_on_chain(verifier, op, kind):
    """The cheat is placed at the first step with a gathered index, a coordinate or an input."""
    rng = np.random.default_rng(4)
    inputs, attrs = cases(rng)[op]
    output = np.asarray(ops.run(op, inputs, attrs))
    element = output.size - 1
    spec = players_for(op, attrs, inputs, output, element, cheater_side=None, rng=rng)[0].spec
    at = next(i for i, instr in enumerate(spec.program) if any(o.kind == kind for o in instr.operands))
    for cheater_side in (0, 1):
        setup, players = players_for(op, attrs, inputs, output, element, cheater_side=cheater_side, rng=rng, at=at)
        played = play(verifier, setup, players, accounts(verifier), ruler=cheater_side)
        assert played.position == at
        assert played.outcome == (DEFENDER_WON if cheater_side == 0 else CHALLENGER_WON)


def test_random_honest_traces_are_never_ruled_against_on_chain(verifier):
    rng = np.random.default_rng(5)
    for trial in range(8):
        op = ("add", "exp", "tanh", "softmax", "layer_norm", "log", "relu", "mul_scalar")[trial]
        cheater = trial % 2
        kind = CHEATS[int(rng.integers(0, len(CHEATS)))]
        setup, players = game(op, cheater, kind, seed=200 + trial)
        # the ruling is handed in by the cheater: it can only open what is agreed
        played = play(verifier, setup, players, accounts(verifier), ruler=cheater)
        assert played.outcome == (DEFENDER_WON if cheater == 0 else CHALLENGER_WON), (trial, op, kind)


def test_a_silent_cheater_loses_on_its_clock(verifier):
    setup, players = game("exp", cheater_side=1)
    assert play(verifier, setup, players, accounts(verifier), silent=(1,)).outcome == CHALLENGER_WON


def test_the_contract_refuses_moves_that_do_not_verify(verifier):
    setup, players = game("tanh", cheater_side=1)
    a, b = accounts(verifier)
    gid, _ = verifier.open(setup, a, b, 3600)
    with pytest.raises(ContractRevert, match="StepGameNotYourMove"):
        verifier.connect(verifier.chain.accounts[3]).commit(gid, setup, players[0].commitment())
    with pytest.raises(ContractRevert, match="StepGameBadProof"):
        verifier.connect(b).commit(gid, setup, players[0].commitment())  # the honest trace, its own output
    other, _ = game("tanh", cheater_side=1, seed=9)
    with pytest.raises(ContractRevert, match="StepGameWrongSetup"):
        verifier.connect(a).commit(gid, other, players[0].commitment())
    with pytest.raises(ContractRevert, match="StepGameWrongPhase"):
        verifier.connect(a).rule(gid, setup, *players[0].ruling_arguments(0))
    verifier.connect(a).commit(gid, setup, players[0].commitment())
    with pytest.raises(ContractRevert, match="StepGameNotYourMove"):
        verifier.connect(a).commit(gid, setup, players[0].commitment())
    verifier.connect(b).commit(gid, setup, players[1].commitment())
    left, right = players[0].children(0, 0)
    with pytest.raises(ContractRevert, match="StepGameBadProof"):
        verifier.connect(a).reveal(gid, right, left)
    with pytest.raises(ContractRevert, match="StepGameNotOverdue"):
        verifier.timeout(gid)
