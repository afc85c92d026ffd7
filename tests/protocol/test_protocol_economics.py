"""The economics note's formulas: section 11's worked example, the allowances and bonds by hand, rounding."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from math import comb

import pytest

from protocol import catch_probability
from protocol.economics import (
    ESTIMATED_GAS, MAX_DRAWS, ChainSettings, EconomicTerms, accepts_step_cost, allowances, bonds, ceil_div,
    challenge_by, check_open, client_samples, commit_by, final_by, finder_reward, finder_shares, interval_value,
    job_deadlines, job_min_stake, later_step_pick_deadline, min_stake, referee_bond, reveal_by,
    stake_covers_reimbursements, step_pick_deadline, transfer_allowance,
)
from protocol.errors import LocalProtocolError

ETH = 10**18
GWEI = 10**9
TESTNET = ChainSettings(margin=30, bandwidth=1_000_000, block_seconds=2, max_interval_seconds=3_600,
                        winner_share_bps=5_000)


def terms(**changes) -> EconomicTerms:
    """The testnet's job: 8 steps, a checkpoint each step, one seat, P = 1 ETH, S = 1 ETH."""
    base = EconomicTerms(
        steps=8, checkpoint_every=1, graph_nodes=53, step_millis=250, node_millis=40, state_bytes=3_000_000,
        evidence_bytes=500_001, providers_wanted=1, catch_bps=7_500, accept_window=600, price=ETH,
        provider_stake=ETH, gas_price_cap=GWEI, referee_fee=10**15, witness_fee=10**15)
    return replace(base, **changes)


# --- section 11: the stake and the client's samples ------------------------------------------

@pytest.mark.parametrize("catch_bps, samples, least_stake", [
    (5_000, 4, 2 * ETH + 1),                 # S_min 2.000 ETH: the least integer strictly above it
    (7_500, 6, 666_666_666_666_666_667),     # 0.667 ETH
    (8_750, 7, 285_714_285_714_285_715),     # 0.286 ETH
    (10_000, 8, 1),                          # any S > 0
])
def test_the_testnets_worked_example(catch_bps, samples, least_stake):
    job = terms(catch_bps=catch_bps)
    assert job.intervals == 8 and job.seat_pay == ETH
    assert client_samples(job) == samples
    assert catch_probability(8, 1, samples) == Fraction(catch_bps, 10_000)  # the table's "catch" column
    assert job_min_stake(job, TESTNET) == least_stake


def test_a_one_eth_stake_needs_p_star_of_two_thirds():
    assert job_min_stake(terms(catch_bps=6_667), TESTNET) <= ETH < job_min_stake(terms(catch_bps=6_666), TESTNET)
    assert client_samples(terms(catch_bps=6_667)) == 6
    check_open(terms(catch_bps=6_667), TESTNET)
    with pytest.raises(LocalProtocolError, match="below the least"):
        check_open(terms(catch_bps=6_666), TESTNET)


def test_the_mlp_job_at_p_star_nine_tenths():
    mlp = terms(steps=200, checkpoint_every=20, catch_bps=9_000)
    assert mlp.intervals == 10 and client_samples(mlp) == 9
    assert job_min_stake(mlp, TESTNET) == 222_222_222_222_222_223  # S >= 0.222 ETH


def test_the_least_stake_makes_cheating_a_loss_and_one_wei_less_does_not():
    # expected gain of an absolute cheater: (1 - p*)·p - p*·(1 - w)·S, negative iff S > S_min
    for catch_bps in (1, 333, 5_000, 6_667, 9_999, 10_000):
        for pay in (1, 7, ETH, 3 * ETH + 1):
            least = min_stake(pay, catch_bps, 5_000)
            gain = lambda s: Fraction(10_000 - catch_bps, 10_000) * pay - Fraction(catch_bps, 10_000) * Fraction(1, 2) * s  # noqa: E731
            assert gain(least) < 0 and gain(least - 1) >= 0


def test_partial_cheating_never_pays_even_with_no_stake():
    # section 11's relative rule: p_j >= j/C for every m >= 1 and j (the note checked C < 80)
    for intervals in range(1, 40):
        for samples in range(1, intervals + 1):
            for corrupted in range(1, intervals + 1):
                caught = 1 - Fraction(comb(intervals - corrupted, samples), comb(intervals, samples))
                assert caught >= Fraction(corrupted, intervals)


# --- section 3: allowances ------------------------------------------------------------------

