"""The fourth level's Python twin (protocol/step_game.py): an honest side against a cheater, in
both seats, for every covered operator family and every cheat; the honest side never loses."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.step_game import (
    BOTH_LOST, CHALLENGER_WON, CHEATS, DEFENDER_WON, DONE, StepGame, play_offline, players_for,
)
from repops_cupy import ops
from tests.protocol.test_step_programs import cases

FAMILIES = ("add", "relu", "mul_scalar", "exp", "log", "tanh", "softmax", "layer_norm", "matmul", "adam_moment2",
            "adamw_update", "sum_to", "transpose", "reshape", "broadcast_to", "gelu", "softmax_grad",
            "layer_norm_grad_gamma", "causal_mask", "embedding", "cross_entropy", "cross_entropy_grad",
            "step_increment", "full", "sum", "rsqrt", "sgd_momentum", "tanh_grad",
            "log_softmax_grad", "var_grad", "max", "erf_grad", "unfold2d_grad", "embedding_grad", "dropout",
            "dropout_at_step")


def game(op: str, cheater_side: int | None, kind: str = "step", seed: int = 0, element: int | None = None):
    rng = np.random.default_rng(seed)
    inputs, attrs = cases(rng)[op]
    output = np.asarray(ops.run(op, inputs, attrs))
    element = int(rng.integers(0, output.size)) if element is None else element
    return players_for(op, attrs, inputs, output, element, cheater_side=cheater_side, rng=rng, kind=kind)


@pytest.mark.parametrize("op", FAMILIES)
@pytest.mark.parametrize("cheater_side", (0, 1))
def test_the_cheater_loses_in_either_seat(op, cheater_side):
    from protocol.step_programs import COVERED
    if op not in COVERED:
        pytest.skip(f"{op} has no element program yet")
    for seed, kind in enumerate(CHEATS):
        setup, players = game(op, cheater_side, kind, seed)
        result = play_offline(setup, players, ruler=cheater_side)  # the cheater hands in the openings
        assert result.phase == DONE
        assert result.outcome == (DEFENDER_WON if cheater_side == 0 else CHALLENGER_WON), (op, kind, seed)


def test_random_games_never_rule_against_the_honest_side():
    rng = np.random.default_rng(11)
    for trial in range(24):
        op = ("add", "exp", "tanh", "softmax", "layer_norm", "log")[trial % 6]
        cheater = int(rng.integers(0, 2))
        setup, players = game(op, cheater, CHEATS[int(rng.integers(0, len(CHEATS)))], seed=100 + trial)
        outcome = play_offline(setup, players, ruler=int(rng.integers(0, 2))).outcome
        assert outcome == (DEFENDER_WON if cheater == 0 else CHALLENGER_WON), (trial, op)


def test_naming_an_element_without_a_difference_loses_the_challenger():
    setup, players = game("exp", cheater_side=None)
    assert play_offline(setup, players).outcome == DEFENDER_WON


def test_a_silent_side_loses_on_its_clock_and_not_before():
    setup, players = game("tanh", cheater_side=1)
    g = StepGame(setup, clock=100, now=0)
    g.commit(0, players[0].commitment(), now=10)
    with pytest.raises(LocalProtocolError):
        g.timeout(now=100)  # the defender has 100 s from the round's start at 0
    g.timeout(now=101)
    assert g.outcome == CHALLENGER_WON


def test_the_chess_clock_charges_every_move_of_a_side():
    setup, players = game("exp", cheater_side=1)
    g = StepGame(setup, clock=30, now=0)
    g.commit(0, players[0].commitment(), now=5)
    g.commit(1, players[1].commitment(), now=25)
    assert g.clocks == [25, 5]
    g.reveal(0, *players[0].children(0, 0), now=26)
    with pytest.raises(RemoteProtocolError, match="clock"):
        g.reveal(1, *players[1].children(0, 0), now=31)
    g.timeout(now=31)
    assert g.outcome == CHALLENGER_WON


def test_moves_that_do_not_verify_are_refused():
    setup, players = game("softmax", cheater_side=1)
    g = StepGame(setup, clock=100, now=0)
    honest = players[0].commitment()
    with pytest.raises(RemoteProtocolError):  # the honest root with the cheater's output: last leaf differs
        g.commit(1, replace(players[1].commitment(), root=honest.root), now=1)
    with pytest.raises(RemoteProtocolError):  # a chunk that is not in the claimed output
        g.commit(0, replace(honest, chunk=b"\x00" * len(honest.chunk)), now=1)
    g.commit(0, honest, now=1)
    g.commit(1, players[1].commitment(), now=2)
    left, right = players[0].children(0, 0)
    with pytest.raises(RemoteProtocolError):
        g.reveal(0, right, left, now=3)
    with pytest.raises(LocalProtocolError):
        g.rule(*players[0].ruling_arguments(0))


def test_both_sides_wrong_both_lose():
    setup, players = game("exp", cheater_side=1, kind="last")
    honest = players[0]
    # the challenger also lies at the last step, with another wrong value
    bad = list(honest.values)
    bad[-1] = next(x for x in (0x3F800000, 0x40000000, 0x40400000) if x not in (bad[-1], players[1].values[-1]))
    from protocol.step_game import StepPlayer, claimed_output, make_setup
    out0 = claimed_output(honest.output, setup.element, bad[-1])
    setup2 = make_setup(setup.spec, setup.element, honest.inputs, (out0, players[1].output))
    p0 = StepPlayer(setup2, 0, bad, out0, honest.inputs)
    p1 = StepPlayer(setup2, 1, players[1].values, players[1].output, honest.inputs)
    assert play_offline(setup2, (p0, p1)).outcome == BOTH_LOST
