"""The settlement tests' world: a fresh embedded EVM with the contract deployed, named accounts, helpers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pytest

from contracts import ETHER, ContractRevert, EmbeddedChain, Role, Settlement

UNBONDING_DELAY = 1_000
MIN_STAKE = ETHER
WINNER_SHARE_BPS = 5_000
NODE_STAKE = 5 * ETHER
PRICE = 3 * ETHER + 1  # not divisible by 2: the remainder goes back to the client
PROVIDER_STAKE = ETHER
ACCEPT_WINDOW, COMMIT_WINDOW, CHALLENGE_WINDOW, RULING_PERIOD = 100, 200, 300, 50


def job_id(label: str) -> bytes:
    """A 32-byte job id standing for the hash of a signed job spec."""
    return hashlib.sha256(b"job spec: " + label.encode()).digest()


def root(label: str) -> bytes:
    return hashlib.sha256(b"trace root: " + label.encode()).digest()


def ed25519_key(label: str) -> bytes:
    return hashlib.sha256(b"ed25519 public key: " + label.encode()).digest()


@dataclass
class World:
    """One chain, one contract, and the cast: a client, three providers, an auditor, an outsider."""

    chain: EmbeddedChain
    settlement: Settlement
    deployer: str
    client: str
    referee: str
    providers: list[str]
    auditor: str
    outsider: str
    jobs: dict[bytes, dict[str, int]] = field(default_factory=dict)

    def as_(self, account: str) -> Settlement:
        return self.settlement.connect(account)

    def register_cast(self) -> None:
        for i, provider in enumerate(self.providers):
            self.as_(provider).register(ed25519_key(f"provider {i}"), Role.PROVIDER, stake=NODE_STAKE)
        self.as_(self.auditor).register(ed25519_key("auditor"), Role.AUDITOR, stake=NODE_STAKE)

    def open_job(self, label: str = "job", *, providers_wanted: int = 2, referee: str | None = None,
                 price: int = PRICE) -> bytes:
        now = self.chain.now()
        deadlines = {
            "accept_by": now + ACCEPT_WINDOW,
            "commit_by": now + COMMIT_WINDOW,
            "challenge_by": now + CHALLENGE_WINDOW,
        }
        jid = job_id(label)
        self.as_(self.client).open_job(
            jid,
            price=price,
            providers_wanted=providers_wanted,
            provider_stake=PROVIDER_STAKE,
            ruling_period=RULING_PERIOD,
            referee=referee,
            **deadlines,
        )
        self.jobs[jid] = deadlines
        return jid

    def seated_job(self, label: str = "job", *, providers_wanted: int = 2, referee: str | None = None) -> bytes:
        jid = self.open_job(label, providers_wanted=providers_wanted, referee=referee)
        for provider in self.providers[:providers_wanted]:
            self.as_(provider).accept(jid)
        return jid

    def committed_job(self, label: str = "job", roots: tuple[str, ...] = ("a", "b"),
                      referee: str | None = None) -> bytes:
        jid = self.seated_job(label, providers_wanted=len(roots), referee=referee)
        for provider, name in zip(self.providers, roots):
            self.as_(provider).commit(jid, root(name))
        return jid

    def mine_at(self, timestamp: int) -> None:
        """Mines a block at `timestamp`: the next transaction lands at timestamp + 1."""
        self.chain.mine(timestamp)

    def fund_of(self, account: str) -> tuple[int, int, int]:
        """(stake, locked, credit) of an account."""
        node = self.settlement.node(account)
        return node.stake, node.locked, self.settlement.credit_of(account)


@dataclass
class _Stage:
    """One chain shared by the tests of a session, rolled back to a marked state before each test."""

    world: World
    deployed: object
    registered: object


@pytest.fixture(scope="session")
def _stage() -> _Stage:
    chain = EmbeddedChain()
    deployer, client, referee, p1, p2, p3, auditor, outsider = chain.accounts[:8]
    settlement = Settlement.deploy(
        chain, account=deployer, unbonding_delay=UNBONDING_DELAY, min_stake=MIN_STAKE, winner_share_bps=WINNER_SHARE_BPS
    )
    world = World(chain, settlement, deployer, client, referee, [p1, p2, p3], auditor, outsider)
    deployed = chain.snapshot()
    world.register_cast()
    registered = chain.snapshot()
    return _Stage(world, deployed, registered)


@pytest.fixture
def world(_stage: _Stage) -> World:
    """The contract just deployed, no node registered (a rolled-back shared chain)."""
    _stage.world.chain.revert(_stage.deployed)
    _stage.world.jobs.clear()
    return _stage.world


@pytest.fixture
def cast(_stage: _Stage) -> World:
    """The world with every provider and the auditor registered."""
    _stage.world.chain.revert(_stage.registered)
    _stage.world.jobs.clear()
    return _stage.world


def reverts(name: str, **arguments):
    """pytest.raises for a ContractRevert with this custom error name (and these arguments, if given)."""
    return _Reverts(name, arguments)


class _Reverts:
    def __init__(self, name: str, arguments: dict):
        self.name = name
        self.arguments = arguments
        self._raises = pytest.raises(ContractRevert)

    def __enter__(self):
        self.info = self._raises.__enter__()
        return self.info

    def __exit__(self, *exc):
        suppressed = self._raises.__exit__(*exc)
        error = self.info.value
        assert error.name == self.name, f"expected {self.name}, got {error}"
        for key, value in self.arguments.items():
            assert error.arguments[key] == value, f"{self.name}.{key}: expected {value!r}, got {error.arguments[key]!r}"
        return suppressed
