"""The claim game: the table, honest against cheating to both outcomes, joins, clocks, every refused move."""
from __future__ import annotations

import pytest
from eth_utils import keccak

from protocol import CHALLENGER, DEFENDER, REFEREE
from protocol.economics import ChainSettings, EconomicTerms, allowances
from protocol.claims import (
    ANSWERING, APPEALABLE, APPEALED, CLAIM_TRANSITIONS, DRAWING, FAILED, FINAL, LOST_GAME, MAX_DRAWS, MAX_JOINERS,
    NODE, PICKING, RULING, SILENT_DEFENDER, STEP, UPHELD, VOID, WAITING, Appeal, ClaimGame, DrawReferee, Endorse,
    Join, Pick, PostEvidence, PostList, RecomputeQueue, Rule, Timeout, claim_id,
)
from protocol.errors import LocalProtocolError, RemoteProtocolError


def account(name: str) -> str:
    from eth_utils import to_checksum_address
    return to_checksum_address(keccak(name.encode())[:20])


H, Q, A, X, K, R1, R2, R3, R4 = (account(n) for n in ("honest", "cheater", "auditor", "puppet", "client",
                                                       "r1", "r2", "r3", "r4"))
SETTINGS = ChainSettings(margin=30, bandwidth=1_000_000, block_seconds=2, max_interval_seconds=3_600,
                         winner_share_bps=5_000)
TERMS = EconomicTerms(steps=200, checkpoint_every=20, graph_nodes=53, step_millis=250, node_millis=40,
                      state_bytes=3_000_000, evidence_bytes=500_000, providers_wanted=2, catch_bps=9_000,
                      accept_window=600, price=10**18, provider_stake=10**18, gas_price_cap=10**9,
                      referee_fee=10**15, witness_fee=10**15)
ALLOWED = allowances(TERMS, SETTINGS)
JOB, ROOT = keccak(b"job"), keccak(b"root")
T0 = 1_000
GOOD_STEPS, BAD_STEPS = keccak(b"steps of honest"), keccak(b"steps of cheater")
GOOD_NODES, BAD_NODES = keccak(b"nodes of honest"), keccak(b"nodes of cheater")
TRANSCRIPT = keccak(b"transcript")


def new_game(defenders=(H,), opener=A, client=K, queue=None, interval=3, at=T0) -> ClaimGame:
    return ClaimGame(job_id=JOB, root=ROOT, interval=interval, defenders=defenders, opener=opener, opened_at=at,
                     interval_steps=20, graph_nodes=53, allowed=ALLOWED, settings=SETTINGS, client=client,
                     queue=queue)


def play_to_evidence(game: ClaimGame, seat: str, steps: bytes, nodes: bytes, challenger: str = A):
    """The defender answers each level at once; the challenger picks step 7, then node 5."""
    g = game.id
    game.handle(PostList(g, T0 + 1, seat, steps))
    game.handle(Pick(g, T0 + 2, challenger, steps, 7))
    step = claim_id(g, STEP, steps, 7)
    game.handle(PostList(step, T0 + 3, seat, nodes))
    game.handle(Pick(step, T0 + 4, challenger, nodes, 5))
    node = claim_id(g, NODE, nodes, 5)
    game.handle(PostEvidence(node, T0 + 5, seat, keccak(b"evidence " + seat.encode())))
    return step, node


def close_windows(game: ClaimGame, *claims: bytes) -> None:
    """Anyone calls timeout on each claim from its deadline on (innermost first)."""
    for c in claims:
        while game.claims[c].state not in FINAL and game.claims[c].deadline() is not None:
            game.handle(Timeout(c, max(game.now, game.claims[c].deadline())))


# --- the table -----------------------------------------------------------------------------

def test_every_state_is_in_the_table_and_every_open_state_can_end():
    states = set(CLAIM_TRANSITIONS)
    assert all(target in states for events in CLAIM_TRANSITIONS.values() for target in events.values())
    assert all(CLAIM_TRANSITIONS[s] == {} for s in FINAL)
    for state in states:
        seen, todo = set(), [state]
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo.extend(CLAIM_TRANSITIONS[s].values())
        assert seen & FINAL, state


# --- honest against cheating: both outcomes ------------------------------------------------

