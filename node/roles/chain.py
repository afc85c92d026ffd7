"""The node's binding to the settlement contract: which chain, which contract, which account.

Chain: ``config.chain`` is ``embedded`` (one in-process EVM per process, shared by every
node of the process, so several in-process nodes settle on one chain) or a JSON-RPC URL
(anvil on loopback for a local network of processes).

Contract: ``config.contract`` when set. Otherwise the embedded chain's own deployment,
or, on a URL chain, the *canonical dev deployment*: the first contract created by a
fixed, publicly known deployer key. Its address follows from that key alone, so every
node of a local network finds it without being told; the first node that looks deploys
it (funding the deployer from the chain's unlocked accounts). Real chains name their
contract with ``--contract``.

Account: each node signs its transactions with a secp256k1 key derived from its node
seed, so a restarted node keeps its account. On a dev chain (one with unlocked accounts:
anvil, the embedded EVM) an account short of ether is funded from the first unlocked
account; elsewhere the operator funds it.

Every chain call blocks (HTTP or the in-process EVM), so ``await binding.run(fn, ...)``
runs it in a worker thread, one call at a time per chain object: the embedded EVM is
not thread-safe and local-key nonces are counted in the client.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterator, TypeVar

import blake3
import trio

from ..errors import ConfigError, LocalError

log = logging.getLogger(__name__)

T = TypeVar("T")

EMBEDDED = "embedded"
ETHER = 10**18
# What the canonical deployment is created with; every node of a dev network agrees on it.
DEV_DEPLOYER_KEY = blake3.blake3(b"gavel/dev-deployer/v1").digest()
# Version 2 is five contracts (OneStepVerifier, three modules, then the settlement): another
# deployer, so the two versions' canonical addresses never collide; the settlement is its fifth creation.
DEV_DEPLOYER_KEY_V2 = blake3.blake3(b"gavel/dev-deployer/v2").digest()
V2_SETTLEMENT_NONCE = 4
DEV_UNBONDING_DELAY = 7 * 24 * 3600
DEV_MIN_STAKE = ETHER
DEV_WINNER_SHARE_BPS = 5_000
# The liveness margin Δ of a dev version-2 deployment, seconds. A dev chain (anvil, the
# embedded EVM) mines each transaction as it arrives, so within Δ an honest node has only to
# notice what it must answer (its chain follower reads every FOLLOW_POLL = 1 s) and send one
# transaction: 10 s leaves that ten times over for a machine whose cores are busy. Every window
# is at least 2Δ, so a local job's reveal and replay windows take about a third of what the 30 s
# of the contract client's default would (a test moves the chain's clock through them anyway).
DEV_MARGIN_V2 = 10
# Seconds a paced embedded chain may run ahead of the wall clock (`embedded_chain_paced`): a
# few transactions in a row go at once, a burst waits for the next block.
BLOCK_LEAD = 2
# An account below LOW_BALANCE is topped up with FUNDING on a dev chain.
FUNDING = 1_000 * ETHER
LOW_BALANCE = 100 * ETHER
DEPLOY_WAIT = 30.0


def parse_ether(text: str, what: str) -> int:
    """Wei of a decimal ether amount ("1.5")."""
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation:
        raise ConfigError(f"{what}: {text!r} is not an amount of ether") from None
    wei = value * ETHER
    if not value.is_finite() or value < 0 or wei != wei.to_integral_value():
        raise ConfigError(f"{what}: {text!r} is not a non-negative amount of ether (at most 18 decimals)")
    return int(wei)


def format_ether(wei: int) -> str:
    return f"{Decimal(wei) / ETHER:f}"


def chain_failures() -> tuple[type[Exception], ...]:
    """What a settlement call raises when the chain refuses it or fails: ``contracts``'
    ``SettlementError`` (a revert, an RPC failure, a transaction the chain will not take),
    and eth_abi's ``DecodingError`` for a reply that does not decode (an empty one: no
    contract code at the address any more, as on a restarted dev chain). Imported on use,
    like contracts everywhere in node (``except chain_failures()`` evaluates it only when
    an error is raised)."""
    from eth_abi.exceptions import DecodingError

    from contracts import SettlementError

    return (SettlementError, DecodingError)


def describe_chain_error(error: BaseException) -> str:
    """One line for a failed settlement call: a revert's custom error and its arguments, a
    reply that does not decode said in words (the chain watch says why, on its next look),
    else the exception's type and message."""
    from eth_abi.exceptions import DecodingError

    if isinstance(error, DecodingError):
        return "the contract's answer does not decode (no contract code at its address any more?)"
    name = getattr(error, "name", None)
    return f"{name} {getattr(error, 'arguments', '')}" if name else f"{type(error).__name__}: {error}"


