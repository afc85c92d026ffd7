"""Stalling referee (economics §8.4, §9, §12): the client referees its job and never rules. An auditor's
game reaches a node claim against the cheated root, the cheater's defender posts its evidence, and the
client sits on it. At ruleBy the keepers' `timeoutReferee` burns the client's referee bond, a referee is
drawn from the registry, the cheater's defender sends it the evidence, it rules, the game ends and the
job settles, every lock released by the job's `finalBy`. The honest seat and the auditor end whole, the
cheater −S, the stalling client down its bond. Real claim-game roles (`claim_world.ClaimRoles`; the
client runs no referee duty), the chain's clock moved a margin at a time; money read from the contract."""
from __future__ import annotations

from contracts import Role
from contracts.settlement_v2 import ForfeitReason
from contracts.settlement_v2_games import ClaimStatus, GameOpened
from contracts.settlement_v2_referees import ClaimRuled, RefereeDrawn, RefereeTimedOut
from tests.contracts.game_world_v2 import holdings, register_referees

from ..conftest import trio_test
from ..v2.claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


@trio_test(180)
async def test_a_client_that_never_rules_loses_its_bond_and_a_drawn_referee_ends_the_game_by_final_by(
        cast_v2, runs, tmp_path):
    w = cast_v2
    honest, cheat, _ = runs
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    client = w.client
    auditor = new_account(w, "auditor", Role.AUDITOR, STAKE)
    referees = register_referees(w, 3)
    everyone = (client, honest_seat, cheater, auditor, *referees)
    before = {a: holdings(w, a) for a in everyone}
    info = w.settlement.job(jid)
    assert info.client_referees
    roles = ClaimRoles(w, jid, {honest_seat: honest, cheater: cheat}, tmp_path, honest.training, referee=False)
    roles.auditor(auditor)
    for referee in referees:
        roles.referee(referee)
    await roles.play()  # the auditor opens the game on the cheated interval and picks to a node claim
    (game,) = [e.event.game_id for e in w.settlement.events(0) if isinstance(e.event, GameOpened)]

    margin = w.settlement.chain_settings().margin
    while w.settlement.claim(game).status == ClaimStatus.OPEN:  # the client never rules; time goes on
        assert w.chain.now() < info.final_by, "the game outlived the job's finalBy"
        for keeper in roles.keepers:
            await keeper.keep_once()
        await roles.play()
        w.chain.mine(w.chain.now() + margin)

    events = [e.event for e in w.settlement.events(0)]
    (timed_out,) = [e for e in events if isinstance(e, RefereeTimedOut)]
    assert timed_out.referee == client and timed_out.burned > 0
    (drawn,) = [e for e in events if isinstance(e, RefereeDrawn)]
    (ruled,) = [e for e in events if isinstance(e, ClaimRuled)]
    assert drawn.referee in referees and ruled.referee == drawn.referee and not ruled.defender_right
    assert w.settlement.claim(game).status == ClaimStatus.UPHELD

    roles.settle()  # at finalBy
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME
    assert w.settlement.seat(jid, honest_seat).forfeit == ForfeitReason.NONE
    assert all(w.settlement.node(a).locked == 0 for a in everyone)  # nothing held past finalBy
    after = {a: holdings(w, a) for a in everyone}
    pay = info.price // 2
    assert after[cheater] - before[cheater] == -info.provider_stake
    assert after[client] - before[client] == (info.price - pay) - timed_out.burned < 0  # the cheater's p back, its bond burned
    assert after[honest_seat] - before[honest_seat] == pay
    assert after[auditor] > before[auditor]
    assert all(after[r] >= before[r] for r in referees)
    w.assert_every_coin_accounted()