def test_a_cheating_challenger_against_an_honest_defender_fails_at_every_level():
    game = new_game(defenders=(H,), opener=X)
    step, node = play_to_evidence(game, H, GOOD_STEPS, GOOD_NODES, challenger=X)
    assert game.claims[node].state == RULING and game.claims[node].referee == K
    assert game.handle(Rule(node, T0 + 6, K, True, TRANSCRIPT)) == APPEALABLE
    close_windows(game, node, step, game.id)
    assert [game.claims[c].state for c in (node, step, game.id)] == [FAILED, FAILED, FAILED]
    assert game.forfeits == {} and game.resolved


def test_an_honest_auditor_against_a_cheating_defender_wins_at_every_level():
    game = new_game(defenders=(Q,), opener=A)
    step, node = play_to_evidence(game, Q, BAD_STEPS, BAD_NODES)
    game.handle(Rule(node, T0 + 6, K, False, TRANSCRIPT))
    appeal_by = game.claims[node].appeal_by
    assert appeal_by == T0 + 6 + ALLOWED.rule
    with pytest.raises(RemoteProtocolError, match="too early"):
        game.handle(Timeout(node, appeal_by - 1))  # one tick before the deadline
    assert game.handle(Timeout(node, appeal_by)) == UPHELD  # exactly at it
    assert game.claims[step].state == UPHELD and game.root_claim.state == UPHELD  # upheld climbs the path
    assert game.forfeits == {Q: LOST_GAME} and game.resolved


def test_co_defenders_with_different_lists_only_the_picked_one_loses():
    game = new_game(defenders=(H, Q))
    g = game.id
    game.handle(PostList(g, T0 + 1, H, GOOD_STEPS))
    game.handle(PostList(g, T0 + 1, Q, BAD_STEPS))
    game.handle(Pick(g, T0 + 2, A, BAD_STEPS, 7))
    step = claim_id(g, STEP, BAD_STEPS, 7)
    assert game.claims[step].defenders == {Q}
    game.handle(PostList(step, T0 + 3, Q, BAD_NODES))
    game.handle(Pick(step, T0 + 4, A, BAD_NODES, 5))
    node = claim_id(g, NODE, BAD_NODES, 5)
    game.handle(PostEvidence(node, T0 + 5, Q, keccak(b"e")))
    game.handle(Rule(node, T0 + 6, K, False, TRANSCRIPT))
    close_windows(game, node)
    assert game.root_claim.state == UPHELD and game.forfeits == {Q: LOST_GAME}


def test_an_appeal_overturns_a_false_ruling_against_an_honest_seat():
    game = new_game(defenders=(H,), opener=X)
    step, node = play_to_evidence(game, H, GOOD_STEPS, GOOD_NODES, challenger=X)
    game.handle(Rule(node, T0 + 6, K, False, TRANSCRIPT))  # the client colludes with its puppet X
    with pytest.raises(RemoteProtocolError, match="own ruling"):
        game.handle(Appeal(node, T0 + 7, K))
    assert game.handle(Appeal(node, T0 + 7, H)) == APPEALED
    for banned in (K, H, X):  # the client, a defender, an author
        with pytest.raises(RemoteProtocolError, match="may not referee"):
            game.handle(DrawReferee(node, T0 + 8, banned))
    game.handle(DrawReferee(node, T0 + 8, R1))
    with pytest.raises(RemoteProtocolError, match="only the claim's referee"):
        game.handle(Rule(node, T0 + 9, K, False, TRANSCRIPT))
    assert game.handle(Rule(node, T0 + 9, R1, True, TRANSCRIPT)) == FAILED
    close_windows(game, step, game.id)
    assert game.root_claim.state == FAILED and game.forfeits == {}


# --- joining --------------------------------------------------------------------------------

def test_challengers_join_the_game_and_the_claim_without_new_claims():
    game = new_game(opener=A)
    g = game.id
    game.handle(Join(g, T0, X))
    game.handle(PostList(g, T0 + 1, H, GOOD_STEPS))
    game.handle(Pick(g, T0 + 2, A, GOOD_STEPS, 7))
    puppets = [account(f"puppet {i}") for i in range(MAX_JOINERS + 2)]
    for p in puppets:
        game.handle(Pick(g, T0 + 3, p, GOOD_STEPS, 7))  # the same pick: a join
    step = claim_id(g, STEP, GOOD_STEPS, 7)
    assert len(game.claims) == 2 and game.root_claim.joiners == [X]
    assert game.claims[step].joiners == puppets and game.claims[step].reimbursed_joiners == puppets[:MAX_JOINERS]
    game.handle(Pick(g, T0 + 3, A, GOOD_STEPS, 7))  # its own author again: nothing new
    assert game.claims[step].joiners == puppets


