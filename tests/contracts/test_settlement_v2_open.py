"""openJob of version 2: ids keyed by the client's account, terms bound by hash, every bound of
section 3 and the least stake of section 11; the views compared with protocol/economics.py."""

import pytest
from eth_utils import keccak

from contracts import ETHER, Role
from contracts.settlement_v2 import JobOpened, JobStatus
from protocol import economics

from .settlement_world import ed25519_key, reverts
from .settlement_world_v2 import CLIENT_STAKE, PRICE, SPEC

pytestmark = pytest.mark.settlement


def test_open_job_escrows_the_price_and_stores_the_terms_hash(cast_v2):
    w = cast_v2
    terms = w.terms()
    books = w.assert_every_coin_accounted()
    result = w.as_(w.client).open_job(terms, SPEC)
    jid = w.settlement.job_id_of(w.client, terms.nonce)
    assert result.events == (JobOpened(jid, w.client, terms.terms_hash, terms, SPEC),)
    now = w.chain.now()
    job = w.settlement.job(jid)
    assert (job.client, job.status, job.price, job.provider_stake, job.terms_hash, job.initial_state) == (
        w.client, JobStatus.OPEN, PRICE, terms.provider_stake, terms.terms_hash, terms.initial_state)
    assert job.trace_length == terms.steps + 1 and job.accept_by == now + terms.accept_window
    allowed = economics.allowances(terms.economic_terms(), w.settlement.chain_settings())
    assert job.final_by == economics.job_deadlines(now, terms.economic_terms(), allowed).final_by
    assert w.settlement.balance() == books["balance"] + PRICE
    w.opened[jid] = terms
    w.assert_every_coin_accounted()


def test_the_job_id_is_keyed_by_chain_contract_client_and_nonce(cast_v2):
    w = cast_v2
    jid = w.open_job(nonce=7)
    from eth_abi import encode
    chain_id = 131277322940537  # eth-tester's chain id
    assert jid == keccak(encode(["uint256", "address", "address", "uint64"],
                                [chain_id, w.settlement.address, w.client, 7]))


def test_front_running_a_nonce_gives_the_attacker_another_id(cast_v2):
    """Section 12, front-running the job id: the attacker's job is its own, the victim's opens."""
    w = cast_v2
    attacker = w.outsider
    w.as_(attacker).register(ed25519_key("attacker"), Role.CLIENT, stake=CLIENT_STAKE)  # its referee bond
    victim_terms = w.terms(nonce=42)
    # The attacker copies the victim's terms; its own key is the only one it can open them under.
    with reverts("JobWrongClientKey", clientKey=w.client_key):
        w.as_(attacker).open_job(victim_terms, SPEC)
    stolen = w.as_(attacker).open_job(w.terms(nonce=42, client_key=ed25519_key("attacker")), SPEC)
    victim = w.as_(w.client).open_job(victim_terms, SPEC)
    theirs, ours = stolen.one(JobOpened), victim.one(JobOpened)
    assert theirs.job_id != ours.job_id and ours.job_id == w.settlement.job_id_of(w.client, 42)
    assert w.settlement.job(ours.job_id).client == w.client
    assert w.settlement.job(theirs.job_id).client == attacker


def test_a_nonce_opens_one_job(cast_v2):
    w = cast_v2
    jid = w.open_job(nonce=3)
    with reverts("JobExists", jobId=jid):
        w.open_job(nonce=3)


def test_the_escrow_is_the_price_exactly(cast_v2):
    w = cast_v2
    terms = w.terms()
    data = w.settlement.abi.encode_call("openJob", terms.as_abi(), SPEC)
    from contracts.chain import RevertData
    with pytest.raises(RevertData) as refused:
        w.chain.transact(w.client, w.settlement.address, data, value=PRICE - 1, gas=500_000)
    error = w.settlement.abi.revert(refused.value.data)
    assert error.name == "JobWrongPayment" and error.arguments == {"sent": PRICE - 1, "price": PRICE}