async def withdraw_credit(ctx: Any) -> int:
    """Withdraw the credit of ``ctx``'s node on the contract, if any; returns the amount.
    Never raises for the chain: the roles' settle loops call it and retry on their next pass."""
    chain = ctx.chain
    s = chain.settlement
    if chain.stale:  # the chain changed: nothing to read here until the watch joined the new one
        await trio.lowlevel.checkpoint()
        return 0
    try:
        credit = await chain.run(s.credit_of, chain.account)
        if credit:
            await chain.run(s.withdraw)
            log.info("withdrew %s ether", format_ether(credit))
        return credit
    except chain_failures() as error:
        log.info("withdrawing: %s", describe_chain_error(error))
        return 0
    except Exception:  # broad: the settle loops call this and must outlive any failure: the next pass retries
        log.exception("withdrawing failed")
        return 0


def account_key(seed: bytes) -> bytes:
    """The node's secp256k1 private key, derived from its node seed."""
    return blake3.blake3(b"gavel/eth-account/v1\0" + seed).digest()


def canonical_address(deployer: str, nonce: int = 0) -> str:
    """Address of the contract ``deployer`` creates with transaction ``nonce`` (the first: 0)."""
    import rlp
    from eth_utils import keccak, to_checksum_address

    return to_checksum_address(keccak(rlp.encode([bytes.fromhex(deployer[2:]), nonce]))[12:])


def _settlement_class(version: str) -> Any:
    """The client class of settlement ``version`` ("1" or "2")."""
    from contracts import Settlement
    from contracts.settlement_v2 import SettlementV2

    if version not in ("1", "2"):
        raise ConfigError(f"settlement must be 1 or 2, not {version!r}")
    return Settlement if version == "1" else SettlementV2


def _deploy_dev(cls: Any, chain: Any, account: str | None = None, margin: int = DEV_MARGIN_V2) -> Any:
    """A dev deployment of ``cls`` with the node rules every dev network agrees on; ``margin``: Δ
    of a version-2 deployment."""
    from contracts.settlement_v2 import SettlementV2

    margin_setting = {"margin": margin} if issubclass(cls, SettlementV2) else {}
    return cls.deploy(chain, account=account, unbonding_delay=DEV_UNBONDING_DELAY, min_stake=DEV_MIN_STAKE,
                      winner_share_bps=DEV_WINNER_SHARE_BPS, **margin_setting)


# -- one chain object per process for the embedded EVM ------------------------------


@dataclass
class _Shared:
    chain: Any
    lock: threading.RLock  # the chain's own: a transaction waiting for its block releases it
    addresses: dict[str, str] = field(default_factory=dict)  # settlement version -> its deployment


_embedded: _Shared | None = None
_embedded_guard = threading.Lock()


def _embedded_chain() -> _Shared:
    global _embedded
    with _embedded_guard:
        if _embedded is None:
            from contracts import EmbeddedChain

            # Its clock ticks with the wall clock even after a jump ahead (tests close windows that way).
            lock = threading.RLock()
            _embedded = _Shared(EmbeddedChain(follow_wall_clock=True, lock=lock), lock)
        return _embedded


@contextmanager
def embedded_chain_paced(lead: int = BLOCK_LEAD) -> Iterator[None]:
    """While open, this process's embedded chain keeps a real chain's pace (`EmbeddedChain.block_lead`):
    a network of in-process nodes sends bursts of transactions, one block each, and would otherwise
    run the chain's clock ahead of the time its nodes work in."""
    with _embedded_chain().chain.paced(lead):
        yield


# -- the binding -----------------------------------------------------------------


