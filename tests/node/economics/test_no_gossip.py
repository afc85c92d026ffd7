"""No gossip, hiding from auditors (economics §1.1, §12): a cheating seat that announces nothing (no advert,
no result, no trace on any topic) is audited all the same, because an auditor learns jobs from `JobOpened`
and roots from `TraceRevealed` (the trace read from the reveal's calldata). Here the auditor is a node
that was not even running when the job opened and the seats revealed: it is handed the chain's history
and nothing else, replays the cheater's root, opens the game on its first wrong interval and picks to a
node claim; the cheater's own defender answers, the client rules it wrong, the keepers end the game.
The cheater −S, the honest seat +p, the auditor ahead. Real claim-game roles (`claim_world.ClaimRoles`),
money read from the contract.

What this does not play: the libp2p leg. The auditor's checkpoints come straight from the seat's run
(`ClaimRoles.auditor`'s checkpoint source) rather than over /gavel/data from a seat that published no
advert (the node's `AuditorRoleV2.reach` then finds the seat by the key it registered on chain,
`JobDataService.peer_of_seat`); a seat that serves nothing is the stonewalling strategy's."""
from __future__ import annotations

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, TraceRevealed, trace_root
from contracts.settlement_v2_games import ClaimPicked, ClaimStatus, GameOpened
from tests.contracts.game_world_v2 import holdings

from ..conftest import trio_test
from ..v2.claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import CHEATED_STEP, revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


@trio_test(180)
async def test_a_seat_that_announces_nothing_is_audited_from_the_chain_and_loses_its_stake(cast_v2, runs, tmp_path):
    w = cast_v2
    honest, cheat, node = runs
    jid = revealed_job(w, (honest, cheat))  # opened, taken, committed and revealed before any auditor runs
    honest_seat, cheater = w.providers[:2]
    cheated_root = trace_root(list(cheat.checkpoint_states()))
    assert [e.event.trace_root for e in w.settlement.events(0)
            if isinstance(e.event, TraceRevealed) and e.event.seat == cheater] == [cheated_root]
    auditor = new_account(w, "late auditor", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (honest_seat, cheater, auditor, w.client)}

    roles = ClaimRoles(w, jid, {honest_seat: honest, cheater: cheat}, tmp_path, honest.training)
    watcher = roles.auditor(auditor)
    await roles.play()  # the chain's history, from block 0: the auditor's only source

    assert set(watcher.seat_of) == {(jid, trace_root(list(honest.checkpoint_states()))), (jid, cheated_root)}
    (game,) = [e.event for e in w.settlement.events(0) if isinstance(e.event, GameOpened)]
    assert (game.opener, game.trace_root, game.interval) == (auditor, cheated_root,
                                                            cheat.schedule.interval_of_step(CHEATED_STEP))
    picks = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimPicked)]
    assert [p.author for p in picks] == [auditor, auditor] and picks[-1].index == node
    assert w.settlement.claim(picks[-1].claim_id).ruled and not w.settlement.claim(picks[-1].claim_id).defender_right

    await roles.finish([game.game_id])
    roles.settle()
    assert w.settlement.claim(game.game_id).status == ClaimStatus.UPHELD
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME
    info = w.settlement.job(jid)
    after = {a: holdings(w, a) for a in before}
    pay = info.price // 2
    assert after[cheater] - before[cheater] == -info.provider_stake < 0
    assert after[honest_seat] - before[honest_seat] == pay
    assert after[auditor] > before[auditor]  # its bonds back and the finder's reward
    assert after[w.client] - before[w.client] == info.price - pay  # the cheater's p back
    w.assert_every_coin_accounted()
