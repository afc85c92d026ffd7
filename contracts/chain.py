"""Two chain back-ends behind one interface: an in-process EVM and any JSON-RPC endpoint.

- ``EmbeddedChain`` (the default, `contracts.embedded_chain`): eth-tester over py-evm, in this process, no server. Its
  state lives in memory only and is gone when the object is; ``snapshot``/``revert`` roll it
  back cheaply, but nothing survives a restart. Nodes in several processes share a chain
  through ``RpcChain`` and anvil instead (``contracts.anvil``; ``--state FILE`` persists it).
- ``RpcChain``: any JSON-RPC URL (anvil for a local multi-process network, a real chain).
  Accounts are the node's unlocked ones (``eth_accounts``, anvil's ten funded ones) plus any
  local private keys given, which are signed here.

Every transaction carries an explicit gas limit (no estimate round trip). A transaction that
reverts is mined with status 0; the back-end then recovers the revert data (a replay on the
embedded EVM, ``debug_traceTransaction`` or an ``eth_call`` on RPC) and raises ``RevertData``.

Time: ``now()`` is the latest block's timestamp; ``mine(timestamp)`` mines an empty block at
that timestamp and later blocks follow it; ``advance_time(seconds)`` moves the clock forward.
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import requests
from eth_utils import to_checksum_address

from .errors import ChainError

ETHER = 10**18


@dataclass(frozen=True)
class Log:
    """One event log as the chain returned it."""

    address: str
    topics: tuple[bytes, ...]
    data: bytes
    block_number: int
    tx_hash: bytes
    log_index: int


@dataclass(frozen=True)
class Receipt:
    """What a mined transaction left behind."""

    tx_hash: bytes
    status: int
    gas_used: int
    effective_gas_price: int
    block_number: int
    contract_address: str | None
    logs: tuple[Log, ...]


class RevertData(Exception):
    """A call or transaction reverted with these bytes (empty for out-of-gas); the ABI layer names them."""

    def __init__(self, data: bytes, receipt: Receipt | None = None):
        super().__init__(data.hex())
        self.data = data
        self.receipt = receipt


def _hex_bytes(value: str | bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    return bytes.fromhex(value.removeprefix("0x"))


def _int(value: int | str) -> int:
    return value if isinstance(value, int) else int(value, 16)


class Chain(ABC):
    """The operations the settlement client needs from a chain."""

    accounts: list[str]

    @abstractmethod
    def transact(self, sender: str, to: str | None, data: bytes, *, value: int = 0, gas: int) -> Receipt:
        """Sends a transaction with this gas limit and returns its receipt; raises RevertData on status 0."""

    @abstractmethod
    def call(self, to: str, data: bytes, *, sender: str | None = None) -> bytes:
        """Executes a read-only call on the latest block; raises RevertData when it reverts."""

    @abstractmethod
    def estimate_gas(self, sender: str, to: str | None, data: bytes, *, value: int = 0) -> int:
        """The gas limit the node says this transaction needs now (one extra execution; not used
        on the transaction path, which always names its limit)."""

    @abstractmethod
    def balance(self, account: str) -> int:
        """Native balance in wei."""

    @abstractmethod
    def now(self) -> int:
        """Timestamp of the latest block."""

    @abstractmethod
    def block_number(self) -> int:
        """Number of the latest block."""

    @abstractmethod
    def mine(self, timestamp: int | None = None) -> None:
        """Mines an empty block, at `timestamp` if given (later blocks continue from there)."""

    @abstractmethod
    def logs(self, address: str, from_block: int, to_block: int | None = None) -> list[Log]:
        """Event logs emitted by `address` in the block range (to the latest block by default)."""

    @abstractmethod
    def transaction_input(self, tx_hash: bytes) -> bytes:
        """The input data (calldata) of a mined transaction: what a contract reads from its
        caller and does not copy into its logs (a revealed trace, a posted list)."""

    @abstractmethod
    def snapshot(self) -> Any:
        """Marks the current state; `revert(mark)` goes back to it."""

    @abstractmethod
    def revert(self, mark: Any) -> None:
        """Returns to a state marked by `snapshot`."""

    @abstractmethod
    def new_account(self, funding: int) -> str:
        """A fresh account holding `funding` wei, usable as a sender."""

    def advance_time(self, seconds: int) -> None:
        """Moves chain time forward and mines a block at now() + seconds."""
        self.mine(self.now() + seconds)

    def forget_nonces(self) -> None:
        """Read each sender's nonce from the chain before its next transaction (a chain that
        counts nonces in this process must, after a reorganisation dropped transactions)."""

    def close(self) -> None:
        """Releases connections; the chain object is unusable afterwards."""


class RpcChain(Chain):
    """A chain behind a JSON-RPC URL: anvil on loopback, or a real network.

    Senders are the node's unlocked accounts (``eth_accounts``) and the local private keys
    given here (signed in this process, nonces counted here).
    """

    def __init__(self, url: str, *, private_keys: tuple[str | bytes, ...] = (), timeout: float = 60.0):
        self.url = url
        self.timeout = timeout
        self._session = requests.Session()
        self._ids = itertools.count(1)
        from eth_account import Account

        self._keys = {}
        for key in private_keys:
            signer = Account.from_key(key)
            self._keys[to_checksum_address(signer.address)] = signer
        self._nonces: dict[str, int] = {}
        self._chain_id: int | None = None
        self.accounts = list(self._keys) + [to_checksum_address(a) for a in self.rpc("eth_accounts")]

    def rpc(self, method: str, *params: Any) -> Any:
        """One JSON-RPC request; raises ChainError with the node's message on an error reply."""
        payload = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": list(params)}
        try:
            reply = self._session.post(self.url, json=payload, timeout=self.timeout).json()
        except (requests.RequestException, ValueError) as failure:
            raise ChainError(f"{method} to {self.url} failed: {failure}") from failure
        if "error" in reply:
            raise ChainError(f"{method}: {reply['error'].get('message')} ({reply['error'].get('code')})")
        if not isinstance(reply, dict) or "result" not in reply:  # no JSON-RPC node answers like this
            raise ChainError(f"{method} to {self.url}: a reply with neither result nor error")
        return reply["result"]

    @property
    def chain_id(self) -> int:
        if self._chain_id is None:
            self._chain_id = _int(self.rpc("eth_chainId"))
        return self._chain_id

    def transact(self, sender: str, to: str | None, data: bytes, *, value: int = 0, gas: int) -> Receipt:
        sender = to_checksum_address(sender)
        tx: dict[str, Any] = {"from": sender, "gas": hex(gas), "value": hex(value), "data": "0x" + data.hex()}
        if to is not None:
            tx["to"] = to
        if sender in self._keys:
            tx_hash = self._send_signed(sender, to, data, value, gas)
        else:
            tx_hash = self.rpc("eth_sendTransaction", tx)
        receipt = self._wait_receipt(tx_hash)
        if receipt.status == 0:
            raise RevertData(self._revert_data(tx_hash, tx, receipt.block_number), receipt)
        return receipt

    def _send_signed(self, sender: str, to: str | None, data: bytes, value: int, gas: int) -> str:
        if sender not in self._nonces:
            self._nonces[sender] = _int(self.rpc("eth_getTransactionCount", sender, "pending"))
        fields: dict[str, Any] = {"chainId": self.chain_id, "nonce": self._nonces[sender], "gas": gas,
                                  "value": value, "data": data}
        base_fee = self.rpc("eth_getBlockByNumber", "latest", False).get("baseFeePerGas")
        if base_fee is None:  # a chain without EIP-1559: legacy pricing
            fields["gasPrice"] = _int(self.rpc("eth_gasPrice"))
        else:
            tip = _int(self.rpc("eth_maxPriorityFeePerGas"))
            fields.update(type=2, maxPriorityFeePerGas=tip, maxFeePerGas=2 * _int(base_fee) + tip)
        if to is not None:
            fields["to"] = to
        signed = self._keys[sender].sign_transaction(fields)
        try:
            tx_hash = self.rpc("eth_sendRawTransaction", "0x" + signed.raw_transaction.hex().removeprefix("0x"))
        except ChainError:
            self._nonces.pop(sender, None)  # re-read the nonce next time
            raise
        self._nonces[sender] += 1
        return tx_hash

    def _wait_receipt(self, tx_hash: str) -> Receipt:
        deadline = time.monotonic() + self.timeout
        pause = 0.0005
        while True:
            raw = self.rpc("eth_getTransactionReceipt", tx_hash)
            if raw is not None:
                break
            if time.monotonic() > deadline:
                raise ChainError(f"no receipt for {tx_hash} after {self.timeout} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
        return Receipt(
            tx_hash=_hex_bytes(raw["transactionHash"]),
            status=_int(raw["status"]),
            gas_used=_int(raw["gasUsed"]),
            effective_gas_price=_int(raw.get("effectiveGasPrice", "0x0")),
            block_number=_int(raw["blockNumber"]),
            contract_address=to_checksum_address(raw["contractAddress"]) if raw.get("contractAddress") else None,
            logs=tuple(self._log(entry) for entry in raw["logs"]),
        )

    def _revert_data(self, tx_hash: str, tx: dict[str, Any], block_number: int) -> bytes:
        # The exact output of the failed execution, where the node traces (anvil, geth).
        try:
            trace = self.rpc("debug_traceTransaction", tx_hash, {"tracer": "callTracer"})
            return _hex_bytes(trace.get("output", "0x"))
        except ChainError:
            pass
        # Otherwise replay on the state after the transaction's block (it changed nothing
        # but the sender's nonce and balance when it was alone in that block).
        try:
            self._eth_call(tx, hex(block_number))
        except RevertData as reverted:
            return reverted.data
        except ChainError:
            pass
        return b""

    def call(self, to: str, data: bytes, *, sender: str | None = None) -> bytes:
        tx: dict[str, Any] = {"to": to, "data": "0x" + data.hex()}
        if sender is not None:
            tx["from"] = sender
        return self._eth_call(tx, "latest")

    def _eth_call(self, tx: dict[str, Any], block: str) -> bytes:
        payload = {"jsonrpc": "2.0", "id": next(self._ids), "method": "eth_call", "params": [tx, block]}
        try:
            reply = self._session.post(self.url, json=payload, timeout=self.timeout).json()
        except (requests.RequestException, ValueError) as failure:
            raise ChainError(f"eth_call to {self.url} failed: {failure}") from failure
        if "error" in reply:
            error_data = reply["error"].get("data")
            if isinstance(error_data, dict):
                error_data = error_data.get("data")
            if isinstance(error_data, str) and error_data.startswith("0x"):
                raise RevertData(_hex_bytes(error_data))
            raise ChainError(f"eth_call: {reply['error'].get('message')}")
        return _hex_bytes(reply["result"])

    @staticmethod
    def _log(entry: dict[str, Any]) -> Log:
        return Log(
            address=to_checksum_address(entry["address"]),
            topics=tuple(_hex_bytes(t) for t in entry["topics"]),
            data=_hex_bytes(entry["data"]),
            block_number=_int(entry["blockNumber"]),
            tx_hash=_hex_bytes(entry["transactionHash"]),
            log_index=_int(entry["logIndex"]),
        )

    def estimate_gas(self, sender: str, to: str | None, data: bytes, *, value: int = 0) -> int:
        tx: dict[str, Any] = {"from": sender, "value": hex(value), "data": "0x" + data.hex()}
        if to is not None:
            tx["to"] = to
        return _int(self.rpc("eth_estimateGas", tx))

    def balance(self, account: str) -> int:
        return _int(self.rpc("eth_getBalance", account, "latest"))

    def now(self) -> int:
        return _int(self.rpc("eth_getBlockByNumber", "latest", False)["timestamp"])

    def block_number(self) -> int:
        return _int(self.rpc("eth_blockNumber"))

    def mine(self, timestamp: int | None = None) -> None:
        if timestamp is not None:
            self.rpc("evm_setNextBlockTimestamp", timestamp)
        self.rpc("evm_mine")

    def advance_time(self, seconds: int) -> None:
        self.rpc("evm_increaseTime", seconds)
        self.rpc("evm_mine")

    def logs(self, address: str, from_block: int, to_block: int | None = None) -> list[Log]:
        query = {"address": address, "fromBlock": hex(from_block), "toBlock": "latest" if to_block is None else hex(to_block)}
        return [self._log(entry) for entry in self.rpc("eth_getLogs", query)]

    def transaction_input(self, tx_hash: bytes) -> bytes:
        tx = self.rpc("eth_getTransactionByHash", "0x" + bytes(tx_hash).hex())
        if tx is None:
            raise ChainError(f"the chain has no transaction 0x{bytes(tx_hash).hex()}")
        return _hex_bytes(tx["input"])

    def snapshot(self) -> Any:
        return self.rpc("evm_snapshot")

    def revert(self, mark: Any) -> None:
        if not self.rpc("evm_revert", mark):
            raise ChainError(f"evm_revert({mark}) refused")
        self.forget_nonces()

    def forget_nonces(self) -> None:
        self._nonces.clear()

    def new_account(self, funding: int) -> str:
        from eth_account import Account

        signer = Account.create()
        account = to_checksum_address(signer.address)
        self._keys[account] = signer
        self.accounts.append(account)
        if funding:
            self.transact(self._funder(), account, b"", value=funding, gas=21_000)
        return account

    def _funder(self) -> str:
        """The first unlocked account of the node, else the first local key."""
        unlocked = [a for a in self.accounts if a not in self._keys]
        return unlocked[0] if unlocked else next(iter(self._keys))

    def close(self) -> None:
        self._session.close()
