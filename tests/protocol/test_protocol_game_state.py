"""The transition table and the chess clock."""
from __future__ import annotations

import pytest

from protocol import CHALLENGER, DEFENDER, REFEREE, TRANSITIONS, ChessClock, DisputeRules, GameState
from protocol.errors import LocalProtocolError
from protocol.game_state import DEFAULTED, DONE, EXPECTED_MOVE, INITIAL, LEVEL, PARTY_LEVEL


def reachable(role: str) -> set[str]:
    seen, todo = set(), [INITIAL[role]]
    while todo:
        state = todo.pop()
        if state not in seen:
            seen.add(state)
            todo.extend(TRANSITIONS[role][state].values())
    return seen


@pytest.mark.parametrize("role", [CHALLENGER, DEFENDER, REFEREE])
def test_every_state_is_reachable_and_leads_to_done(role):
    table = TRANSITIONS[role]
    assert all(target in table for events in table.values() for target in events.values())
    assert table[DONE] == {}
    assert reachable(role) == set(table) - ({"OPENED"} if role == DEFENDER else set())
    for state in table:
        assert DONE in reachable_from(role, state)


def reachable_from(role, state):
    seen, todo = set(), [state]
    while todo:
        s = todo.pop()
        if s not in seen:
            seen.add(s)
            todo.extend(TRANSITIONS[role][s].values())
    return seen


def test_referee_can_default_in_every_running_state_and_parties_accept_a_verdict_anywhere():
    for state, events in TRANSITIONS[REFEREE].items():
        if state not in ("AWAIT_OPEN", DONE):
            assert events[DEFAULTED] == DONE
            assert state in EXPECTED_MOVE
    assert set(LEVEL) | {"EVIDENCE"} == set(EXPECTED_MOVE)
    for role in (CHALLENGER, DEFENDER):
        for state, events in TRANSITIONS[role].items():
            if state not in (DONE,) and not (role == CHALLENGER and state == "IDLE"):
                assert events["verdict"] == DONE
    assert set(PARTY_LEVEL.values()) == {1, 2, 3}


def test_game_state_fires_only_allowed_events():
    game = GameState(DEFENDER)
    assert game.state == "IDLE" and game.allows("reveal") and not game.allows("interval")
    assert game.peek("reveal") == "CHECKPOINTS" and game.state == "IDLE"
    assert game.fire("reveal") == "CHECKPOINTS"
    with pytest.raises(LocalProtocolError):
        game.fire("evidence")
    with pytest.raises(LocalProtocolError):
        GameState("spectator")


def test_chess_clock_charges_each_party_its_own_time():
    clock = ChessClock(DisputeRules(move_timeout_ms=100, clock_ms=250), (b"a", b"b"))
    assert clock.start(b"a", 0) == 100 and clock.start(b"b", 0) == 100
    assert clock.next_deadline() == 100 and clock.overdue(100) == [] and clock.overdue(101) == [b"a", b"b"]
    clock.stop(b"a", 90)
    assert clock.left == {b"a": 160, b"b": 250} and clock.running == (b"b",)
    clock.stop(b"b", 10)
    assert clock.start(b"a", 200) == 300
    clock.stop(b"a", 295)
    assert clock.left[b"a"] == 65
    assert clock.start(b"a", 400) == 465  # less clock left than the move timeout
    with pytest.raises(LocalProtocolError):
        clock.start(b"a", 401)
