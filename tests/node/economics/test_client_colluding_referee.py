"""Client as colluding referee (economics §9, §12): the client's puppet picks a node of an honest root and
the client, who referees the job, rules the honest defenders wrong with no transcript behind it. An
auditor that replayed the root sees the ruling contradict its replay and appeals; a referee drawn from
the registry rules the appeal from the defenders' evidence; the ruling is overturned, the puppet's
claim fails, the client's referee bond pays the appellant's costs and is burned. Real claim-game roles
on the real contract (`claim_world.ClaimRoles`), money read from it."""
from __future__ import annotations

from eth_utils import keccak

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, trace_root
from contracts.settlement_v2_games import ClaimPicked, ClaimStatus, GameOpened
from contracts.settlement_v2_referees import AppealOpened, AppealRuled
from protocol import claim_lists
from protocol.listtree import list_root
from tests.contracts.game_world_v2 import holdings, register_referees

from ..conftest import trio_test
from ..v2.claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


@trio_test(180)
async def test_a_client_ruling_against_an_honest_seat_is_appealed_and_overturned(cast_v2, runs, tmp_path):
    w = cast_v2
    honest, _, node = runs
    jid = revealed_job(w, (honest, honest))
    seats = w.providers[:2]
    puppet = new_account(w, "client's puppet", Role.AUDITOR, STAKE)
    auditor = new_account(w, "auditor", Role.AUDITOR, STAKE)
    referees = register_referees(w, 3)
    client = w.client
    before = {a: holdings(w, a) for a in (client, puppet, auditor, *seats, *referees)}
    roles = ClaimRoles(w, jid, dict.fromkeys(seats, honest), tmp_path, honest.training, referee=False)
    roles.auditor(auditor)
    for referee in referees:
        roles.referee(referee)
    await roles.play()  # the auditor replays the root: it checks

    root, c, j = trace_root(list(honest.checkpoint_states())), 1, 1
    game = w.as_(puppet).open_game(jid, root, c).one(GameOpened).game_id
    await roles.play()
    step = w.as_(puppet).pick_step(game, list_root(claim_lists.steps_list(honest, c)), j).one(ClaimPicked).claim_id
    await roles.play()
    nodes = claim_lists.node_list(honest, honest.schedule.checkpoint_step(c) + j)
    claim = w.as_(puppet).pick_node(step, list_root(nodes), node).one(ClaimPicked).claim_id
    await roles.play()
    w.as_(client).rule(claim, False, keccak(b"no transcript"))  # the colluding client's false ruling
    await roles.play()

    (appeal,) = [e.event for e in w.settlement.events(0) if isinstance(e.event, AppealOpened)]
    assert (appeal.claim_id, appeal.appellant) == (claim, auditor)
    await roles.finish([game])
    (ruled,) = [e.event for e in w.settlement.events(0) if isinstance(e.event, AppealRuled)]
    assert ruled.referee in referees and ruled.defender_right and ruled.overturned
    assert all(w.settlement.claim(x).status == ClaimStatus.FAILED for x in (game, step, claim))
    roles.settle()
    assert all(w.settlement.seat(jid, s).forfeit == ForfeitReason.NONE for s in seats)
    info = w.settlement.job(jid)
    after = {a: holdings(w, a) for a in before}
    assert after[client] < before[client]      # the referee bond paid the appeal and burned
    assert after[puppet] < before[puppet]      # its bonds went to the seats
    assert after[auditor] >= before[auditor]   # the appeal bond back, its gas paid
    assert all(after[s] - before[s] >= info.price // 2 for s in seats)
    assert all(after[r] >= before[r] for r in referees)
    w.assert_every_coin_accounted()
