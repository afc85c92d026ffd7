"""Python client of the GavelSettlement contract: typed methods, typed events, decoded reverts.

    chain = EmbeddedChain()                      # or RpcChain("http://127.0.0.1:8545")
    deployer, client, provider = chain.accounts[:3]
    settlement = Settlement.deploy(chain, account=deployer)
    settlement.connect(provider).register(key, Role.PROVIDER, stake=2 * ETHER)
    result = settlement.connect(client).open_job(job_id, price=ETHER, providers_wanted=1, ...)
    result.one(JobOpened).price                  # typed event records
    try:
        settlement.connect(provider).accept(job_id)
    except ContractRevert as refused:            # refused.name == "JobDeadlinePassed", refused.arguments
        ...

A ``Settlement`` is bound to one account (the sender of its transactions); ``connect``
gives the same contract bound to another. Every transaction has an explicit gas limit
from ``GAS_LIMITS`` (worst cases measured by scripts/bench_settlement.py, with margin).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from eth_utils import to_checksum_address

from .abi import ContractAbi
from .artifacts import load_artifact
from .chain import Chain, Receipt, RevertData
from .errors import ContractRevert
from .records import (
    EVENT_TYPES,
    DisputeInfo,
    JobInfo,
    LoggedEvent,
    NodeInfo,
    Outcome,
    Role,
    SeatInfo,
    SettlementEvent,
)

CONTRACT_NAME = "GavelSettlement"

# Gas limit of every transaction, by operation: about twice the gas the worst case measured
# needs (scripts/bench_settlement.py prints both; settle's worst case is MAX_PROVIDERS seats
# paid to fresh accounts). A limit costs nothing unless used, while one too tight fails a
# move, and storage refunds mean a call needs more gas up front than its receipt shows.
# withdraw leaves room for a contract wallet's receive function.
# A Settlement copies this table to `gas_limits`, which a caller may adjust.
GAS_LIMITS: dict[str, int] = {
    "deploy": 4_200_000,
    "register": 180_000,
    "addStake": 70_000,
    "beginUnbonding": 70_000,
    "cancelUnbonding": 70_000,
    "completeUnbonding": 110_000,
    "openJob": 280_000,
    "accept": 260_000,
    "commit": 130_000,
    "openDispute": 400_000,
    "rule": 260_000,
    "lapse": 100_000,
    "settle": 1_300_000,
    "withdraw": 100_000,
}

E = TypeVar("E", bound=SettlementEvent)


@dataclass(frozen=True)
class TxResult:
    """A mined transaction of the settlement contract and the events it emitted, in order."""

    tx_hash: bytes
    block_number: int
    gas_used: int
    effective_gas_price: int
    events: tuple[SettlementEvent, ...]

    @property
    def fee(self) -> int:
        """What the sender paid for gas, in wei."""
        return self.gas_used * self.effective_gas_price

    def all(self, kind: type[E]) -> list[E]:
        """The events of this type, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def one(self, kind: type[E]) -> E:
        """The single event of this type; ValueError unless there is exactly one."""
        found = self.all(kind)
        if len(found) != 1:
            raise ValueError(f"expected one {kind.__name__}, found {len(found)} in {self.events}")
        return found[0]


