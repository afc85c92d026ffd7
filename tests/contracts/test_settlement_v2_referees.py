"""Rulings, drawn referees and appeals (docs/economics.md, section 9) against the real GavelSettlementV2
on the embedded EVM. Each money test plays an adversary to the end: it ends with less than it put
in, every honest party with at least what it put in; every coin is accounted for after every move.

Draws read the hash of a block the test mines: `GameTable.draw` checks the contract drew whom the
twin `probe` says and, where a test wants a given draw, chooses that block's time as a block maker
could (the bias section 9 names)."""

from __future__ import annotations

import pytest
from eth_utils import keccak

from contracts import Role
from contracts.settlement_v2 import SettlementV2, _create
from contracts.settlement_v2_games import ClaimStatus
from contracts.settlement_v2_referees import (
    GAS_LIMITS_REFEREES, AppealOpened, AppealRuled, AppealSettled, AppealStage, ClaimRuled, RefereeDrawArmed,
    RefereeDrawn, RefereeTimedOut, RefereesExhausted)
from protocol.economics import ESTIMATED_GAS

from .game_world_v2 import (
    CHEAT, DRAW_DELAY, DRAW_WINDOW, EVERY, PROBES, REFEREE_FEE, SCAN, TRUTH, WRONG_NODE, WRONG_STEP, GameTable,
    holdings, probe, register_auditors, register_referees)
from .settlement_world import NODE_STAKE, ed25519_key, reverts
from .settlement_world_v2 import PRICE, PROVIDER_STAKE

pytestmark = pytest.mark.settlement

S = PROVIDER_STAKE
GAMMA = 10**9
C_BAD, S_BAD = (WRONG_STEP - 1) // EVERY, (WRONG_STEP - 1) % EVERY + 1
APPELLANT_GAS = GAMMA * (ESTIMATED_GAS.appeal + ESTIMATED_GAS.draw)  # paid back from an overturned referee's bond
T = keccak(b"transcript")


def cheated_claim(t: GameTable, by: str) -> tuple[bytes, bytes, bytes]:
    """`by` plays the whole path against the cheater's root, to the evidence: (game, step, node)."""
    return t.path_to_evidence(by, t.seats[-1], C_BAD, S_BAD, WRONG_NODE)


def false_claim(t: GameTable, by: str) -> tuple[bytes, bytes, bytes]:
    """`by` plays the whole path against the honest root of the first seat: (game, step, node)."""
    return t.path_to_evidence(by, t.seats[0], 0, 1, 0)


def close(t: GameTable, *claims: bytes) -> list[ClaimStatus]:
    """Waits out each claim's deadlines and ends it, bottom up; then settles the job."""
    w = t.w
    out = []
    for claim in claims:
        info = w.settlement.claim(claim)
        t.after(max(info.answer_by, info.pick_until, info.rule_by))
        (w.as_(w.keeper).resolve_game if info.level == 0 else w.as_(w.keeper).timeout)(claim)
        w.assert_every_coin_accounted()
        out.append(w.settlement.claim(claim).status)
    d = w.settlement.deadlines(t.jid)
    t.after(max(d.reveal_by, d.challenge_end))
    w.as_(w.keeper).settle(t.jid)
    w.assert_every_coin_accounted()
    return out


def drawn_referee(t: GameTable, claim: bytes) -> str:
    """Draws until someone is drawn (choosing the seed block so the first draw finds someone)."""
    registry, eligible = t.w.settlement.referees(), t.eligible(claim)
    draws = t.w.settlement.ruling(claim).draws
    referee = t.draw(claim, want=lambda h: probe(h, claim, draws, registry, eligible) is not None)
    assert referee is not None
    return referee


# ---------------------------------------------------------------- section 12's strategies