def test_allowances_by_hand():
    job = terms(steps=200, checkpoint_every=20, step_millis=333, node_millis=41, state_bytes=3_000_001,
                evidence_bytes=500_000)
    a = allowances(job, TESTNET)
    # s·T·σ = 2·200·333 ms = 133.2 s -> 134 s; s·k·σ = 13.32 s -> 14 s; s·ρ = 82 ms -> 1 s
    assert (a.train, a.reveal, a.replay, a.list, a.interval) == (134 + 30, 30, 134 + 60, 60, 14 + 60)
    assert a.xfer_state == 4 + 60 and a.xfer_evidence == 1 + 60  # 3 000 001 B at 1 MB/s -> 4 s
    assert a.rule == 1 + 61 and a.draw == 2 * 2 + 30
    assert a.demand == 64 + 30 + MAX_DRAWS * (34 + 2 * 64)
    # T_game: E_list, two pick windows, the recompute queue C·⌈s·k·σ⌉ + 2Δ = 10·14 + 60 (above W_replay's 194:
    # each interval rounds up on its own), E_xfer(Y), the draws, the appeal window, the client's own E_rule
    assert a.game == 60 + 2 * 74 + (10 * 14 + 60) + 61 + 2 * MAX_DRAWS * (34 + 62) + 62 + 62
    drawn = allowances(replace(job, client_referees=False), TESTNET)
    assert a.game - drawn.game == a.rule  # drawn referees only: no client allowance before them


@pytest.mark.parametrize("steps, every, queued_work", [
    (10, 2, 5 * 2),     # T a multiple of k, s·k·σ whole: the queue is one replay
    (5, 2, 3 * 2),      # the last interval is one step long but queues a whole s·k·σ: 6 s, not 5
    (1, 2, 1 * 2),      # k > T: one interval, recomputed as k steps
    (3, 1, 3 * 1),      # s·σ = 0.6 s rounds up per interval: 3 s, not ⌈1.8⌉ = 2
])
def test_the_game_counts_the_recompute_queue_of_every_interval(steps, every, queued_work):
    step_millis = 300 if every == 1 else 500
    job = terms(steps=steps, checkpoint_every=every, step_millis=step_millis)
    a = allowances(job, TESTNET)
    assert queued_work == job.intervals * (a.interval - 60) >= a.replay - 60
    assert a.game == 60 + 2 * a.interval + (queued_work + 60) + a.xfer_evidence + 2 * MAX_DRAWS * (a.draw + a.rule) + 2 * a.rule


def test_allowances_round_up_to_the_second():
    exact = allowances(terms(steps=500, step_millis=1), TESTNET)      # 1000 ms exactly: 1 s
    above = allowances(terms(steps=501, step_millis=1), TESTNET)      # 1002 ms: 2 s
    assert exact.train == 1 + 30 and above.train == 2 + 30
    assert transfer_allowance(1_000_000, TESTNET) == 1 + 60 and transfer_allowance(1_000_001, TESTNET) == 2 + 60


def test_the_interval_bound_of_the_chain():
    # s·k·σ = 2·10·180 000 ms = 3600 s: at the bound; one ms more a step is refused
    allowances(terms(steps=10, checkpoint_every=10, step_millis=180_000), TESTNET)
    with pytest.raises(LocalProtocolError, match="chain's bound"):
        allowances(terms(steps=10, checkpoint_every=10, step_millis=180_001), TESTNET)


def test_terms_refuse_lists_above_1024_entries():
    terms(steps=1023, checkpoint_every=1)  # C + 1 = 1024
    with pytest.raises(LocalProtocolError, match="1025 entries"):
        terms(steps=1024, checkpoint_every=1)
    with pytest.raises(LocalProtocolError):
        terms(checkpoint_every=1025)
    terms(graph_nodes=1023)
    with pytest.raises(LocalProtocolError):
        terms(graph_nodes=1024)


@pytest.mark.parametrize("field, value", [
    ("steps", 0), ("steps", 2.0), ("catch_bps", 0), ("catch_bps", 10_001), ("providers_wanted", 0),
    ("price", -1), ("price", 1 << 128), ("client_referees", 1), ("step_millis", 1 << 32),
])
def test_terms_validate_themselves(field, value):
    with pytest.raises(LocalProtocolError, match=field):
        terms(**{field: value})


def test_settings_validate_themselves():
    with pytest.raises(LocalProtocolError, match="winner_share_bps"):
        replace(TESTNET, winner_share_bps=10_000)
    with pytest.raises(LocalProtocolError, match="margin"):
        replace(TESTNET, margin=0)


# --- section 5: deadlines and finalBy ---------------------------------------------------------

def test_final_by_adds_every_phase_to_accept_by():
    job = terms()
    a = allowances(job, TESTNET)
    d = job_deadlines(1_000, job, a)
    assert d.accept_by == 1_600
    assert d.final_by == 1_600 + a.train + a.reveal + a.replay + a.demand + a.interval + a.game == final_by(1_600, a)
    assert commit_by(2_000, a) == 2_000 + a.train and reveal_by(3_000, a) == 3_000 + a.reveal
    assert challenge_by(3_010, a) == 3_010 + a.replay


def test_the_recompute_queue_runs_games_of_one_root_one_after_another():
    a = allowances(terms(steps=200, checkpoint_every=20), TESTNET)
    nodes_by, busy = step_pick_deadline(100, 0, a, TESTNET)
    assert nodes_by == 100 + a.interval and busy == nodes_by - 60
    second_by, busy2 = step_pick_deadline(110, busy, a, TESTNET)  # another interval of the same root
    assert second_by == busy + a.interval and busy2 == second_by - 60
    assert later_step_pick_deadline(nodes_by - 60, nodes_by, TESTNET) == nodes_by  # the interval is recomputed once
    assert later_step_pick_deadline(nodes_by - 10, nodes_by, TESTNET) == nodes_by + 50  # never less than 2Δ


