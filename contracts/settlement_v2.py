"""Python client of GavelSettlementV2 (docs/economics.md, sections 3 to 6 and 11), beside version 1.

    chain = EmbeddedChain()
    s = SettlementV2.deploy(chain, margin=30, bandwidth=10**6, block_seconds=12, max_interval_seconds=3600)
    s.connect(client).register(key, Role.CLIENT, stake=0)
    terms = JobTerms(nonce=1, client_key=key, ..., spec_hash=keccak(spec))
    job_id = s.connect(client).open_job(terms, spec).one(JobOpened).job_id
    s.connect(provider).accept(job_id)
    salt = os.urandom(32); root = trace_root(trace)
    s.connect(provider).commit(job_id, commitment_of(job_id, provider, root, salt))
    s.connect(provider).reveal(job_id, trace, salt)
    s.close_seat(job_id, silent_seat); s.settle(job_id); s.connect(provider).withdraw()

It is version 1's client (`Settlement`) where the two contracts agree (registration, stake,
unbonding, withdraw, credits, events of nodes and money) and has version 2's jobs; version
1's dispute calls are absent. Allowances and least stakes are `protocol.economics` records.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import astuple, dataclass, fields
from typing import Any

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address

from protocol.economics import Allowances, ChainSettings, EconomicTerms
from protocol.listtree import list_root

from .abi import ContractAbi
from .artifacts import load_artifact
from .chain import Chain, RevertData
from .records import (
    ClientRefunded,
    LoggedEvent,
    ProviderPaid,
    NodeExited,
    NodeRegistered,
    SettlementEvent,
    StakeAdded,
    StakeSlashed,
    StakeUnlocked,
    UnbondingBegun,
    UnbondingCancelled,
    Withdrawn,
    _check_bytes32,
    _FromAbi,
)
from .settlement import Settlement, TxResult, _bytes32
from .settlement_v2_demands import DEMAND_EVENT_TYPES, DEMANDS_CONTRACT_NAME, GAS_LIMITS_DEMANDS, DemandMovesV2
from .settlement_v2_games import GAME_EVENT_TYPES, GAMES_CONTRACT_NAME, GAS_LIMITS_GAMES, GameMovesV2
from .settlement_v2_referees import (
    GAS_LIMITS_REFEREES,
    REFEREE_EVENT_TYPES,
    REFEREES_CONTRACT_NAME,
    RefereeMovesV2,
)

CONTRACT_NAME = "GavelSettlementV2"
STEP_VERIFIER_CONTRACT_NAME = "OneStepVerifier"  # contracts.step_verifier's; GavelRefereesV2 opens its games

# Gas limit of every transaction, by operation: about twice the most measured on the embedded
# EVM (openJob 323k with a 400-byte spec, the game terms and the referee bond's lock, accept
# 139k, commit 63k, reveal 82k at 11 entries and 1.33M at MAX_LIST, closeSeat 92k, settle 127k
# for two seats and 655k for MAX_PROVIDERS, withdraw 31k). A limit costs nothing unless used; one too tight fails a move.
GAS_LIMITS_V2: dict[str, int] = {
    "deploy": 12_000_000,  # each of the five: OneStepVerifier, the game, referee and demand modules, the contract
    "register": 180_000,
    "addStake": 70_000,
    "beginUnbonding": 70_000,
    "cancelUnbonding": 70_000,
    "completeUnbonding": 110_000,
    "openJob": 500_000,
    "accept": 260_000,
    "commit": 130_000,
    "reveal": 2_700_000,
    "closeSeat": 200_000,
    "settle": 1_500_000,
    "withdraw": 100_000,
    **GAS_LIMITS_GAMES,
    **GAS_LIMITS_REFEREES,
    **GAS_LIMITS_DEMANDS,
}


class JobStatus(enum.IntEnum):
    NONE = 0
    OPEN = 1
    RUNNING = 2
    FINALIZED = 3
    REFUNDED = 4


class SeatStatus(enum.IntEnum):
    NONE = 0
    TAKEN = 1
    COMMITTED = 2
    REVEALED = 3
    PAID = 4


class ForfeitReason(enum.IntEnum):
    NONE = 0
    NO_COMMIT = 1
    NO_REVEAL = 2
    LOST_GAME = 3
    SILENT_DEFENDER = 4
    UNAVAILABLE = 5
    EQUIVOCATED = 6


# ---------------------------------------------------------------- terms and stored records


@dataclass(frozen=True)
class JobTerms(_FromAbi):
    """The on-chain `JobTerms` struct (section 4), field for field."""

    nonce: int
    client_key: bytes
    client_referees: bool
    spec_hash: bytes
    initial_state: bytes
    steps: int
    checkpoint_every: int
    graph_nodes: int
    step_millis: int
    node_millis: int
    state_bytes: int
    evidence_bytes: int
    providers_wanted: int
    catch_bps: int
    accept_window: int
    price: int
    provider_stake: int
    gas_price_cap: int
    referee_fee: int
    witness_fee: int
    # zero: no on-chain fourth level (openStepGame refuses); else protocol.element_specs.element_spec_root
    element_spec_root: bytes = bytes(32)

    def __post_init__(self) -> None:
        _check_bytes32(self)

    def as_abi(self) -> tuple[Any, ...]:
        return astuple(self)

    @property
    def terms_hash(self) -> bytes:
        """keccak256(abi.encode(terms)), as `openJob` stores it."""
        return keccak(abi_encode([_TERMS_TYPE], [self.as_abi()]))

    def economic_terms(self) -> EconomicTerms:
        """The fields `protocol.economics` reads."""
        names = {f.name for f in fields(EconomicTerms)} - {"on_chain_step"}
        return EconomicTerms(**{n: getattr(self, n) for n in names},
                             on_chain_step=self.element_spec_root != bytes(32))


_TERMS_TYPE = "(uint64,bytes32,bool,bytes32,bytes32,uint64,uint32,uint32,uint32,uint32,uint64,uint64,uint16,uint16,uint32,uint128,uint128,uint64,uint128,uint128,bytes32)"


@dataclass(frozen=True)
class JobAllowances(_FromAbi):
    """The allowances a job stores (the ones that depend on its terms), seconds."""

    train: int
    replay: int
    interval: int
    xfer_state: int
    xfer_evidence: int
    rule: int
    demand: int
    game: int


@dataclass(frozen=True)
class JobInfo(_FromAbi):
    """A job as stored (status NONE and zeros when unknown)."""

    client: str
    accept_by: int
    providers_wanted: int
    providers_taken: int
    commit_by: int
    reveal_from: int
    challenge_end: int
    commitments: int
    open_items: int
    status: JobStatus
    client_referees: bool
    final_by: int
    trace_length: int
    price: int
    provider_stake: int
    terms_hash: bytes
    initial_state: bytes
    allowed: JobAllowances

    @classmethod
    def from_abi(cls, values):
        raw = super().from_abi(values)
        return _replace(raw, allowed=JobAllowances.from_abi(tuple(raw.allowed)))


@dataclass(frozen=True)
class SeatInfo(_FromAbi):
    """One seat of a job (status NONE when the account holds none)."""

    status: SeatStatus
    forfeit: ForfeitReason
    challenge_by: int
    commitment: bytes
    trace_root: bytes


@dataclass(frozen=True)
class Deadlines(_FromAbi):
    """`deadlinesOf(jobId)`: zero where not yet fixed; the reveal window is provisional until all committed."""

    accept_by: int
    commit_by: int
    reveal_from: int
    reveal_by: int
    challenge_end: int
    final_by: int


def _replace(record, **changes):
    return type(record)(**{**{f.name: getattr(record, f.name) for f in fields(record)}, **changes})


# ---------------------------------------------------------------- events (those that differ from version 1)


@dataclass(frozen=True)
class JobOpened(SettlementEvent):
    EVENT_NAME = "JobOpened"
    job_id: bytes
    client: str
    terms_hash: bytes
    terms: JobTerms
    spec: bytes

    def __post_init__(self) -> None:
        if len(self.job_id) != 32 or len(self.terms_hash) != 32:
            raise ValueError("JobOpened: job_id and terms_hash are 32 bytes")

    @classmethod
    def from_abi(cls, values):
        values = dict(values)
        values["terms"] = JobTerms.from_abi(tuple(values["terms"]))
        return cls(values["jobId"], values["client"], values["termsHash"], values["terms"], values["spec"])


@dataclass(frozen=True)
class SeatTaken(SettlementEvent):
    EVENT_NAME = "SeatTaken"
    job_id: bytes
    seat: str
    locked: int


@dataclass(frozen=True)
class JobFilled(SettlementEvent):
    EVENT_NAME = "JobFilled"
    job_id: bytes
    commit_by: int


@dataclass(frozen=True)
class TraceCommitted(SettlementEvent):
    EVENT_NAME = "TraceCommitted"
    job_id: bytes
    seat: str
    commitment: bytes


@dataclass(frozen=True)
class RevealOpened(SettlementEvent):
    EVENT_NAME = "RevealOpened"
    job_id: bytes
    reveal_from: int
    reveal_by: int


@dataclass(frozen=True)
class TraceRevealed(SettlementEvent):
    EVENT_NAME = "TraceRevealed"
    job_id: bytes
    seat: str
    trace_root: bytes
    challenge_by: int
    trace: tuple[bytes, ...]  # the revealed trace itself (`SettlementV2.revealed_trace` checks it)


@dataclass(frozen=True)
class SeatForfeited(SettlementEvent):
    EVENT_NAME = "SeatForfeited"
    job_id: bytes
    seat: str
    reason: ForfeitReason


@dataclass(frozen=True)
class JobSettled(SettlementEvent):
    EVENT_NAME = "JobSettled"
    job_id: bytes
    status: JobStatus
    paid_seats: int


EVENT_TYPES_V2: dict[str, type[SettlementEvent]] = {
    cls.EVENT_NAME: cls
    for cls in (
        NodeRegistered, StakeAdded, UnbondingBegun, UnbondingCancelled, NodeExited, StakeSlashed, StakeUnlocked,
        Withdrawn, JobOpened, SeatTaken, JobFilled, TraceCommitted, RevealOpened, TraceRevealed, SeatForfeited,
        ProviderPaid, ClientRefunded, JobSettled, *GAME_EVENT_TYPES, *REFEREE_EVENT_TYPES,
        *DEMAND_EVENT_TYPES,
    )
}


# ---------------------------------------------------------------- commitments


def trace_root(trace: list[bytes] | tuple[bytes, ...]) -> bytes:
    """`LibList.root(trace)`: the keccak list root of a trace's C+1 state hashes."""
    return list_root(list(trace))