def test_a_client_as_colluding_referee_is_overturned_on_appeal(cast_v2):
    """K's puppet Z picks against honest H; K rules H wrong; H appeals; a drawn referee overturns.
    K and Z together end poorer, H with its pay and Z's bonds, the appeal referee with f_R."""
    w = cast_v2
    _, puppet = register_auditors(w)
    referees = register_referees(w, 3)
    t = GameTable(w, (TRUTH,))
    honest = t.seats[0]
    paid = w.settlement.bonds_of(t.jid)
    before = {x: holdings(w, x) for x in (w.client, puppet, honest, *referees)}
    game, step, node = false_claim(t, puppet)
    w.as_(w.client).rule(node, False, T)  # the false ruling
    t._booked(w.as_(honest).appeal(node))
    appeal_referee = drawn_referee(t, node)
    ruled = t._booked(w.as_(appeal_referee).rule_appeal(node, True, keccak(b"the recompute")))
    assert ruled.one(AppealRuled).overturned
    settled = ruled.one(AppealSettled)
    assert (settled.loser, settled.amount) == (w.client, paid.referee)
    assert (settled.to_appellant, settled.to_referee) == (APPELLANT_GAS, REFEREE_FEE)
    assert w.settlement.ruling(node).overturned
    assert close(t, node, step, game) == [ClaimStatus.FAILED] * 3
    coalition = holdings(w, w.client) + holdings(w, puppet)
    assert coalition < before[w.client] + before[puppet]
    # Z lost its three bonds; K its referee bond (burned but the appellant's gas and the appeal's fee)
    assert holdings(w, puppet) == before[puppet] - paid.open_game - paid.pick_step - paid.pick_node
    assert holdings(w, w.client) == before[w.client] - paid.referee  # its one seat was paid all of P
    # H: its pay, the puppet's bonds (the overturned referee's fee forfeited to it), its appeal gas
    assert holdings(w, honest) == (before[honest] + PRICE + paid.open_game + paid.pick_step + paid.pick_node
                                   + APPELLANT_GAS)
    for r in referees:
        assert holdings(w, r) == before[r] + (REFEREE_FEE if r == appeal_referee else 0)
        assert w.settlement.node(r).locked == 0