# --- sections 7, 8.5, 9: bonds -----------------------------------------------------------------

def test_bonds_by_hand():
    job = terms(steps=200, checkpoint_every=20, graph_nodes=53, providers_wanted=2, price=2 * ETH + 1,
                provider_stake=3 * ETH)
    b = bonds(job, TESTNET)
    g = ESTIMATED_GAS
    assert job.seat_pay == ETH  # floor(P / n): the odd wei goes back to the client
    assert b.open_game == 2 * GWEI * (g.list_base_steps + 21 * g.list_entry) + GWEI * g.resolve
    assert interval_value(job) == ETH // 10  # k·p / T = 20 ETH / 200, exact
    assert b.pick_step == 2 * (GWEI * (g.list_base_nodes + 54 * g.list_entry) + ETH // 10)
    assert b.pick_node == 10**15 + 2 * GWEI * g.post_evidence
    assert b.referee == 2 * ETH + 1 + 3 * ETH  # P + w·S·n = P + 0.5·3·2 ETH
    assert b.demand == 10**15 + GWEI * (g.call_witness + g.attest)
    assert b.appeal == 10**15 + GWEI * (g.appeal + g.draw + g.rule_appeal)


def test_bonds_round_up_and_payouts_round_down():
    job = terms(steps=3, checkpoint_every=1, price=10, provider_stake=7)
    assert interval_value(job) == 4  # k·p / T = 10 / 3 -> 4
    assert referee_bond(job, TESTNET) == 10 + 4  # w·S·n = 3.5 -> 4
    assert finder_reward(7, TESTNET) == 3  # w·S = 3.5 -> 3: a lock never pays out more than it holds
    assert finder_shares(ETH, TESTNET) == (ETH // 6,) * 3 and 3 * (ETH // 6) <= ETH // 2
    assert ceil_div(0, 5) == 0 and ceil_div(10, 5) == 2 and ceil_div(11, 5) == 3


def test_gas_figures_cover_section_13s_measurements():
    # scripts/bench_settlement.py on the embedded EVM, ListPosted carrying the list: mlp (k = 20, N = 53)
    # postSteps 134,479 and postNodes 181,940; tiny-gpt (k = 25, N = 471) postSteps 141,459 and postNodes 779,084
    for k, n, steps_gas, nodes_gas in ((20, 53, 134_479, 181_940), (25, 471, 141_459, 779_084)):
        assert steps_gas <= ESTIMATED_GAS.post_steps(k) <= 1.2 * steps_gas
        assert nodes_gas <= ESTIMATED_GAS.post_nodes(n) <= 1.2 * nodes_gas
    assert (ESTIMATED_GAS.open_game, ESTIMATED_GAS.pick_step, ESTIMATED_GAS.pick_node) >= (247_086, 238_784, 209_810)
    assert ESTIMATED_GAS.post_evidence >= 74_621 and ESTIMATED_GAS.resolve >= 190_091 + 79_569 + 65_430
    assert ESTIMATED_GAS.join >= 143_378


def test_the_stake_must_cover_a_won_games_reimbursements():
    job = terms(gas_price_cap=GWEI)
    assert stake_covers_reimbursements(job, TESTNET)
    demand = job.witness_fee + GWEI * (ESTIMATED_GAS.call_witness + ESTIMATED_GAS.attest)
    owed = GWEI * (ESTIMATED_GAS.path + 8 * ESTIMATED_GAS.join) + job.referee_fee + 8 * demand
    assert stake_covers_reimbursements(replace(job, provider_stake=2 * owed), TESTNET)
    assert not stake_covers_reimbursements(replace(job, provider_stake=2 * owed - 1), TESTNET)
    with pytest.raises(LocalProtocolError, match="reimbursements"):
        check_open(replace(job, catch_bps=10_000, provider_stake=2 * owed - 1), TESTNET)
    # With the fourth level on offer, a won duel's moves at the deepest tree (40 levels) come on top.
    dueling = replace(job, on_chain_step=True, provider_stake=2 * owed)
    duel = GWEI * (ESTIMATED_GAS.duel_base + 40 * ESTIMATED_GAS.duel_level)
    assert not stake_covers_reimbursements(dueling, TESTNET)
    assert stake_covers_reimbursements(replace(dueling, provider_stake=2 * (owed + duel)), TESTNET)
    assert not stake_covers_reimbursements(replace(dueling, provider_stake=2 * (owed + duel) - 1), TESTNET)


def test_a_provider_refuses_a_step_cost_it_cannot_meet():
    job = terms(step_millis=250)  # s·σ·0.8 = 400 ms
    assert accepts_step_cost(400, job) and not accepts_step_cost(401, job)
