"""The signed offer of settlement version 2 and the provider's checks before `accept` (economics §4).

One embedded chain with GavelSettlementV2: a client that opens jobs, an attacker that is a
registered client too, a provider. Each refusal is asserted by its reason.
"""
from __future__ import annotations

import dataclasses

import pytest
from eth_utils import keccak

from contracts import ETHER, EmbeddedChain, Role
from contracts.settlement_v2 import JobOpened, JobTerms, SettlementV2
from node.errors import BadMessage
from node.roles.v2.offer import (
    BAD_SIGNATURE, BAD_SPEC, HIGH_STAKE, LATE, LOW_PRICE, NOT_OPEN, OTHER_JOB_ID, OTHER_KEY, OTHER_REFEREE,
    OTHER_TERMS, SLOW_STEP, ChainView, OfferRefused, ProviderTerms, SignedOffer, chain_id_sync, check_offer,
    job_id_of, read_view_sync,
)
from protocol import DisputeRules, Identity, JobTerms as ProtocolTerms, SignedJobTerms

STEPS, EVERY, NODES = 8, 2, 20
PRICE, STAKE = 2 * ETHER, ETHER
CHEAP = ProviderTerms(price_per_step=10**15)


def spec_of(identity: Identity, nonce: int = 7) -> bytes:
    terms = ProtocolTerms(client=identity.node_id, config_hash=keccak(b"config"), program_root=keccak(b"program"),
                          program_size=NODES + 1, data_root=keccak(b"data"), initial_state=keccak(b"state 0"),
                          steps=STEPS, checkpoint_every=EVERY, payment=PRICE, stake=STAKE, deadline=0, nonce=nonce,
                          rules=DisputeRules(move_timeout_ms=10_000, clock_ms=60_000))
    return SignedJobTerms.sign(identity, terms).encode()


def chain_terms(identity: Identity, spec: bytes, **changes) -> JobTerms:
    values = dict(nonce=7, client_key=identity.node_id, client_referees=True, spec_hash=keccak(spec),
                  initial_state=keccak(b"state 0"), steps=STEPS, checkpoint_every=EVERY, graph_nodes=NODES,
                  step_millis=500, node_millis=50, state_bytes=10**5, evidence_bytes=10**4, providers_wanted=1,
                  catch_bps=9_000, accept_window=600, price=PRICE, provider_stake=STAKE, gas_price_cap=0,
                  referee_fee=0, witness_fee=0)
    values.update(changes)
    return JobTerms(**values)


@dataclasses.dataclass
class World:
    chain: EmbeddedChain
    settlement: SettlementV2
    client: str
    attacker: str
    provider: str
    client_id: Identity
    attacker_id: Identity

    def as_(self, account: str) -> SettlementV2:
        return self.settlement.connect(account)

    def offer(self, terms: JobTerms, spec: bytes, *, identity: Identity | None = None, account: str | None = None,
              contract: str | None = None) -> SignedOffer:
        return SignedOffer.sign(identity or self.client_id, spec=spec, terms=terms, chain_id=chain_id_sync(self.chain),
                                contract=contract or self.settlement.address, client_account=account or self.client)

    def view(self, offer: SignedOffer) -> ChainView:
        return read_view_sync(self.as_(self.provider), offer)


@pytest.fixture(scope="module")
def stage():
    chain = EmbeddedChain()
    deployer, client, attacker, provider = chain.accounts[:4]
    s = SettlementV2.deploy(chain, account=deployer)
    world = World(chain, s, client, attacker, provider, Identity(b"\x01" * 32), Identity(b"\x02" * 32))
    world.as_(client).register(world.client_id.node_id, Role.CLIENT, stake=10 * ETHER)
    world.as_(attacker).register(world.attacker_id.node_id, Role.CLIENT, stake=10 * ETHER)
    world.as_(provider).register(b"\x03" * 32, Role.PROVIDER, stake=3 * ETHER)
    return world, chain.snapshot()


@pytest.fixture
def world(stage):
    w, mark = stage
    w.chain.revert(mark)
    return w


def opened(world: World, **changes) -> tuple[SignedOffer, bytes]:
    spec = spec_of(world.client_id)
    terms = chain_terms(world.client_id, spec, **changes)
    job_id = world.as_(world.client).open_job(terms, spec).one(JobOpened).job_id
    return world.offer(terms, spec), job_id


def refusal(world: World, offer: SignedOffer, *, mine: ProviderTerms = CHEAP, millis: int = 100) -> str:
    with pytest.raises(OfferRefused) as refused:
        check_offer(offer, world.view(offer), mine, millis)
    return refused.value.reason