# --- clocks and timeouts ------------------------------------------------------------------

def test_a_defender_answers_strictly_before_its_deadline_and_times_out_at_it():
    steps_by = T0 + ALLOWED.list
    game = new_game(defenders=(H, Q))
    with pytest.raises(RemoteProtocolError, match="too late"):
        game.handle(PostList(game.id, steps_by, H, GOOD_STEPS))
    game.handle(PostList(game.id, steps_by - 1, H, GOOD_STEPS))
    assert game.root_claim.deadline() == steps_by  # Q still owes its list
    with pytest.raises(RemoteProtocolError, match="too early"):
        game.handle(Timeout(game.id, steps_by - 1))
    assert game.handle(Timeout(game.id, steps_by)) == PICKING
    assert game.forfeits == {Q: SILENT_DEFENDER}
    assert game.root_claim.deadline() == steps_by + ALLOWED.interval  # the pick window runs from the list deadline


def test_defenders_all_silent_lose_by_default():
    game = new_game(defenders=(H, Q))
    assert game.handle(Timeout(game.id, T0 + ALLOWED.list)) == UPHELD
    assert game.forfeits == {H: SILENT_DEFENDER, Q: SILENT_DEFENDER}


def test_a_last_second_pick_leaves_the_defenders_their_whole_recompute():
    game = new_game()
    game.handle(PostList(game.id, T0 + 1, H, GOOD_STEPS))
    pick_by = game.root_claim.pick_by
    with pytest.raises(RemoteProtocolError, match="too late"):
        game.handle(Pick(game.id, pick_by, A, GOOD_STEPS, 7))
    game.handle(Pick(game.id, pick_by - 1, A, GOOD_STEPS, 7))
    assert game.claims[claim_id(game.id, STEP, GOOD_STEPS, 7)].answer_by == pick_by - 1 + ALLOWED.interval


def test_games_of_one_root_share_the_recompute_queue():
    queue = RecomputeQueue()
    first, second = new_game(interval=3, queue=queue), new_game(interval=4, queue=queue)
    for game in (first, second):
        game.handle(PostList(game.id, T0 + 1, H, GOOD_STEPS))
        game.handle(Pick(game.id, T0 + 2, A, GOOD_STEPS, 7))
    nodes_by_first = first.claims[claim_id(first.id, STEP, GOOD_STEPS, 7)].answer_by
    nodes_by_second = second.claims[claim_id(second.id, STEP, GOOD_STEPS, 7)].answer_by
    assert nodes_by_first == T0 + 2 + ALLOWED.interval
    assert nodes_by_second == nodes_by_first - 2 * SETTINGS.margin + ALLOWED.interval
    first.handle(Pick(first.id, T0 + 3, A, GOOD_STEPS, 8))  # a later pick of the same game reuses the recompute
    assert first.claims[claim_id(first.id, STEP, GOOD_STEPS, 8)].answer_by == nodes_by_first


def test_silent_referees_are_redrawn_then_the_claim_voids_and_so_does_the_path():
    game = new_game(defenders=(H,), opener=X)
    step, node = play_to_evidence(game, H, GOOD_STEPS, GOOD_NODES, challenger=X)
    rule_by = game.claims[node].rule_by
    assert rule_by == T0 + 5 + ALLOWED.rule
    with pytest.raises(RemoteProtocolError, match="too early"):
        game.handle(Timeout(node, rule_by - 1))
    assert game.handle(Timeout(node, rule_by)) == DRAWING  # the client's bond burns
    for n, referee in enumerate((R1, R2, R3), 1):
        with pytest.raises(RemoteProtocolError, match="may not referee"):
            game.handle(DrawReferee(node, game.now, K))  # a burned referee rules nothing more
        game.handle(DrawReferee(node, game.now, referee))
        assert game.handle(Timeout(node, game.claims[node].rule_by)) == (DRAWING if n < MAX_DRAWS else VOID)
    assert game.burned_referees == {K, R1, R2, R3}
    assert game.claims[step].state == PICKING  # its window is still open
    close_windows(game, step, game.id)
    assert game.claims[step].state == VOID and game.root_claim.state == VOID and game.forfeits == {}