def test_a_stalling_appeal_referee_is_burned_and_redrawn(cast_v2):
    """The cheater appeals a right ruling against it; the first appeal referee stalls and loses its
    bond; the second upholds the ruling. The cheater loses its stake and A (f_R to the referee, the
    rest to the finder); the stalling referee loses its bond; the finder and the honest seat gain."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    referees = register_referees(w, 3)
    t = GameTable(w, (TRUTH, CHEAT))
    honest, cheater = t.seats
    paid = w.settlement.bonds_of(t.jid)
    before = {x: holdings(w, x) for x in (auditor, honest, cheater, w.client, *referees)}
    game, step, node = cheated_claim(t, auditor)
    w.as_(w.client).rule(node, False, T)
    opened = t._booked(w.as_(cheater).appeal(node)).one(AppealOpened)
    assert opened.bond == paid.appeal
    staller = drawn_referee(t, node)
    t.after(w.settlement.ruling(node).appeal_rule_by)
    with reverts("RefereeDeadlinePassed"):
        w.as_(staller).rule_appeal(node, True, T)
    burned = w.ledger()["burned"]
    timed_out = t._booked(w.as_(w.keeper).timeout_referee(node))
    assert timed_out.one(RefereeTimedOut) == RefereeTimedOut(node, staller, paid.referee)
    assert w.ledger()["burned"] == burned + paid.referee
    second = drawn_referee(t, node)
    assert second != staller  # an earlier referee of the claim is not drawn again
    upheld = t._booked(w.as_(second).rule_appeal(node, False, T))
    assert not upheld.one(AppealRuled).overturned
    assert upheld.one(AppealSettled) == AppealSettled(node, cheater, paid.appeal, 0, REFEREE_FEE,
                                                      paid.appeal - REFEREE_FEE, 0)
    assert close(t, node, step, game) == [ClaimStatus.UPHELD] * 3
    assert holdings(w, cheater) == before[cheater] - S - paid.appeal
    assert holdings(w, staller) == before[staller] - paid.referee
    assert holdings(w, second) == before[second] + REFEREE_FEE
    assert holdings(w, auditor) > before[auditor] + paid.appeal - REFEREE_FEE
    assert holdings(w, honest) >= before[honest] + PRICE // 2
    assert holdings(w, w.client) >= before[w.client]


def test_a_false_appeal_against_a_right_ruling_loses_the_appellants_bond_to_the_defenders(cast_v2):
    w = cast_v2
    adversary, _ = register_auditors(w)
    referees = register_referees(w, 3)
    t = GameTable(w, (TRUTH, TRUTH))
    a, b = t.seats
    paid = w.settlement.bonds_of(t.jid)
    before = {x: holdings(w, x) for x in (adversary, a, b, w.client, *referees)}
    game, step, node = false_claim(t, adversary)  # both seats cover the lists and post evidence
    w.as_(w.client).rule(node, True, T)  # right
    t._booked(w.as_(adversary).appeal(node))
    referee = drawn_referee(t, node)
    settled = t._booked(w.as_(referee).rule_appeal(node, True, T)).one(AppealSettled)
    rest = paid.appeal - REFEREE_FEE
    assert (settled.to_referee, settled.to_favoured, settled.burned) == (REFEREE_FEE, rest // 2 * 2, rest % 2)
    assert close(t, node, step, game) == [ClaimStatus.FAILED] * 3
    lost = paid.open_game + paid.pick_step + paid.pick_node
    assert holdings(w, adversary) == before[adversary] - lost - paid.appeal
    for seat in (a, b):
        assert holdings(w, seat) >= before[seat] + PRICE // 2 + rest // 2
    assert holdings(w, w.client) >= before[w.client] + REFEREE_FEE  # the first ruling stood: its fee
    assert holdings(w, referee) == before[referee] + REFEREE_FEE


def test_a_first_level_drawn_referee_rules_when_the_client_does_not_referee(cast_v2):
    """clientReferees = false: a drawn referee rules the node claim; on the upheld path it is paid f_R
    from the cheater's lock, and its bond comes back when the claim ends."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    referees = register_referees(w, 2)
    t = GameTable(w, (TRUTH, CHEAT), client_referees=False)
    _, cheater = t.seats
    before = {x: holdings(w, x) for x in (auditor, cheater, *referees)}
    assert w.settlement.node(w.client).locked == 0  # no referee bond
    game, step, node = cheated_claim(t, auditor)
    with reverts("RefereeNotTheReferee", account=w.client):
        w.as_(w.client).rule(node, False, T)
    referee = drawn_referee(t, node)
    ruled = t._booked(w.as_(referee).rule(node, False, T)).one(ClaimRuled)
    assert ruled.appeal_by == w.settlement.claim(node).rule_by
    assert close(t, node, step, game) == [ClaimStatus.UPHELD] * 3
    assert holdings(w, referee) == before[referee] + REFEREE_FEE
    assert w.settlement.node(referee).locked == 0
    assert holdings(w, cheater) == before[cheater] - S
    assert holdings(w, auditor) > before[auditor]


def test_an_overturned_drawn_referee_loses_its_bond_and_its_fee(cast_v2):
    w = cast_v2
    adversary, _ = register_auditors(w)
    referees = register_referees(w, 3)
    t = GameTable(w, (TRUTH,), client_referees=False)
    honest = t.seats[0]
    paid = w.settlement.bonds_of(t.jid)
    before = {x: holdings(w, x) for x in (honest, adversary, *referees)}
    game, step, node = false_claim(t, adversary)
    corrupt = drawn_referee(t, node)
    w.as_(corrupt).rule(node, False, T)  # the drawn referee rules falsely
    with reverts("RefereeAppellantIsRuler", account=corrupt):
        w.as_(corrupt).appeal(node)
    t._booked(w.as_(honest).appeal(node))
    fair = drawn_referee(t, node)
    settled = t._booked(w.as_(fair).rule_appeal(node, True, T)).one(AppealSettled)
    assert (settled.loser, settled.amount) == (corrupt, paid.referee)
    assert close(t, node, step, game) == [ClaimStatus.FAILED] * 3
    assert holdings(w, corrupt) == before[corrupt] - paid.referee
    assert holdings(w, fair) == before[fair] + REFEREE_FEE
    lost = paid.open_game + paid.pick_step + paid.pick_node
    assert holdings(w, honest) == before[honest] + PRICE + lost + APPELLANT_GAS  # the fee of B_node included
    assert holdings(w, adversary) == before[adversary] - lost