def test_the_spec_must_hash_to_the_terms(cast_v2):
    w = cast_v2
    terms = w.terms()
    with reverts("JobWrongSpec", specHash=terms.spec_hash):
        w.as_(w.client).open_job(terms, SPEC + b"!")


@pytest.mark.parametrize("overrides, error", [
    (dict(providers_wanted=0), "JobInvalidProviderCount"),
    (dict(providers_wanted=17), "JobInvalidProviderCount"),
    (dict(steps=0), "JobInvalidShape"),
    (dict(checkpoint_every=0), "JobInvalidShape"),
    (dict(checkpoint_every=1025, steps=2050), "JobInvalidShape"),
    (dict(steps=1024, checkpoint_every=1), "JobInvalidShape"),        # C+1 = 1025 entries
    (dict(graph_nodes=0), "JobInvalidShape"),
    (dict(graph_nodes=1024), "JobInvalidShape"),                      # N+1 = 1025 entries
    (dict(step_millis=0), "JobZeroCost"),
    (dict(node_millis=0), "JobZeroCost"),
    (dict(state_bytes=0), "JobZeroCost"),
    (dict(evidence_bytes=0), "JobZeroCost"),
    (dict(accept_window=0), "JobZeroAcceptWindow"),
    (dict(catch_bps=0), "JobInvalidCatchRate"),
    (dict(catch_bps=10_001), "JobInvalidCatchRate"),
    (dict(checkpoint_every=1000, steps=1000, step_millis=1_801), "JobIntervalTooLong"),  # s·k·σ = 3602 s
    (dict(evidence_bytes=2**63), "JobTooLong"),                                         # T_game ≫ 2^32 s
    (dict(state_bytes=2**63), "JobTooLong"),                                            # T_demand ≫ 2^32 s
    (dict(provider_stake=333_333_333_333_333_333), "JobStakeBelowMinimum"),             # S_min exactly
])
def test_terms_outside_the_bounds_are_refused(cast_v2, overrides, error):
    w = cast_v2
    with reverts(error):
        w.open_job(**overrides)


def test_the_stake_must_be_strictly_above_s_min(cast_v2):
    w = cast_v2
    terms = w.terms()
    least = w.settlement.min_stake(terms)
    assert least == economics.job_min_stake(terms.economic_terms(), w.settlement.chain_settings())
    with reverts("JobStakeBelowMinimum", stake=least - 1, minimum=least):
        w.open_job(provider_stake=least - 1)
    w.open_job(provider_stake=least)