def test_a_parent_whose_window_closes_over_an_open_pick_waits_for_it():
    game = new_game(defenders=(Q,))
    step, node = play_to_evidence(game, Q, BAD_STEPS, BAD_NODES)
    game.handle(Rule(node, T0 + 6, K, False, TRANSCRIPT))
    game.handle(Appeal(node, T0 + 7, Q))  # the cheater appeals to gain time
    close_windows(game, step)
    assert game.claims[step].state == WAITING and game.claims[node].state == APPEALED
    game.handle(DrawReferee(node, game.now, R1))
    assert game.handle(Rule(node, game.now, R1, False, TRANSCRIPT)) == UPHELD
    assert game.claims[step].state == UPHELD and game.root_claim.state == UPHELD
    assert game.forfeits == {Q: LOST_GAME}


def test_a_client_that_authored_a_claim_does_not_referee_it():
    game = new_game(opener=K)
    step, node = play_to_evidence(game, H, GOOD_STEPS, GOOD_NODES, challenger=K)
    assert game.claims[node].state == DRAWING and game.claims[node].referee is None
    game.handle(DrawReferee(node, T0 + 50, R1))
    assert game.claims[node].rule_by == T0 + 50 + ALLOWED.rule  # from the later of the draw and the evidence


def test_each_side_sees_what_it_owes():
    game = new_game(defenders=(H, Q))
    assert game.duties(H, DEFENDER) == [(game.id, "post or endorse a list", T0 + ALLOWED.list)]
    game.handle(PostList(game.id, T0 + 1, H, GOOD_STEPS))
    game.handle(Endorse(game.id, T0 + 1, Q, GOOD_STEPS))
    assert game.duties(H, DEFENDER) == [] and game.root_claim.lists == {GOOD_STEPS: {H, Q}}
    assert game.duties(A, CHALLENGER) == [(game.id, "pick a step", game.root_claim.pick_by)]
    step, node = claim_id(game.id, STEP, GOOD_STEPS, 7), claim_id(game.id, NODE, GOOD_NODES, 5)
    game.handle(Pick(game.id, T0 + 2, A, GOOD_STEPS, 7))
    game.handle(PostList(step, T0 + 3, H, GOOD_NODES))
    game.handle(Pick(step, T0 + 4, A, GOOD_NODES, 5))
    assert game.claims[node].defenders == {H}  # Q covers no node list yet: it owes one for the step claim
    assert (step, "post or endorse a list", game.claims[step].answer_by) in game.duties(Q, DEFENDER)
    game.handle(PostEvidence(node, T0 + 5, H, keccak(b"e")))
    assert game.duties(K, REFEREE) == [(node, "rule", game.claims[node].rule_by)]


# --- every refused move ------------------------------------------------------------------