class ChainBinding:
    """This node's account on the settlement contract. Build with ``open_binding``."""

    def __init__(self, chain: Any, settlement: Any, lock: threading.Lock, *, dev: bool) -> None:
        self.chain = chain
        self.settlement = settlement  # bound to our account
        self.account: str = settlement.account
        self.address: str = settlement.address
        self.dev = dev
        self._lock = lock
        self.identity = chain_identity_sync(chain)  # (chain id, genesis block hash): which chain we joined
        self.stale: str | None = None  # why this binding no longer holds, once the chain watch saw it
        self._stake_lock = trio.Lock()  # see with_free_stake

    def changed_sync(self) -> str | None:
        """Why this binding no longer holds (a fresh chain, or no contract code at our
        address: anvil restarted, a reset dev chain), or None while it does."""
        identity = chain_identity_sync(self.chain)
        if identity != self.identity:
            return (f"the settlement chain changed under us (chain id {identity[0]}, genesis {identity[1][:18]}; "
                    f"we joined chain id {self.identity[0]}, genesis {self.identity[1][:18]})")
        if not _has_code(self.chain, self.address):
            return f"the settlement contract {self.address} has no code on the chain any more"
        return None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a blocking chain function in a worker thread, one at a time per chain."""

        def locked() -> T:
            with self._lock:
                return fn(*args)

        return await trio.to_thread.run_sync(locked)

    async def with_free_stake(self, need: int, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` (a transaction that locks ``need`` of our free stake) after adding what our
        free stake lacks of it. One at a time per binding: two such top-ups at once would each
        count the same free stake, and the second lock would revert short of it."""
        async with self._stake_lock:
            free = (await self.run(self.settlement.node, self.account)).free_stake
            if free < need:
                await self.run(self.ensure_funds_sync, need - free)
                await self.run(self.settlement.add_stake, need - free)
            return await self.run(fn, *args)

    def ensure_registered_sync(self, public_key: bytes, roles: Any, stake: int) -> None:
        """Register with ``roles`` and ``stake`` unless already registered (a restart)."""
        from contracts import NodeStatus

        s = self.settlement
        # Funded first: the embedded EVM refuses even a read from an account that cannot pay gas.
        self._fund_sync(stake + ETHER // 10)
        info = s.node(self.account)
        if info.status != NodeStatus.NONE:
            if info.ed25519_key != public_key:
                raise LocalError(f"account {self.account} is registered with another node key")
            return
        s.register(public_key, roles, stake=stake if roles & 3 else 0)
        log.info("registered %s on %s as %s with %s ether", self.account, self.address, roles, format_ether(stake))

    def _fund_sync(self, need: int) -> None:
        balance = self.chain.balance(self.account)
        if balance >= need:
            return
        if not self.dev:
            raise LocalError(f"account {self.account} holds {format_ether(balance)} ether, needs {format_ether(need)}: fund it")
        self.chain.transact(_funder(self.chain), self.account, b"", value=max(FUNDING, need), gas=21_000)

    def ensure_funds_sync(self, need: int) -> None:
        """Top up our account on a dev chain when it holds less than ``need`` (and a margin)."""
        if self.chain.balance(self.account) < need + ETHER:
            self._fund_sync(need + LOW_BALANCE)

    def key_of_sync(self, account: str) -> bytes:
        """The Ed25519 node key ``account`` registered (32 zero bytes when none)."""
        return self.settlement.node(account).ed25519_key

    def forget_nonces_sync(self) -> None:
        """Read our account's nonce from the chain before the next transaction: an RPC chain
        counts nonces in this process, and a reorganisation may have dropped transactions
        we sent (counting on from them would queue the next one behind a gap for ever)."""
        self.chain.forget_nonces()

    def block_sync(self, number: int | None = None) -> tuple[int, str]:
        """(number, hash) of block ``number``, or of the latest block when None; LocalError when
        the chain has no such block. (The embedded EVM cannot reorganise, but a process's next
        embedded chain has other hashes: the chain follower tells them apart by these.)"""
        from contracts.chain import _int

        if hasattr(self.chain, "tester"):
            from eth_tester.exceptions import BlockNotFound

            try:
                block = self.chain.tester.get_block_by_number("latest" if number is None else number)
            except BlockNotFound:
                raise LocalError(f"the chain has no block {number}") from None
            return block["number"], block["hash"]
        block = self.chain.rpc("eth_getBlockByNumber", "latest" if number is None else hex(number), False)
        if block is None:
            raise LocalError(f"the chain has no block {number}")
        return _int(block["number"]), block["hash"]

    def close(self) -> None:
        """Release the RPC connection (the embedded chain lives as long as the process)."""
        if not hasattr(self.chain, "tester"):
            self.chain.close()


def chain_identity_sync(chain: Any) -> tuple[int, str]:
    """(chain id, genesis block hash) of ``chain``: a restarted or reset chain has another genesis."""
    if hasattr(chain, "tester"):
        return 0, "embedded"  # one per process: it cannot restart under a node of the process
    from contracts.chain import _int

    return _int(chain.rpc("eth_chainId")), chain.rpc("eth_getBlockByNumber", "0x0", False)["hash"]


def _funder(chain: Any) -> str:
    keys = getattr(chain, "_keys", {})
    unlocked = [a for a in chain.accounts if a not in keys]
    if not unlocked:
        raise LocalError("this chain has no unlocked account to fund from")
    return unlocked[0]


def _has_code(chain: Any, address: str) -> bool:
    if hasattr(chain, "tester"):
        return len(chain.tester.get_code(address)) > 2  # "0x" when empty
    return chain.rpc("eth_getCode", address, "latest") not in ("0x", "0x0", None)


def _deploy_canonical(chain: Any, version: str = "1") -> str:
    """The canonical dev deployment of settlement ``version`` on an RPC chain: found, or created now."""
    import time

    from contracts import ChainError
    from eth_account import Account

    key = DEV_DEPLOYER_KEY if version == "1" else DEV_DEPLOYER_KEY_V2
    deployer = Account.from_key(key).address
    address = canonical_address(deployer, 0 if version == "1" else V2_SETTLEMENT_NONCE)
    if _has_code(chain, address):
        return address
    if not [a for a in chain.accounts if a not in getattr(chain, "_keys", {})]:
        raise LocalError(f"no settlement contract at {address} and no dev account to deploy it: pass --contract")
    from contracts import RpcChain

    deploying = RpcChain(chain.url, private_keys=(key,))
    try:
        if deploying.balance(deployer) < ETHER:
            deploying.transact(_funder(deploying), deployer, b"", value=10 * ETHER, gas=21_000)
        try:
            _deploy_dev(_settlement_class(version), deploying, deployer)
            log.info("deployed the settlement contract (version %s) at %s", version, address)
        except ChainError as error:  # another node deployed it first (nonce 0 is used)
            log.info("deploying the settlement contract: %s; waiting for the other deployment", error)
    finally:
        deploying.close()
    deadline = time.monotonic() + DEPLOY_WAIT
    while not _has_code(chain, address):
        if time.monotonic() > deadline:
            raise LocalError(f"no settlement contract appeared at {address}")
        time.sleep(0.2)
    return address


def fresh_embedded_contract(version: str, margin: int = DEV_MARGIN_V2) -> str:
    """A dev deployment of settlement ``version`` of its own on this process's embedded chain: its
    registry holds only the nodes that join it (the process-wide deployment keeps every earlier
    network's nodes registered, and draws witnesses and referees among them); ``margin``: Δ."""
    shared = _embedded_chain()
    with shared.lock:
        return _deploy_dev(_settlement_class(version), shared.chain, margin=margin).address


def ensure_dev_contract(url: str, version: str = "1") -> str:
    """The canonical dev deployment's address on the chain at ``url``, deploying it if needed."""
    from contracts import RpcChain

    chain = RpcChain(url)
    try:
        return _deploy_canonical(chain, version)
    finally:
        chain.close()


def open_binding_sync(config: Any, seed: bytes) -> ChainBinding:
    """Connect to the configured chain and contract with this node's account (blocking)."""
    from contracts import ChainError, RpcChain
    from eth_account import Account

    version = getattr(config, "settlement", "1")
    cls = _settlement_class(version)
    key = account_key(seed)
    account = Account.from_key(key).address
    try:
        if config.chain == EMBEDDED:
            shared = _embedded_chain()
            with shared.lock:
                chain = shared.chain
                if account not in chain.accounts:
                    chain.tester.add_account("0x" + key.hex())
                    chain.accounts.append(account)
                if config.contract:
                    address = config.contract
                elif version not in shared.addresses:
                    address = shared.addresses[version] = _deploy_dev(cls, chain).address
                else:
                    address = shared.addresses[version]
                lock = shared.lock
        else:
            if not config.chain.startswith(("http://", "https://")):
                raise ConfigError(f"chain must be 'embedded' or an http(s) JSON-RPC URL, not {config.chain!r}")
            chain = RpcChain(config.chain, private_keys=(key,))
            address = config.contract or _deploy_canonical(chain, version)
            lock = threading.Lock()
        if not _has_code(chain, address):
            raise LocalError(f"no contract at {address} on {config.chain}")
    except ChainError as error:
        raise LocalError(f"chain {config.chain}: {error}") from None
    dev = any(a not in getattr(chain, "_keys", {}) for a in chain.accounts) or config.chain == EMBEDDED
    return ChainBinding(chain, cls(chain, address, account), lock, dev=dev)