def test_silent_appeal_referees_run_out_and_the_first_ruling_stands(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    referees = register_referees(w, 4)
    t = GameTable(w, (TRUTH, CHEAT))
    _, cheater = t.seats
    paid = w.settlement.bonds_of(t.jid)
    before = {x: holdings(w, x) for x in (cheater, *referees)}
    game, step, node = cheated_claim(t, auditor)
    w.as_(w.client).rule(node, False, T)
    t._booked(w.as_(cheater).appeal(node))
    stallers = []
    for i in range(3):
        stallers.append(drawn_referee(t, node))
        t.after(w.settlement.ruling(node).appeal_rule_by)
        result = t._booked(w.as_(w.keeper).timeout_referee(node))
    assert result.one(RefereesExhausted) == RefereesExhausted(node, True)
    ruling = w.settlement.ruling(node)
    assert ruling.appeal == AppealStage.ENDED and not ruling.overturned
    assert close(t, node, step, game) == [ClaimStatus.UPHELD] * 3
    assert holdings(w, cheater) == before[cheater] - S  # A came back; the stake did not
    for r in referees:
        assert holdings(w, r) == before[r] - (paid.referee if r in stallers else 0)


# ---------------------------------------------------------------- the draw


@pytest.mark.parametrize("seed", ["first probe misses", "every random probe misses"])
def test_draws_skip_ineligible_nodes(world_v2, seed):
    """Registry: the client, both seats, a party to the game, a node short of free stake, an
    unbonding one, and one eligible node. Whatever the seed, only the eligible node is drawn; the
    test picks a seed whose first probe hits an ineligible node, or one whose PROBES random looks
    all miss the eligible node (odds (6/7)^8, 29%: the walk over the registry finds it)."""
    w = world_v2
    honest, cheater, _ = w.providers
    w.as_(w.client).register(w.client_key, Role.CLIENT | Role.REFEREE, stake=10 * NODE_STAKE)
    for i, seat in enumerate((honest, cheater)):
        w.as_(seat).register(ed25519_key(f"seat {i}"), Role.PROVIDER | Role.REFEREE, stake=10 * NODE_STAKE)
    w.as_(w.keeper).register(ed25519_key("auditor"), Role.AUDITOR | Role.REFEREE, stake=10 * NODE_STAKE)
    t = GameTable(w, (TRUTH, CHEAT), client_referees=False)
    bond = w.settlement.bonds_of(t.jid).referee
    (poor,) = register_referees(w, 1, stake=bond - 1)
    leaving, eligible = register_referees(w, 2)
    w.as_(leaving).begin_unbonding()
    game, step, node = cheated_claim(t, w.keeper)
    registry = w.settlement.referees()
    assert set(registry) == {w.client, honest, cheater, w.keeper, poor, leaving, eligible}
    model = t.eligible(node)
    assert [a for a in registry if model(a)] == [eligible]

    def skips_then_draws_eligible(h: bytes) -> bool:
        if seed == "every random probe misses" and probe(h, node, 0, registry, model, scan=0) is not None:
            return False
        first = probe(h, node, 0, registry, lambda a: True)
        return first != eligible and probe(h, node, 0, registry, model) == eligible

    assert t.draw(node, want=skips_then_draws_eligible) == eligible
    assert w.settlement.ruling(node).referee == eligible
    assert w.settlement.node(eligible).locked == bond


def test_a_draw_that_probes_and_walks_in_vain_stays_within_its_gas_limit(cast_v2):
    """The dearest draw: a registry longer than the walk, nobody eligible (every node short of the
    referee bond), so PROBES random looks and SCAN steps of the walk are all read."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    t = GameTable(w, (TRUTH, CHEAT), client_referees=False)
    register_referees(w, SCAN + PROBES, stake=w.settlement.bonds_of(t.jid).referee - 1)
    game, step, node = cheated_claim(t, auditor)
    t.after(w.settlement.claim(node).rule_by)
    with reverts("GameNoRuling", claimId=node):
        w.as_(w.keeper).timeout(node)
    w.as_(w.keeper).draw_referee(node)  # armed here (the claim's draw was armed before the referees registered)
    r = w.settlement.ruling(node)
    while w.chain.block_number() <= r.armed_block + DRAW_DELAY:
        w.chain.mine()
    result = w.as_(w.keeper).draw_referee(node)
    assert not [e for e in result.events if isinstance(e, RefereeDrawn)]
    assert w.settlement.ruling(node).draws == 1
    assert result.gas_used <= GAS_LIMITS_REFEREES["drawReferee"], result.gas_used


def test_a_draw_with_nobody_eligible_counts_and_the_claim_voids(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    t = GameTable(w, (TRUTH, CHEAT), client_referees=False)
    _, cheater = t.seats
    before = holdings(w, auditor)
    game, step, node = cheated_claim(t, auditor)
    t.after(w.settlement.claim(node).rule_by)
    with reverts("GameNoRuling", claimId=node):
        w.as_(w.keeper).timeout(node)
    for _ in range(3):
        assert t.draw(node) is None
    assert w.settlement.ruling(node).referees_out
    with reverts("RefereeNotNeeded", claimId=node):
        w.as_(w.keeper).draw_referee(node)
    assert close(t, node, step, game) == [ClaimStatus.VOID] * 3
    assert holdings(w, auditor) == before


def test_the_draw_window_re_arms(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    register_referees(w, 2)
    t = GameTable(w, (TRUTH, CHEAT), client_referees=False)
    _, _, node = cheated_claim(t, auditor)
    armed = t._booked(w.as_(w.keeper).draw_referee(node)).one(RefereeDrawArmed)
    b = armed.draw_block
    assert (b, armed.draws) == (w.chain.block_number(), 0)
    with reverts("RefereeDrawTooEarly", fromBlock=b + DRAW_DELAY + 1):
        w.as_(w.keeper).draw_referee(node)
    while w.chain.block_number() < b + DRAW_WINDOW:
        w.chain.mine()
    # block b + DRAW_WINDOW + 1: the seed block's hash could soon be out of reach; the call re-arms
    rearmed = t._booked(w.as_(w.keeper).draw_referee(node)).one(RefereeDrawArmed)
    assert rearmed.draw_block == b + DRAW_WINDOW + 1
    assert w.settlement.ruling(node).referee == "0x" + "0" * 40
    assert drawn_referee(t, node) in w.settlement.referees()


# ---------------------------------------------------------------- guards


def test_the_module_refuses_direct_calls(cast_v2):
    w = cast_v2
    module = SettlementV2(w.chain, w.settlement.setting("REFEREES"), w.keeper)
    with reverts("RefereeDirectCall"):
        module.draw_referee(b"\x01" * 32)


def test_the_contract_refuses_modules_with_other_settings(cast_v2):
    w = cast_v2
    rules = (1_000, 10**18, 5_000)
    verifier = w.settlement.setting("STEP_VERIFIER")
    games = _create(w.chain, w.deployer, "GavelGamesV2", (*rules, 30, verifier))
    other = _create(w.chain, w.deployer, "GavelRefereesV2", (*rules, 31, verifier))  # another Δ
    demands = _create(w.chain, w.deployer, "GavelDemandsV2", (*rules, 30, 12))
    with reverts("SettlementModuleMismatch", module=other):
        _create(w.chain, w.deployer, "GavelSettlementV2", (*rules, 30, 10**6, 12, 3_600, games, other, demands))
    # the two modules name different verifiers: duels would be opened on one and settled from another
    referees = _create(w.chain, w.deployer, "GavelRefereesV2", (*rules, 30, w.deployer))
    with reverts("SettlementModuleMismatch", module=games):
        _create(w.chain, w.deployer, "GavelSettlementV2", (*rules, 30, 10**6, 12, 3_600, games, referees, demands))


def test_rule_appeal_and_draw_guards(cast_v2):
    w = cast_v2
    auditor, outsider = register_auditors(w)
    referees = register_referees(w, 3)
    t = GameTable(w, (TRUTH, CHEAT))
    _, cheater = t.seats
    game, step, node = cheated_claim(t, auditor)
    unknown = b"\x07" * 32
    with reverts("RefereeNotANodeClaim", claimId=unknown):
        w.as_(w.keeper).appeal(unknown)
    with reverts("RefereeNotANodeClaim", claimId=step):
        w.as_(w.keeper).draw_referee(step)
    with reverts("RefereeNotRuled", claimId=node):
        w.as_(cheater).appeal(node)
    with reverts("RefereeNotNeeded", claimId=node):  # the client holds the claim
        w.as_(w.keeper).draw_referee(node)
    with reverts("RefereeTooEarly"):
        w.as_(w.keeper).timeout_referee(node)
    with reverts("RefereeNoAppeal", claimId=node):
        w.as_(referees[0]).rule_appeal(node, True, T)
    w.as_(w.client).rule(node, False, T)
    with reverts("RefereeNoneHolds", claimId=node):  # ruled: only an appeal's referee can be timed out
        w.as_(w.keeper).timeout_referee(node)
    with reverts("RefereeAppellantIsRuler", account=w.client):
        w.as_(w.client).appeal(node)
    with reverts("NodeNotRegistered", account=w.chain.accounts[9]):
        w.as_(w.chain.accounts[9]).appeal(node)
    t._booked(w.as_(cheater).appeal(node))
    with reverts("RefereeAlreadyAppealed", claimId=node):
        w.as_(outsider).appeal(node)
    with reverts("RefereeNoneHolds", claimId=node):  # no appeal referee drawn yet
        w.as_(w.keeper).timeout_referee(node)
    with reverts("RefereeNotTheReferee", account=referees[0]):
        w.as_(referees[0]).rule_appeal(node, True, T)
    referee = drawn_referee(t, node)
    with reverts("RefereeNotNeeded", claimId=node):
        w.as_(w.keeper).draw_referee(node)
    with reverts("RefereeTooEarly"):
        w.as_(w.keeper).timeout_referee(node)
    with reverts("GameTooEarly"):  # the game waits for the appeal
        w.as_(w.keeper).timeout(node)
    w.as_(referee).rule_appeal(node, False, T)
    with reverts("RefereeNoAppeal", claimId=node):
        w.as_(referee).rule_appeal(node, True, T)
    close(t, node, step, game)
    with reverts("RefereeClaimClosed", claimId=node):
        w.as_(w.keeper).draw_referee(node)


def test_evidence_and_appeal_deadlines(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    t = GameTable(w, (TRUTH, CHEAT), client_referees=False)
    _, cheater = t.seats
    game = t.open_game(auditor, cheater, C_BAD)
    t.post_steps(cheater, game, C_BAD)
    step = t.pick_step(auditor, game, cheater, C_BAD, S_BAD)
    t.post_nodes(cheater, step, C_BAD, S_BAD)
    node = t.pick_node(auditor, step, cheater, WRONG_STEP, WRONG_NODE)
    referee = register_referees(w, 1)[0]
    assert t.draw(node) == referee  # before the evidence: its allowance starts with the evidence
    assert w.settlement.claim(node).rule_by == 0
    with reverts("RefereeNoEvidence", claimId=node):
        w.as_(w.keeper).timeout_referee(node)
    t.post_evidence(cheater, node)
    w.as_(referee).rule(node, False, T)
    t.after(w.settlement.ruling(node).appeal_by)
    with reverts("RefereeDeadlinePassed"):
        w.as_(cheater).appeal(node)