def test_illegal_moves_are_refused_as_remote_errors():
    game = new_game(defenders=(H, Q))
    g = game.id
    refused = [
        Pick(g, T0, A, GOOD_STEPS, 7),                       # no list posted yet (ANSWERING takes no pick)
        PostList(g, T0, A, GOOD_STEPS),                      # not a defender
        Endorse(g, T0, H, GOOD_STEPS),                       # nothing posted to endorse
        PostEvidence(g, T0, H, keccak(b"e")),                # evidence answers node claims only
        Rule(g, T0, K, True, TRANSCRIPT),                    # nothing to rule
        Appeal(g, T0, H),                                    # nothing ruled
        DrawReferee(g, T0, R1),                              # no draw owed
        Timeout(keccak(b"no such claim"), T0),               # unknown claim
    ]
    for event in refused:
        with pytest.raises(RemoteProtocolError):
            game.handle(event)
    game.handle(PostList(g, T0 + 1, H, GOOD_STEPS))
    for event in (PostList(g, T0 + 1, H, BAD_STEPS),          # H is covered already
                  Pick(g, T0 + 1, A, BAD_STEPS, 7),           # not a list of this claim
                  Pick(g, T0 + 1, A, GOOD_STEPS, 0),          # entry 0 is the proven checkpoint
                  Pick(g, T0 + 1, A, GOOD_STEPS, 21)):        # beyond the interval's 20 steps
        with pytest.raises(RemoteProtocolError):
            game.handle(event)
    game.handle(Pick(g, T0 + 2, A, GOOD_STEPS, 20))
    step = claim_id(g, STEP, GOOD_STEPS, 20)
    with pytest.raises(RemoteProtocolError):
        game.handle(PostList(step, T0 + 3, Q, GOOD_NODES))    # Q does not cover the picked list
    game.handle(PostList(step, T0 + 3, H, GOOD_NODES))
    with pytest.raises(RemoteProtocolError):
        game.handle(Pick(step, T0 + 4, A, GOOD_NODES, 54))    # past entry N (the state after the step)
    with pytest.raises(LocalProtocolError, match="backwards"):
        game.handle(Join(g, T0 + 1, X))
    assert game.claims[g].state == PICKING and game.claims[step].state == PICKING  # nothing moved


@pytest.mark.parametrize("build", [
    lambda: Pick(b"short", T0, A, GOOD_STEPS, 1),
    lambda: Pick(ROOT, -1, A, GOOD_STEPS, 1),
    lambda: Pick(ROOT, T0, "0x12", GOOD_STEPS, 1),
    lambda: Pick(ROOT, T0, A, GOOD_STEPS, -1),
    lambda: Rule(ROOT, T0, K, 1, TRANSCRIPT),
    lambda: PostList(ROOT, T0, H, b"x" * 31),
    lambda: Timeout(ROOT, 1.5),
])
def test_events_validate_themselves(build):
    with pytest.raises(LocalProtocolError):
        build()


def test_events_spell_accounts_one_way():
    assert Join(ROOT, T0, A.lower()).author == A
    assert ANSWERING in CLAIM_TRANSITIONS and RULING in CLAIM_TRANSITIONS


def test_silent_appeal_referees_leave_the_first_ruling_standing():
    game = new_game(defenders=(Q,))
    step, node = play_to_evidence(game, Q, BAD_STEPS, BAD_NODES)
    game.handle(Rule(node, T0 + 6, K, False, TRANSCRIPT))
    game.handle(Appeal(node, T0 + 7, Q))
    for n, referee in enumerate((R1, R2, R3), 1):
        game.handle(DrawReferee(node, game.now, referee))
        expected = APPEALED if n < MAX_DRAWS else UPHELD
        assert game.handle(Timeout(node, game.claims[node].rule_by)) == expected
    assert game.forfeits == {Q: LOST_GAME} and game.burned_referees == {R1, R2, R3}


def test_a_co_defender_that_posts_no_evidence_forfeits_at_the_evidence_deadline():
    game = new_game(defenders=(H, Q))
    g = game.id
    game.handle(PostList(g, T0 + 1, H, GOOD_STEPS))
    game.handle(Endorse(g, T0 + 1, Q, GOOD_STEPS))
    game.handle(Pick(g, T0 + 2, X, GOOD_STEPS, 7))
    step = claim_id(g, STEP, GOOD_STEPS, 7)
    game.handle(PostList(step, T0 + 3, H, GOOD_NODES))
    game.handle(Endorse(step, T0 + 3, Q, GOOD_NODES))
    game.handle(Pick(step, T0 + 4, X, GOOD_NODES, 5))
    node = claim_id(g, NODE, GOOD_NODES, 5)
    game.handle(PostEvidence(node, T0 + 5, H, keccak(b"e")))
    evidence_by = T0 + 4 + ALLOWED.xfer_evidence
    assert game.claims[node].deadline() == evidence_by
    with pytest.raises(RemoteProtocolError, match="too early"):
        game.handle(Timeout(node, evidence_by - 1))
    assert game.handle(Timeout(node, evidence_by)) == RULING  # the ruling goes on; Q forfeits
    assert game.forfeits == {Q: SILENT_DEFENDER}
    with pytest.raises(RemoteProtocolError, match="too late"):
        game.handle(PostEvidence(node, evidence_by, Q, keccak(b"late")))