class Settlement:
    """The settlement contract at `address` on `chain`, sending as `account`."""

    def __init__(self, chain: Chain, address: str, account: str | None = None):
        self.chain = chain
        self.address = to_checksum_address(address)
        self.account = to_checksum_address(account if account is not None else chain.accounts[0])
        self.abi = _contract_abi()
        self.gas_limits = dict(GAS_LIMITS)
        self._settings: dict[str, int] = {}

    # ------------------------------------------------------------ deployment

    @classmethod
    def deploy(
        cls,
        chain: Chain,
        *,
        account: str | None = None,
        unbonding_delay: int = 7 * 24 * 3600,
        min_stake: int = 10**18,
        winner_share_bps: int = 5_000,
    ) -> Settlement:
        """Deploys a new contract; `winner_share_bps` of each forfeited lock goes to the winner, the rest is burned."""
        account = account if account is not None else chain.accounts[0]
        abi = _contract_abi()
        artifact = load_artifact(CONTRACT_NAME)
        init = artifact.bytecode + abi.encode_constructor(unbonding_delay, min_stake, winner_share_bps)
        try:
            receipt = chain.transact(account, None, init, gas=GAS_LIMITS["deploy"])
        except RevertData as reverted:
            raise abi.revert(reverted.data) from None
        assert receipt.contract_address is not None
        return cls(chain, receipt.contract_address, account)

    def connect(self, account: str) -> Settlement:
        """The same contract, sending as `account`."""
        bound = Settlement(self.chain, self.address, account)
        bound.gas_limits = self.gas_limits
        return bound

    # ------------------------------------------------------------ nodes

    def register(self, ed25519_key: bytes, roles: Role | int, *, stake: int) -> TxResult:
        """Registers this account as a node with `stake` wei, its Ed25519 public key and its roles."""
        return self._transact("register", _bytes32(ed25519_key), int(roles), value=stake)

    def add_stake(self, amount: int) -> TxResult:
        """Adds `amount` wei to this node's stake."""
        return self._transact("addStake", value=amount)

    def begin_unbonding(self) -> TxResult:
        """Starts the unbonding delay; no new seats or challenges meanwhile."""
        return self._transact("beginUnbonding")

    def cancel_unbonding(self) -> TxResult:
        """Returns to active."""
        return self._transact("cancelUnbonding")

    def complete_unbonding(self) -> TxResult:
        """Leaves after the delay with no open obligation; the stake becomes a credit to withdraw."""
        return self._transact("completeUnbonding")

    # ------------------------------------------------------------ jobs

    def open_job(
        self,
        job_id: bytes,
        *,
        price: int,
        providers_wanted: int,
        provider_stake: int,
        accept_by: int,
        commit_by: int,
        challenge_by: int,
        ruling_period: int,
        referee: str | None = None,
    ) -> TxResult:
        """Opens a job (id = hash of the signed spec), escrowing `price` wei; the referee defaults to this account."""
        return self._transact(
            "openJob",
            _bytes32(job_id),
            providers_wanted,
            provider_stake,
            accept_by,
            commit_by,
            challenge_by,
            ruling_period,
            referee or "0x" + "00" * 20,
            value=price,
        )

    def accept(self, job_id: bytes) -> TxResult:
        """Takes a seat in the job, locking its provider stake."""
        return self._transact("accept", _bytes32(job_id))

    def commit(self, job_id: bytes, trace_root: bytes) -> TxResult:
        """Records this provider's trace root for the job."""
        return self._transact("commit", _bytes32(job_id), _bytes32(trace_root))

    def open_dispute(self, job_id: bytes, respondent: str) -> TxResult:
        """Challenges a committed provider (as a provider of the job, or as an auditor with a bond).
        The new id is ``result.one(DisputeOpened).dispute_id``."""
        return self._transact("openDispute", _bytes32(job_id), respondent)

    def rule(
        self, dispute_id: int, outcome: Outcome, *, step: int, node: int, transcript_hash: bytes
    ) -> TxResult:
        """The referee's verdict: outcome, disputed training step and operator node, transcript hash."""
        return self._transact("rule", dispute_id, int(outcome), step, node, _bytes32(transcript_hash))

    def lapse(self, dispute_id: int) -> TxResult:
        """Closes a dispute whose ruling deadline passed without a verdict."""
        return self._transact("lapse", dispute_id)

    def settle(self, job_id: bytes) -> TxResult:
        """Pays honest providers or refunds the client, once no move is left in the job."""
        return self._transact("settle", _bytes32(job_id))

    def withdraw(self) -> TxResult:
        """Pulls this account's whole credit."""
        return self._transact("withdraw")

    # ------------------------------------------------------------ reads

    def node(self, account: str | None = None) -> NodeInfo:
        (raw,) = self._call("getNode", account or self.account)
        return NodeInfo.from_abi(raw)

    def job(self, job_id: bytes) -> JobInfo:
        (raw,) = self._call("getJob", _bytes32(job_id))
        return JobInfo.from_abi(raw)

    def providers(self, job_id: bytes) -> tuple[str, ...]:
        (raw,) = self._call("getProviders", _bytes32(job_id))
        return tuple(raw)

    def seat(self, job_id: bytes, provider: str) -> SeatInfo:
        (raw,) = self._call("getSeat", _bytes32(job_id), provider)
        return SeatInfo.from_abi(raw)

    def dispute(self, dispute_id: int) -> DisputeInfo:
        (raw,) = self._call("getDispute", dispute_id)
        return DisputeInfo.from_abi(raw)

    def dispute_count(self) -> int:
        return self._call("disputeCount")[0]

    def credit_of(self, account: str | None = None) -> int:
        """Wei that `account` (default: this one) can withdraw now."""
        return self._call("creditOf", account or self.account)[0]

    def balance(self) -> int:
        """The contract's native balance."""
        return self.chain.balance(self.address)

    def setting(self, name: str) -> int:
        """An immutable or constant: UNBONDING_DELAY, MIN_STAKE, WINNER_SHARE_BPS, MAX_PROVIDERS, ...

        Read once per binding: the code at an address does not change, and nodes read the
        margin and the like on every poll (each read is an EVM call; on the embedded chain a
        testnet's polls of them took most of its EVM time). A restarted chain gets a new binding."""
        if name not in self._settings:
            self._settings[name] = self._call(name)[0]
        return self._settings[name]

    def events(self, from_block: int = 0, to_block: int | None = None) -> list[LoggedEvent]:
        """Every event of this contract in the block range, in chain order."""
        found = []
        for log in self.chain.logs(self.address, from_block, to_block):
            event = self._decode_event(log.topics, log.data)
            if event is not None:
                found.append(LoggedEvent(event, log.block_number, log.tx_hash, log.log_index))
        return found

    # ------------------------------------------------------------ plumbing

    def _transact(self, name: str, *args: Any, value: int = 0) -> TxResult:
        data = self.abi.encode_call(name, *args)
        try:
            receipt = self.chain.transact(self.account, self.address, data, value=value, gas=self.gas_limits[name])
        except RevertData as reverted:
            raise self.abi.revert(reverted.data) from None
        return self._result(receipt)

    def _call(self, name: str, *args: Any) -> tuple[Any, ...]:
        try:
            output = self.chain.call(self.address, self.abi.encode_call(name, *args), sender=self.account)
        except RevertData as reverted:
            raise self.abi.revert(reverted.data) from None
        return self.abi.decode_result(name, output)

    def _result(self, receipt: Receipt) -> TxResult:
        events = []
        for log in receipt.logs:
            if log.address == self.address:
                event = self._decode_event(log.topics, log.data)
                if event is not None:
                    events.append(event)
        return TxResult(receipt.tx_hash, receipt.block_number, receipt.gas_used, receipt.effective_gas_price, tuple(events))

    def _decode_event(self, topics: tuple[bytes, ...], data: bytes) -> SettlementEvent | None:
        decoded = self.abi.decode_log(list(topics), data)
        if decoded is None:
            return None
        name, values = decoded
        return EVENT_TYPES[name].from_abi(values)


def _contract_abi() -> ContractAbi:
    return _ABI_CACHE.setdefault(CONTRACT_NAME, ContractAbi(load_artifact(CONTRACT_NAME).abi))


_ABI_CACHE: dict[str, ContractAbi] = {}


def _bytes32(value: bytes) -> bytes:
    if len(value) != 32:
        raise ValueError(f"expected 32 bytes, got {len(value)}")
    return bytes(value)


__all__ = ["GAS_LIMITS", "ContractRevert", "Settlement", "TxResult"]