def test_a_good_offer_names_the_contracts_job_id_and_passes(world):
    offer, job_id = opened(world)
    assert offer.job_id == job_id == world.settlement.job_id_of(world.client, 7)
    check_offer(offer, world.view(offer), CHEAP, 100)
    again = SignedOffer.decode(offer.encode())
    assert again == offer and again.verify()


def test_a_forged_or_altered_offer_is_refused_for_its_signature(world):
    offer, _ = opened(world)
    assert refusal(world, dataclasses.replace(offer, signature=bytes(64))) == BAD_SIGNATURE
    # another account named in a validly encoded offer breaks the client's signature
    assert refusal(world, dataclasses.replace(offer, client_account=world.attacker)) == BAD_SIGNATURE


def test_a_spec_that_is_not_the_signed_terms_hash_is_refused(world):
    spec = spec_of(world.client_id)
    other = spec_of(world.client_id, nonce=8)  # a different spec: its keccak is not terms.spec_hash
    terms = chain_terms(world.client_id, spec)
    world.as_(world.client).open_job(terms, spec)
    assert refusal(world, world.offer(terms, other)) == BAD_SPEC


def test_an_offer_for_another_contract_is_refused_by_its_job_id(world):
    offer, _ = opened(world)
    elsewhere = world.offer(offer.terms, offer.spec, contract="0x" + "11" * 20)
    assert refusal(world, elsewhere) == OTHER_JOB_ID


def test_a_job_nobody_opened_is_not_open(world):
    spec = spec_of(world.client_id)
    assert refusal(world, world.offer(chain_terms(world.client_id, spec), spec)) == NOT_OPEN


def test_terms_other_than_the_opened_ones_are_refused(world):
    offer, _ = opened(world)
    higher = dataclasses.replace(offer.terms, price=PRICE * 2)  # signed, but not what the job escrows
    assert refusal(world, world.offer(higher, offer.spec)) == OTHER_TERMS


def test_an_offer_signed_by_a_key_the_account_did_not_register_is_refused(world):
    # openJob ties the terms' key to the caller's registered key, so a job on chain carries the
    # registered key; the check still stands on its own for a key changed after the job opened
    offer, _ = opened(world)
    view = dataclasses.replace(world.view(offer), client_key=world.attacker_id.node_id)
    with pytest.raises(OfferRefused) as refused:
        check_offer(offer, view, CHEAP, 100)
    assert refused.value.reason == OTHER_KEY
    # an offer for the client's job signed by another identity names other terms (its key)
    spec = spec_of(world.attacker_id)
    by_attacker = SignedOffer.sign(world.attacker_id, spec=spec, terms=dataclasses.replace(
        offer.terms, client_key=world.attacker_id.node_id, spec_hash=keccak(spec)), chain_id=offer.chain_id,
        contract=offer.contract, client_account=world.client)
    assert refusal(world, by_attacker) == OTHER_TERMS


def test_the_referee_mode_is_the_signed_one(world):
    offer, _ = opened(world, client_referees=False)
    view = world.view(offer)
    flipped = dataclasses.replace(view, job=dataclasses.replace(view.job, client_referees=True))
    with pytest.raises(OfferRefused) as refused:
        check_offer(offer, flipped, CHEAP, 100)
    assert refused.value.reason == OTHER_REFEREE


def test_price_stake_step_time_and_window_are_the_providers_call(world):
    offer, _ = opened(world)
    assert refusal(world, offer, mine=ProviderTerms(price_per_step=PRICE)) == LOW_PRICE
    assert refusal(world, offer, mine=ProviderTerms(price_per_step=1, max_stake=STAKE - 1)) == HIGH_STAKE
    # σ = 500 ms: s·σ·0.8 = 800 ms is the most a provider may measure
    check_offer(offer, world.view(offer), CHEAP, 800)
    assert refusal(world, offer, millis=801) == SLOW_STEP
    world.chain.advance_time(601)
    assert refusal(world, offer) == LATE