def commitment_of(job_id: bytes, seat: str, root: bytes, salt: bytes) -> bytes:
    """keccak256(abi.encode(jobId, seat, traceRoot, salt)): what `commit` takes and `reveal` opens."""
    return keccak(abi_encode(["bytes32", "address", "bytes32", "bytes32"],
                             [_bytes32(job_id), to_checksum_address(seat), _bytes32(root), _bytes32(salt)]))


# ---------------------------------------------------------------- the client


class SettlementV2(GameMovesV2, RefereeMovesV2, DemandMovesV2, Settlement):
    """GavelSettlementV2 at `address` on `chain`, sending as `account`; the claim game's moves are
    `GameMovesV2`'s, the rulings and appeals `RefereeMovesV2`'s, the demands of data `DemandMovesV2`'s."""

    def __init__(self, chain: Chain, address: str, account: str | None = None):
        super().__init__(chain, address, account)
        self.abi = _abi_v2()
        self.gas_limits = dict(GAS_LIMITS_V2)

    @classmethod
    def deploy(  # type: ignore[override]
        cls,
        chain: Chain,
        *,
        account: str | None = None,
        unbonding_delay: int = 7 * 24 * 3600,
        min_stake: int = 10**18,
        winner_share_bps: int = 5_000,
        margin: int = 30,
        bandwidth: int = 10**6,
        block_seconds: int = 12,
        max_interval_seconds: int = 3_600,
    ) -> SettlementV2:
        """Deploys OneStepVerifier (the fourth level's), the three modules, then the contract with its
        immutables (the node rules, w and the chain settings of section 3) and the modules' addresses:
        five transactions."""
        account = account if account is not None else chain.accounts[0]
        node_rules = (unbonding_delay, min_stake, winner_share_bps)
        verifier = _create(chain, account, STEP_VERIFIER_CONTRACT_NAME, ())
        modules = [_create(chain, account, name, (*node_rules, margin, verifier))
                   for name in (GAMES_CONTRACT_NAME, REFEREES_CONTRACT_NAME)]
        modules.append(_create(chain, account, DEMANDS_CONTRACT_NAME, (*node_rules, margin, block_seconds)))
        address = _create(chain, account, CONTRACT_NAME,
                          (*node_rules, margin, bandwidth, block_seconds, max_interval_seconds, *modules))
        return cls(chain, address, account)

    def connect(self, account: str) -> SettlementV2:
        """The same contract, sending as `account`."""
        bound = SettlementV2(self.chain, self.address, account)
        bound.gas_limits = self.gas_limits
        return bound

    # ------------------------------------------------------------ jobs

    def open_job(self, terms: JobTerms, spec: bytes) -> TxResult:  # type: ignore[override]
        """Opens a job on these terms, escrowing their price; the id is ``result.one(JobOpened).job_id``."""
        return self._transact("openJob", terms.as_abi(), bytes(spec), value=terms.price)

    def accept(self, job_id: bytes) -> TxResult:
        """Takes a seat, locking the job's provider stake."""
        return self._transact("accept", _bytes32(job_id))

    def commit(self, job_id: bytes, commitment: bytes) -> TxResult:  # type: ignore[override]
        """Commits this seat to `commitment_of(job_id, self.account, root, salt)`."""
        return self._transact("commit", _bytes32(job_id), _bytes32(commitment))

    def reveal(self, job_id: bytes, trace: list[bytes] | tuple[bytes, ...], salt: bytes) -> TxResult:
        """Reveals this seat's whole trace and the salt of its commitment."""
        return self._transact("reveal", _bytes32(job_id), [_bytes32(h) for h in trace], _bytes32(salt))

    def close_seat(self, job_id: bytes, seat: str) -> TxResult:
        """Forfeits a seat that missed its commit or reveal deadline (anyone may call it)."""
        return self._transact("closeSeat", _bytes32(job_id), seat)

    def settle(self, job_id: bytes) -> TxResult:
        """Pays revealed seats and credits the client the rest, once no move is left (anyone may call it)."""
        return self._transact("settle", _bytes32(job_id))

    # ------------------------------------------------------------ reads

    def job(self, job_id: bytes) -> JobInfo:  # type: ignore[override]
        (raw,) = self._call("getJob", _bytes32(job_id))
        return JobInfo.from_abi(raw)

    def seats(self, job_id: bytes) -> tuple[str, ...]:
        """The seats of the job, in the order they were taken."""
        return tuple(self._call("seatsOf", _bytes32(job_id))[0])

    def seat(self, job_id: bytes, account: str) -> SeatInfo:  # type: ignore[override]
        (raw,) = self._call("getSeat", _bytes32(job_id), account)
        return SeatInfo.from_abi(raw)

    def deadlines(self, job_id: bytes) -> Deadlines:
        (raw,) = self._call("deadlinesOf", _bytes32(job_id))
        return Deadlines.from_abi(raw)

    def allowances_of(self, terms: JobTerms) -> Allowances:
        """`allowancesOf(terms)`, as `protocol.economics.allowances` computes it."""
        (raw,) = self._call("allowancesOf", terms.as_abi())
        return Allowances(*raw)

    def min_stake(self, terms: JobTerms) -> int:
        """The least seat stake `openJob` accepts for these terms."""
        return self._call("minStake", terms.as_abi())[0]

    def job_id_of(self, client: str, nonce: int) -> bytes:
        """keccak256(abi.encode(chainid, contract, client, nonce))."""
        return self._call("jobIdOf", client, nonce)[0]

    def call_of(self, logged: LoggedEvent) -> tuple[str, tuple[Any, ...]]:
        """(function name, arguments) of the transaction that emitted ``logged``, when it called
        this contract directly (a seat reads its own reveal's salt back here)."""
        return self.abi.decode_call(self.chain.transaction_input(logged.tx_hash))

    @staticmethod
    def revealed_trace(logged: LoggedEvent) -> tuple[bytes, ...]:
        """The trace a ``TraceRevealed`` event carries, checked against the event's root."""
        trace = tuple(bytes(h) for h in logged.event.trace)
        if list_root(list(trace)) != logged.event.trace_root:
            raise ValueError("the revealed trace does not hash to the event's root")
        return trace

    @staticmethod
    def posted_list(logged: LoggedEvent) -> tuple[bytes, ...]:
        """The list a ``ListPosted`` event carries (``postSteps`` or ``postNodes``), checked against
        the event's root."""
        posted = tuple(bytes(h) for h in logged.event.entries)
        if list_root(list(posted)) != logged.event.list_root:
            raise ValueError("the posted list does not hash to the event's root")
        return posted

    def chain_settings(self) -> ChainSettings:
        """The immutables `protocol.economics` reads."""
        return ChainSettings(margin=self.setting("MARGIN"), bandwidth=self.setting("BANDWIDTH"),
                             block_seconds=self.setting("BLOCK_SECONDS"),
                             max_interval_seconds=self.setting("MAX_INTERVAL_SECONDS"),
                             winner_share_bps=self.setting("WINNER_SHARE_BPS"))

    # ------------------------------------------------------------ plumbing

    def _decode_event(self, topics: tuple[bytes, ...], data: bytes) -> SettlementEvent | None:
        decoded = self.abi.decode_log(list(topics), data)
        return None if decoded is None else EVENT_TYPES_V2[decoded[0]].from_abi(decoded[1])