@pytest.mark.parametrize("fourth_level", [False, True])
def test_the_stake_must_cover_a_won_paths_reimbursements(cast_v2, fourth_level):
    """S·(1 − w) ≥ γ·(G_path + MAX_JOINERS·G_join) + f_R + MAX_REIMBURSED_DEMANDS·D (D = f_W + γ·(G_callWitness
    + G_attest), f_W = 0 here), as protocol.economics checks it; terms with an elementSpecRoot add a won
    duel's moves at the deepest tree, γ·G_duel(MAX_STEP_DEPTH)."""
    w = cast_v2
    settings = w.settlement.chain_settings()
    g = economics.ESTIMATED_GAS
    stake = 10 * ETHER
    specs = {"element_spec_root": b"\x01" * 32} if fourth_level else {}
    assert w.settlement.setting("MAX_REIMBURSED_DEMANDS") == economics.MAX_REIMBURSED_DEMANDS
    # The largest γ the stake covers: S·(1 − w) = γ·gas + f_R exactly.
    gas = g.path + economics.MAX_JOINERS * g.join + economics.MAX_REIMBURSED_DEMANDS * (g.call_witness + g.attest)
    gas += g.duel(economics.MAX_STEP_DEPTH) if fourth_level else 0
    gamma = (stake * (10_000 - settings.winner_share_bps) // 10_000) // gas
    fee = stake * (10_000 - settings.winner_share_bps) // 10_000 - gamma * gas
    covered = w.terms(provider_stake=stake, gas_price_cap=gamma, referee_fee=fee, **specs)
    assert economics.stake_covers_reimbursements(covered.economic_terms(), settings)
    short = w.terms(nonce=2, provider_stake=stake, gas_price_cap=gamma, referee_fee=fee + 1, **specs)
    assert not economics.stake_covers_reimbursements(short.economic_terms(), settings)
    with reverts("JobStakeBelowReimbursements", stake=stake, owed=gamma * gas + fee + 1):
        w.open_job(nonce=2, provider_stake=stake, gas_price_cap=gamma, referee_fee=fee + 1, **specs)
    w.as_(w.client).add_stake(10 * ETHER)  # the referee bond grows with S
    w.open_job(provider_stake=stake, gas_price_cap=gamma, referee_fee=fee, **specs)


TERMS_CASES = [
    dict(),
    dict(steps=8, checkpoint_every=1, providers_wanted=1, price=ETHER, catch_bps=5_000),
    dict(steps=8, checkpoint_every=1, providers_wanted=1, price=ETHER, catch_bps=7_500),
    dict(steps=8, checkpoint_every=1, providers_wanted=1, price=ETHER, catch_bps=8_750),
    dict(steps=8, checkpoint_every=1, providers_wanted=1, price=ETHER, catch_bps=10_000),
    dict(steps=200, checkpoint_every=20, graph_nodes=53, price=7 * ETHER + 3, providers_wanted=3, catch_bps=9_000),
    dict(steps=7, checkpoint_every=3, step_millis=333, client_referees=False),  # T not a multiple of k; drawn referees
    dict(steps=3, checkpoint_every=5, step_millis=1_001),  # k > T
    dict(steps=1500, checkpoint_every=25, graph_nodes=471, step_millis=333, node_millis=7, state_bytes=123_456_789,
         evidence_bytes=9_999_999, providers_wanted=16, price=10**30, catch_bps=1),
    dict(element_spec_root=b"\x11" * 32),  # the fourth level offered: its duels outlast the referees
    dict(element_spec_root=b"\x11" * 32, node_millis=10**6, client_referees=False),  # the referees outlast them
]


@pytest.mark.parametrize("overrides", TERMS_CASES)
def test_allowances_and_least_stake_equal_protocol_economics(cast_v2, overrides):
    w = cast_v2
    terms = w.terms(**overrides)
    settings = w.settlement.chain_settings()
    assert w.settlement.allowances_of(terms) == economics.allowances(terms.economic_terms(), settings)
    assert w.settlement.min_stake(terms) == economics.job_min_stake(terms.economic_terms(), settings)


def test_section_11_worked_example(cast_v2):
    """8 steps, one seat, P = 1 ETH, w = 0.5: S_min is 2, 2/3 and 2/7 ETH at p* = 0.5, 0.75, 0.875."""
    w = cast_v2
    for catch_bps, s_min in ((5_000, 2 * ETHER), (7_500, 2 * ETHER // 3), (8_750, 2 * ETHER // 7)):
        terms = w.terms(steps=8, providers_wanted=1, price=ETHER, catch_bps=catch_bps)
        assert w.settlement.min_stake(terms) == s_min + 1
    assert w.settlement.min_stake(w.terms(steps=8, providers_wanted=1, price=ETHER, catch_bps=10_000)) == 1


def test_deadlines_of_a_job_follow_its_life(cast_v2):
    w = cast_v2
    jid = w.open_job()
    opened_at = w.chain.now()
    terms = w.opened[jid]
    allowed = w.settlement.allowances_of(terms)
    d = w.settlement.deadlines(jid)
    assert (d.accept_by, d.commit_by, d.reveal_from, d.reveal_by, d.challenge_end) == (
        opened_at + terms.accept_window, 0, 0, 0, 0)
    assert d.final_by == economics.final_by(d.accept_by, allowed)
    for p in w.providers[:2]:
        w.as_(p).accept(jid)
    filled_at = w.chain.now()
    d = w.settlement.deadlines(jid)
    assert d.commit_by == economics.commit_by(filled_at, allowed)
    assert (d.reveal_from, d.reveal_by) == (d.commit_by, d.commit_by + allowed.reveal)  # provisional
    with reverts("JobNotFound"):
        w.settlement.deadlines(b"\1" * 32)
