"""The world of the version 2 tests: a fresh embedded EVM with GavelSettlementV2, a registered cast, helpers.

Chain settings (Δ = 30 s) and the default terms (10 steps, checkpoint every step: a trace of
11 state hashes; two seats; p* = 0.9) keep every window short. Helpers move a job to each
point of its life; `ledger` counts every coin.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pytest
from eth_utils import keccak

from contracts import ETHER, EmbeddedChain, Role
from contracts.settlement_v2 import JobOpened, JobTerms, SettlementV2, commitment_of, trace_root

from .settlement_world import MIN_STAKE, NODE_STAKE, UNBONDING_DELAY, WINNER_SHARE_BPS, ed25519_key

MARGIN, BANDWIDTH, BLOCK_SECONDS, MAX_INTERVAL_SECONDS = 30, 10**6, 12, 3_600
PRICE = 3 * ETHER + 1  # not divisible by 2: the remainder goes back to the client
PROVIDER_STAKE = ETHER
CLIENT_STAKE = 10 * ETHER  # covers the referee bond P + w·S·n the client locks at openJob when it referees
STEPS = 10
BURN = "0x000000000000000000000000000000000000dEaD"
SPEC = b"protocol JobTerms: program, data and config roots " * 8
INITIAL_STATE = keccak(b"initial state")


def salt(label: str) -> bytes:
    return hashlib.sha256(b"salt: " + label.encode()).digest()


def trace_of(label: str, steps: int = STEPS) -> list[bytes]:
    """A trace of `steps` + 1 state hashes from the initial state (one checkpoint a step)."""
    return [INITIAL_STATE] + [keccak(f"{label} state {i}".encode()) for i in range(1, steps + 1)]


def default_terms(client_key: bytes, **overrides) -> JobTerms:
    values = dict(
        nonce=1, client_key=client_key, client_referees=True, spec_hash=keccak(SPEC), initial_state=INITIAL_STATE,
        steps=STEPS, checkpoint_every=1, graph_nodes=53, step_millis=1_000, node_millis=100, state_bytes=10**6,
        evidence_bytes=10**5, providers_wanted=2, catch_bps=9_000, accept_window=100, price=PRICE,
        provider_stake=PROVIDER_STAKE, gas_price_cap=10**9, referee_fee=0, witness_fee=0)
    values.update(overrides)
    return JobTerms(**values)


@dataclass
class WorldV2:
    """One chain, one contract, and the cast: a client, three providers, a keeper (anyone), an outsider."""

    chain: EmbeddedChain
    settlement: SettlementV2
    deployer: str
    client: str
    providers: list[str]
    keeper: str
    outsider: str
    client_key: bytes = ed25519_key("client")
    opened: dict[bytes, JobTerms] = field(default_factory=dict)
    others: list[str] = field(default_factory=list)  # accounts made by a test (referees), in the books too

    def as_(self, account: str) -> SettlementV2:
        return self.settlement.connect(account)

    def terms(self, **overrides) -> JobTerms:
        return default_terms(overrides.pop("client_key", self.client_key), **overrides)

    def open_job(self, **overrides) -> bytes:
        terms = self.terms(**overrides)
        jid = self.as_(self.client).open_job(terms, SPEC).one(JobOpened).job_id
        self.opened[jid] = terms
        return jid

    def seated_job(self, seats: int = 2, **overrides) -> bytes:
        jid = self.open_job(providers_wanted=seats, **overrides)
        for provider in self.providers[:seats]:
            self.as_(provider).accept(jid)
        return jid

    def commit(self, jid: bytes, provider: str, trace: list[bytes], label: str | None = None) -> bytes:
        """Commits `provider` to `trace` with the salt of `label` (default: the provider's own)."""
        commitment = commitment_of(jid, provider, trace_root(trace), salt(label or provider))
        self.as_(provider).commit(jid, commitment)
        return commitment

    def committed_job(self, labels: tuple[str, ...] = ("a", "b"), **overrides) -> bytes:
        jid = self.seated_job(len(labels), **overrides)
        for provider, label in zip(self.providers, labels):
            self.commit(jid, provider, trace_of(label))
        return jid

    def reveal(self, jid: bytes, provider: str, trace: list[bytes]):
        return self.as_(provider).reveal(jid, trace, salt(provider))

    def revealed_job(self, labels: tuple[str, ...] = ("a", "b"), **overrides) -> bytes:
        jid = self.committed_job(labels, **overrides)
        for provider, label in zip(self.providers, labels):
            self.reveal(jid, provider, trace_of(label))
        return jid

    def mine_at(self, timestamp: int) -> None:
        """Mines a block at `timestamp`: the next transaction lands at timestamp + 1."""
        self.chain.mine(timestamp)

    def ledger(self) -> dict[str, int]:
        """Where the contract's coins are: stakes, credits, escrow of unsettled jobs; and what was burned."""
        s = self.settlement
        cast = [self.deployer, self.client, *self.providers, self.keeper, self.outsider, *self.others]
        unsettled = [jid for jid in self.opened if s.job(jid).status in (1, 2)]
        return {
            "balance": s.balance(),
            "stakes": sum(s.node(a).stake for a in cast),
            "credits": sum(s.credit_of(a) for a in cast),
            "escrow": sum(s.job(jid).price for jid in unsettled),
            "burned": self.chain.balance(BURN),
        }

    def assert_every_coin_accounted(self) -> dict[str, int]:
        books = self.ledger()
        assert books["balance"] == books["stakes"] + books["credits"] + books["escrow"], books
        return books


@dataclass
class _StageV2:
    world: WorldV2
    deployed: object
    registered: object


@pytest.fixture(scope="session")
def _stage_v2() -> _StageV2:
    chain = EmbeddedChain()
    deployer, client, p1, p2, p3, keeper, outsider = chain.accounts[:7]
    settlement = SettlementV2.deploy(
        chain, account=deployer, unbonding_delay=UNBONDING_DELAY, min_stake=MIN_STAKE,
        winner_share_bps=WINNER_SHARE_BPS, margin=MARGIN, bandwidth=BANDWIDTH, block_seconds=BLOCK_SECONDS,
        max_interval_seconds=MAX_INTERVAL_SECONDS)
    world = WorldV2(chain, settlement, deployer, client, [p1, p2, p3], keeper, outsider)
    deployed = chain.snapshot()
    world.as_(client).register(world.client_key, Role.CLIENT, stake=CLIENT_STAKE)
    for i, provider in enumerate(world.providers):
        world.as_(provider).register(ed25519_key(f"provider {i}"), Role.PROVIDER, stake=NODE_STAKE)
    return _StageV2(world, deployed, chain.snapshot())


@pytest.fixture
def world_v2(_stage_v2: _StageV2) -> WorldV2:
    """Version 2 just deployed, no node registered (a rolled-back shared chain)."""
    _stage_v2.world.chain.revert(_stage_v2.deployed)
    _stage_v2.world.opened.clear()
    _stage_v2.world.others.clear()
    return _stage_v2.world


@pytest.fixture
def cast_v2(_stage_v2: _StageV2) -> WorldV2:
    """Version 2 with the client and every provider registered."""
    _stage_v2.world.chain.revert(_stage_v2.registered)
    _stage_v2.world.opened.clear()
    _stage_v2.world.others.clear()
    return _stage_v2.world