def test_a_front_runner_with_the_victims_nonce_opens_a_job_no_offer_names(world):
    spec = spec_of(world.client_id)
    victim_terms = chain_terms(world.client_id, spec)
    # the attacker saw the victim's terms in the mempool and opens first, under its own account
    # and key (openJob refuses the victim's key from the attacker's account)
    attacker_spec = spec_of(world.attacker_id)
    stolen = chain_terms(world.attacker_id, attacker_spec, price=PRICE)
    attacker_job = world.as_(world.attacker).open_job(stolen, attacker_spec).one(JobOpened).job_id
    victim_job = world.as_(world.client).open_job(victim_terms, spec).one(JobOpened).job_id
    assert attacker_job != victim_job  # ids are keyed by the caller
    victim_offer = world.offer(victim_terms, spec)
    check_offer(victim_offer, world.view(victim_offer), CHEAP, 100)  # the victim's job is still good
    # the victim's signed offer re-addressed to the attacker's job: the id is the attacker's,
    # but the stored terms hash is not the signed terms'
    readdressed = world.offer(victim_terms, spec, account=world.attacker)
    assert readdressed.job_id == attacker_job
    assert refusal(world, readdressed) == OTHER_TERMS
    # and the attacker cannot sign the victim's terms as its own: its key is not in them
    forged = SignedOffer.sign(world.attacker_id, spec=spec, terms=victim_terms, chain_id=victim_offer.chain_id,
                              contract=world.settlement.address, client_account=world.attacker)
    assert refusal(world, forged) == BAD_SIGNATURE


def test_malformed_offers_are_bad_messages():
    for data in (b"\xc1", b"\x93\x01\x02\x03", SignedOffer.__name__.encode()):
        with pytest.raises(BadMessage):
            SignedOffer.decode(data)
    from node.framing import pack

    with pytest.raises(BadMessage):
        SignedOffer.decode(pack({"spec": b"", "terms": b"\x00" * 10, "chain_id": 1, "contract": "0x" + "00" * 20,
                                 "client_account": "0x" + "00" * 20, "sig": b""}))


def test_the_job_id_is_the_contracts(world):
    assert job_id_of(chain_id_sync(world.chain), world.settlement.address, world.client, 99) == \
        world.settlement.job_id_of(world.client, 99)


def _graph():
    """A step graph as `protocol.element_specs` reads it: a batch leaf and a relu of it."""
    from types import SimpleNamespace

    x = SimpleNamespace(id=0, op="leaf", attrs={"name": "x", "role": "batch"}, inputs=(), shape=(2, 3),
                        dtype="float32", is_leaf=True)
    relu = SimpleNamespace(id=1, op="relu", attrs={}, inputs=(0,), shape=(2, 3), dtype="float32", is_leaf=False)
    return SimpleNamespace(nodes=(x, relu))


def test_an_element_spec_root_is_zero_or_the_bundles_graphs(world):
    """The fourth level is played on the program the terms' elementSpecRoot names: a provider takes
    a seat only where that root is none or its own graph's (check_element_specs)."""
    from types import SimpleNamespace

    from node.roles.v2.offer import OTHER_SPECS, check_element_specs, element_specs_of

    training = SimpleNamespace(graph=_graph())
    root = element_specs_of(training)
    offer, _ = opened(world, element_spec_root=root)
    check_offer(offer, world.view(offer), CHEAP, 100)  # the root is part of the signed terms and their hash
    check_element_specs(offer.terms, training)
    check_element_specs(dataclasses.replace(offer.terms, element_spec_root=bytes(32)), SimpleNamespace(graph=None))
    for terms, job in ((dataclasses.replace(offer.terms, element_spec_root=keccak(b"made up")), training),
                       (offer.terms, SimpleNamespace(graph=None))):  # a rounding-log job has no element programs
        with pytest.raises(OfferRefused) as refused:
            check_element_specs(terms, job)
        assert refused.value.reason == OTHER_SPECS


def test_the_client_offers_the_fourth_level_only_when_asked(world, tmp_path):
    """terms_for puts the job graph's element spec root in the terms with `on_chain_step`, zero without."""
    from node.roles.v2.client import CATCH_BPS, terms_for
    from node.roles.v2.offer import check_element_specs, element_specs_of
    from node.training_oracle import job_terms
    from repops_cupy.jobspec import load_job
    from repops_cupy.train import TrainingProgram
    from tests.node.test_dispute_sim import JOB

    path = tmp_path / "tiny-mlp.toml"
    path.write_text(JOB)
    training = TrainingProgram(load_job(path))
    signed = job_terms(training, world.client_id, rules=DisputeRules(10_000, 60_000), nonce=3)
    made = {flag: terms_for(training, signed, nonce=3, providers=1, price=PRICE, stake=STAKE, catch_bps=CATCH_BPS,
                            accept_window=600, settings=world.settlement.chain_settings(), on_chain_step=flag)
            for flag in (False, True)}
    assert made[False].element_spec_root == bytes(32)
    assert made[True].element_spec_root == element_specs_of(training) != bytes(32)
    assert dataclasses.replace(made[True], element_spec_root=bytes(32)) == made[False]
    check_element_specs(made[True], training)
