"""Flood of sock-puppet challengers against an honest root (economics §8.3, §8.4, §12): four puppets open
games on every interval of the root two honest seats revealed (one joins a game already open), then
pick a step and a node under each list the defenders post. The seats' real defenders answer every
claim (one posts, its co-seat endorses), the client rules each node claim from their evidence, the
keepers end the games, the job settles. Every pick fails; the seats end with at least their pay,
the puppets with less than they put in. Money read from the contract."""
from __future__ import annotations

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, trace_root
from contracts.settlement_v2_games import ClaimJoined, ClaimPicked, ClaimStatus, GameOpened
from protocol import claim_lists
from protocol.listtree import list_root
from tests.contracts.game_world_v2 import holdings

from ..conftest import trio_test
from ..v2.claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


@trio_test(180)
async def test_a_flood_of_puppet_challengers_loses_every_pick_and_every_bond(cast_v2, runs, tmp_path):
    w = cast_v2
    honest, _, node = runs
    jid = revealed_job(w, (honest, honest))
    seats = w.providers[:2]
    intervals = honest.schedule.intervals
    puppets = [new_account(w, f"puppet {i}", Role.AUDITOR, STAKE) for i in range(intervals + 1)]
    before = {a: holdings(w, a) for a in (*puppets, *seats)}
    roles = ClaimRoles(w, jid, dict.fromkeys(seats, honest), tmp_path, honest.training)
    root = trace_root(list(honest.checkpoint_states()))

    games = [w.as_(p).open_game(jid, root, c).one(GameOpened).game_id for c, p in enumerate(puppets[:intervals])]
    w.as_(puppets[-1]).open_game(jid, root, 0).one(ClaimJoined)  # the last puppet joins the first game
    await roles.play()
    steps = []
    for c, (puppet, game) in enumerate(zip(puppets, games)):
        listed = claim_lists.steps_list(honest, c)
        steps.append(w.as_(puppet).pick_step(game, list_root(listed), 1).one(ClaimPicked).claim_id)
    await roles.play()
    nodes = []
    for c, (puppet, step) in enumerate(zip(puppets, steps)):
        listed = claim_lists.node_list(honest, honest.schedule.checkpoint_step(c) + 1)
        nodes.append(w.as_(puppet).pick_node(step, list_root(listed), node).one(ClaimPicked).claim_id)
    await roles.play()
    assert all(w.settlement.claim(n).ruled and w.settlement.claim(n).defender_right for n in nodes)

    await roles.finish(games)
    roles.settle()
    assert all(w.settlement.claim(c).status == ClaimStatus.FAILED for c in (*games, *steps, *nodes))
    info = w.settlement.job(jid)
    after = {a: holdings(w, a) for a in before}
    for seat in seats:
        assert w.settlement.seat(jid, seat).forfeit == ForfeitReason.NONE
        assert after[seat] - before[seat] >= info.price // 2  # its pay, and the puppets' bonds shared
    for puppet in puppets[:intervals]:
        assert after[puppet] < before[puppet]
    assert after[puppets[-1]] == before[puppets[-1]]  # a join forces no work and risks nothing
    w.assert_every_coin_accounted()
