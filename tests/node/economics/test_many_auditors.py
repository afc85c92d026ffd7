"""Many auditors on one cheated job (economics §8.3, §12): three auditors replay the same cheated root
and meet in one game (the later ones join it, the first pick of each level is theirs to share); the
cheater's defender answers, the client rules from its evidence, the keepers end the path, the job
settles. Real claim-game roles on the real contract (`claim_world.ClaimRoles`); money read from it."""
from __future__ import annotations

from contracts import Role
from contracts.settlement_v2 import ForfeitReason
from contracts.settlement_v2_games import ClaimJoined, ClaimPicked, ClaimStatus, GameOpened
from tests.contracts.game_world_v2 import holdings

from ..conftest import trio_test
from ..v2.claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


@trio_test(180)
async def test_three_auditors_meet_in_one_game_and_each_ends_whole(cast_v2, runs, tmp_path):
    w = cast_v2
    honest, cheat, _ = runs
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    auditors = [new_account(w, f"auditor {i}", Role.AUDITOR, STAKE) for i in range(3)]
    before = {a: holdings(w, a) for a in (*auditors, honest_seat, cheater)}
    credit = w.settlement.credit_of(w.client)
    roles = ClaimRoles(w, jid, {honest_seat: honest, cheater: cheat}, tmp_path, honest.training)
    for i, account in enumerate(auditors):
        roles.auditor(account, seed=i)
    await roles.play()

    events = [e.event for e in w.settlement.events(0)]
    (game,) = [e for e in events if isinstance(e, GameOpened)]
    picks = [e for e in events if isinstance(e, ClaimPicked)]
    assert len(picks) == 2  # one claim per level, whoever was first
    authors = {game.game_id: game.opener, **{p.claim_id: p.author for p in picks}}
    joined = {(e.claim_id, e.account) for e in events if isinstance(e, ClaimJoined)}
    assert joined == {(c, a) for c, author in authors.items() for a in auditors if a != author}

    await roles.finish([game.game_id])
    roles.settle()
    assert w.settlement.claim(game.game_id).status == ClaimStatus.UPHELD
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME
    after = {a: holdings(w, a) for a in before}
    info = w.settlement.job(jid)
    for a in auditors:  # authors get their bonds back and a third of w·S per claim; joiners put in no bond
        assert after[a] > before[a] if a in authors.values() else after[a] >= before[a]
    assert after[cheater] - before[cheater] == -info.provider_stake
    assert after[honest_seat] - before[honest_seat] == info.price // 2
    assert w.settlement.credit_of(w.client) - credit == info.price - info.price // 2  # the cheater's p back
    w.assert_every_coin_accounted()
