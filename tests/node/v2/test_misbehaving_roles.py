"""The non-provider behaviours of `node.roles.v2.adversaries`, played by the real roles on the real
contract (`claim_world.ClaimRoles` on a revealed MLP job whose two seats are honest): a false
challenger (an auditor with ``lies``) opens a game on the honest root and picks in every list; the
client referees it honestly, colludes (rules the defenders wrong) or stalls (never rules). Each
cheater ends with less than it put in; the honest seats, auditors and drawn referees with at least
what they put in. Money read from the contract."""
from __future__ import annotations

from contracts import Role
from contracts.settlement_v2 import ForfeitReason
from contracts.settlement_v2_games import NODE, STEP, ClaimPicked, ClaimStatus, GameOpened
from contracts.settlement_v2_referees import AppealOpened, RefereeTimedOut
from node.roles.v2.adversaries import REFEREE_BEHAVIOURS
from tests.contracts.game_world_v2 import holdings, register_referees

from ..conftest import trio_test
from .claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from .test_defender import revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


def _events(w, kind):
    return [e.event for e in w.settlement.events(0) if isinstance(e.event, kind)]


async def _lied_against(w, runs, tmp_path, referee_behaviour=None):
    """The honest job, its seats' defenders, a false challenger, an honest auditor and three registered
    referees; the client's duty with `referee_behaviour`. Returns the roles and every account's holdings."""
    honest = runs[0]
    jid = revealed_job(w, (honest, honest))
    seats = w.providers[:2]
    liar = new_account(w, "false challenger", Role.AUDITOR, STAKE)
    auditor = new_account(w, "honest auditor", Role.AUDITOR, STAKE)
    referees = register_referees(w, 3)
    roles = ClaimRoles(w, jid, dict.fromkeys(seats, honest), tmp_path, honest.training, referee=False)
    roles.referee(w.client, referee_behaviour)
    for referee in referees:
        roles.referee(referee)
    before = {a: holdings(w, a) for a in (w.client, liar, auditor, *seats, *referees)}
    roles.auditor(auditor, seed=2)
    roles.auditor(liar, lies=True)
    await roles.play()
    return roles, jid, seats, liar, auditor, referees, before


def _settled_books(w, roles, jid, before):
    roles.settle()
    info = w.settlement.job(jid)
    w.assert_every_coin_accounted()
    return info, {a: holdings(w, a) for a in before}


@trio_test(180)
async def test_a_false_challenger_opens_a_game_on_an_honest_root_picks_down_to_a_node_and_loses_its_bonds(
        cast_v2, runs, tmp_path):
    w = cast_v2
    roles, jid, seats, liar, auditor, referees, before = await _lied_against(w, runs, tmp_path)
    (game,) = [g for g in _events(w, GameOpened) if g.opener == liar]
    picks = [p for p in _events(w, ClaimPicked) if p.author == liar]
    assert [p.level for p in picks] == [STEP, NODE]  # it picked in both lists, though neither differs
    assert not [m for m, _ in roles.auditors[liar].moves if m == "appeal"]
    await roles.finish([game.game_id])
    assert w.settlement.claim(game.game_id).status == ClaimStatus.FAILED
    assert all(w.settlement.seat(jid, s).forfeit == ForfeitReason.NONE for s in seats)
    info, after = _settled_books(w, roles, jid, before)
    assert after[liar] < before[liar]  # its bonds went to the seats
    assert all(after[s] - before[s] >= info.price // 2 for s in seats)
    assert after[auditor] >= before[auditor] and after[w.client] >= before[w.client]


@trio_test(180)
async def test_a_colluding_client_rules_the_honest_seats_wrong_is_appealed_overturned_and_loses_its_bond(
        cast_v2, runs, tmp_path):
    w = cast_v2
    roles, jid, seats, liar, auditor, referees, before = await _lied_against(
        w, runs, tmp_path, REFEREE_BEHAVIOURS["colluding-referee"])
    (game,) = [g for g in _events(w, GameOpened) if g.opener == liar]
    await roles.finish([game.game_id])
    (appeal,) = _events(w, AppealOpened)
    assert appeal.appellant == auditor  # its replay contradicts the client's ruling
    assert w.settlement.claim(game.game_id).status == ClaimStatus.FAILED
    assert all(w.settlement.seat(jid, s).forfeit == ForfeitReason.NONE for s in seats)
    info, after = _settled_books(w, roles, jid, before)
    assert after[w.client] < before[w.client] and after[liar] < before[liar]
    assert after[auditor] >= before[auditor]
    assert all(after[s] - before[s] >= info.price // 2 for s in seats)
    assert all(after[r] >= before[r] for r in referees)


@trio_test(180)
async def test_a_stalling_client_never_rules_its_bond_burns_and_a_drawn_referee_rules(cast_v2, runs, tmp_path):
    w = cast_v2
    roles, jid, seats, liar, auditor, referees, before = await _lied_against(
        w, runs, tmp_path, REFEREE_BEHAVIOURS["stalling-referee"])
    (game,) = [g for g in _events(w, GameOpened) if g.opener == liar]
    assert not roles.duties[w.client].ruled
    await roles.finish([game.game_id])
    assert [t.referee for t in _events(w, RefereeTimedOut)][:1] == [w.client]
    assert w.settlement.claim(game.game_id).status == ClaimStatus.FAILED
    info, after = _settled_books(w, roles, jid, before)
    assert after[w.client] < before[w.client] and after[liar] < before[liar]
    assert all(after[s] - before[s] >= info.price // 2 for s in seats)
    assert after[auditor] >= before[auditor] and all(after[r] >= before[r] for r in referees)