def _create(chain: Chain, account: str, name: str, arguments: tuple) -> str:
    """Creates contract `name` from its artifact; returns its address."""
    abi = ContractAbi(load_artifact(name).abi) if name != CONTRACT_NAME else _abi_v2()
    init = load_artifact(name).bytecode + abi.encode_constructor(*arguments)
    try:
        receipt = chain.transact(account, None, init, gas=GAS_LIMITS_V2["deploy"])
    except RevertData as reverted:
        raise abi.revert(reverted.data) from None
    assert receipt.contract_address is not None
    return receipt.contract_address


def _version_1_only(name: str) -> property:
    def absent(self):
        raise AttributeError(f"{name} is a call of GavelSettlement version 1; version 2 has no such call")
    return property(absent)


for _name in ("open_dispute", "lapse", "dispute", "dispute_count", "providers"):  # `rule` is the claim game's
    setattr(SettlementV2, _name, _version_1_only(_name))


def abi_entries_v2() -> list[dict]:
    """GavelSettlementV2's ABI with its modules' (reached through its fallback) appended, each entry once,
    and OneStepVerifier's errors."""
    entries = list(load_artifact(CONTRACT_NAME).abi)
    seen = {_signature(e) for e in entries}
    for module in (GAMES_CONTRACT_NAME, REFEREES_CONTRACT_NAME, DEMANDS_CONTRACT_NAME):
        for e in load_artifact(module).abi:
            if e["type"] in ("function", "event", "error") and _signature(e) not in seen:
                seen.add(_signature(e))
                entries.append(e)
    # OneStepVerifier's errors, which a duel's opening or settlement passes on when the verifier refuses
    for e in load_artifact(STEP_VERIFIER_CONTRACT_NAME).abi:
        if e["type"] == "error" and _signature(e) not in seen:
            seen.add(_signature(e))
            entries.append(e)
    return entries


def _signature(entry: dict) -> tuple:
    return entry["type"], entry.get("name"), tuple(i["type"] for i in entry.get("inputs", ()))


@functools.cache
def _abi_v2() -> ContractAbi:
    return ContractAbi(abi_entries_v2())


__all__ = [
    "CONTRACT_NAME", "GAS_LIMITS_V2", "ClientRefunded", "Deadlines", "ForfeitReason", "JobAllowances", "JobFilled",
    "JobInfo", "JobOpened", "JobSettled", "JobStatus", "JobTerms", "ProviderPaid", "RevealOpened", "SeatForfeited",
    "SeatInfo", "SeatStatus", "SeatTaken", "SettlementV2", "TraceCommitted", "TraceRevealed", "commitment_of",
    "trace_root", "abi_entries_v2",
]
