"""The in-process EVM behind ``Chain``: eth-tester over py-evm (`contracts.chain` says what both
back-ends share)."""

from __future__ import annotations

import ast
import bisect
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from eth_abi import encode as abi_encode
from eth_utils import to_checksum_address

from .chain import Chain, Log, Receipt, RevertData, _hex_bytes
from .errors import ChainError


class EmbeddedChain(Chain):
    """An in-process EVM (eth-tester + py-evm) with ten funded, unlocked test accounts.

    State is in memory only: it ends with this object. ``snapshot``/``revert`` are cheap.

    With ``follow_wall_clock`` its clock keeps ticking like anvil's: time is the wall clock
    plus every jump made by ``mine(timestamp)``, ``now()`` reads it and the next block
    carries it (or one second after its parent, if later). Without it (the default, exact
    for tests that model time), each block is one second after its parent once the chain
    is ahead of the wall clock, so a chain moved ahead stands still while nothing is sent.

    Each transaction is mined in a block of its own, and a block is one second after its
    parent at least (the EVM wants timestamps strictly rising): a burst of n transactions in
    a second puts the chain's clock n seconds ahead of the wall clock, and windows of chain
    time then close in less wall time than they allow. With ``block_lead`` = L (and
    ``follow_wall_clock``) it keeps a real chain's pace instead: while the next block would be
    more than L seconds ahead of the clock, a transaction waits in the pending block, and the
    block mined once the clock caught up carries every transaction that waited, as a chain
    with one-second blocks does. A waiting sender releases ``lock`` (the lock its callers
    hold, re-entrant), so other threads add theirs meanwhile. ``paced`` sets the lead and also
    mines a block each second the chain is behind the clock, so block numbers advance with time.
    """

    def __init__(self, *, follow_wall_clock: bool = False, lock: Any = None, clock: Any = time.time) -> None:
        from eth_tester import EthereumTester, PyEVMBackend

        self.tester = EthereumTester(PyEVMBackend())
        self.accounts = [to_checksum_address(a) for a in self.tester.get_accounts()]
        self.follow_wall_clock = follow_wall_clock
        self.block_lead: int | None = None  # None: a block per transaction, as soon as it is sent
        self._clock = clock  # the wall clock (a test's own, to pace blocks by it)
        self._clock_offset = 0  # seconds of jumps ahead of the wall clock
        self._index = _BlockIndex()
        self._mined = threading.Condition(lock if lock is not None else threading.RLock())

    def _wall_time(self) -> int:
        return int(self._clock()) + self._clock_offset

    def _keep_time(self) -> None:
        """With ``follow_wall_clock``: the pending block carries the chain's time, until a
        transaction has run in it (with the block's time as it was then: raising it later would
        stamp the block with a time its transactions did not see)."""
        if not self.follow_wall_clock:
            return
        backend = self.tester.backend
        header = backend.chain.header
        if header.gas_used == 0 and header.timestamp < self._wall_time():
            backend.chain.header = header.copy(timestamp=self._wall_time())

    @contextmanager
    def paced(self, lead: int, *, tick: float = 1.0) -> Iterator[None]:
        """While open: ``block_lead`` = `lead`, and a block comes each second the chain is behind the
        clock, sent to or not, as on a real chain (a draw waits for blocks: with none sent, the block
        number stood still and a draw armed at the end of a run was never due)."""
        before, self.block_lead = self.block_lead, lead
        stop = threading.Event()

        def mine_on_time() -> None:
            while not stop.wait(tick):
                with self._mined:
                    if self.tester.get_block_by_number("latest")["timestamp"] + 1 <= self._wall_time():
                        self.mine()

        ticker = threading.Thread(target=mine_on_time, name="embedded-chain-blocks", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            with self._mined:
                self.block_lead = before

    def transact(self, sender: str, to: str | None, data: bytes, *, value: int = 0, gas: int) -> Receipt:
        tx: dict[str, Any] = {"from": sender, "gas": gas, "value": value, "data": "0x" + data.hex()}
        if to is not None:
            tx["to"] = to
        from eth_tester.exceptions import ValidationError

        if self.block_lead is not None and self.follow_wall_clock:
            return self._transact_paced(tx)
        self._keep_time()
        try:
            tx_hash = self.tester.send_transaction(tx)
        except ValidationError as refused:  # e.g. a sender that cannot pay the gas: a real node refuses it too
            raise ChainError(f"transaction refused: {refused}") from refused
        return self._receipt(tx, tx_hash)

    def _transact_paced(self, tx: dict[str, Any]) -> Receipt:
        """`transact` with ``block_lead``: the transaction joins the pending block, which is mined
        once the clock allows it (by whichever waiting sender sees that first)."""
        from eth_tester.exceptions import ValidationError

        with self._mined:
            tx["nonce"] = self.tester.get_nonce(tx["from"], "pending")  # others may wait in the block too
            self._keep_time()  # it runs at the block's time: the clock's, if it is the block's first
            try:
                # eth-tester's own send mines at once; this adds to the pending block only
                tx_hash = self.tester._add_transaction_to_pending_block(tx)
            except ValidationError as refused:
                raise ChainError(f"transaction refused: {refused}") from refused
            # a failure's revert data from the state it left, before later transactions of its block
            failed = self.tester.get_transaction_receipt(tx_hash)["status"] == 0
            revert = self._revert_data(tx, "pending") if failed else None
            while self.tester.get_transaction_receipt(tx_hash)["block_number"] is None:  # pending
                ahead = self.tester.get_block_by_number("latest")["timestamp"] + 1 - self._wall_time()
                if ahead <= self.block_lead:
                    self._keep_time()
                    self.tester.mine_blocks(1)
                    self._mined.notify_all()
                else:  # until the clock's next second (or another sender mined it)
                    self._mined.wait(max(0.01, ahead - self.block_lead - self._clock() % 1))
            return self._receipt(tx, tx_hash, revert)

    def _receipt(self, tx: dict[str, Any], tx_hash: Any, revert: bytes | None = None) -> Receipt:
        raw = self.tester.get_transaction_receipt(tx_hash)
        receipt = Receipt(
            tx_hash=_hex_bytes(tx_hash),
            status=raw["status"],
            gas_used=raw["gas_used"],
            effective_gas_price=raw["effective_gas_price"],
            block_number=raw["block_number"],
            contract_address=to_checksum_address(raw["contract_address"]) if raw["contract_address"] else None,
            logs=tuple(self._log(entry, self._logs_before(raw)) for entry in raw["logs"]),
        )
        if receipt.status == 0:
            # Replay on the state of the failed transaction's own block: it changed nothing
            # but the sender's nonce and balance, and the block carries the same timestamp.
            raise RevertData(self._revert_data(tx, receipt.block_number) if revert is None else revert, receipt)
        return receipt

    def _revert_data(self, tx: dict[str, Any], block_number: int | str) -> bytes:
        from eth_tester.exceptions import TransactionFailed

        try:
            self.tester.call({k: v for k, v in tx.items() if k != "nonce"}, block_number)
        except TransactionFailed as failure:
            return _tester_revert_bytes(failure)
        return b""

    def call(self, to: str, data: bytes, *, sender: str | None = None) -> bytes:
        from eth_tester.exceptions import TransactionFailed

        tx = {"from": sender or self.accounts[0], "to": to, "data": "0x" + data.hex(), "gas": 30_000_000}
        try:
            return _hex_bytes(self.tester.call(tx, "latest"))
        except TransactionFailed as failure:
            raise RevertData(_tester_revert_bytes(failure)) from None

    def estimate_gas(self, sender: str, to: str | None, data: bytes, *, value: int = 0) -> int:
        from eth_tester.exceptions import TransactionFailed

        tx: dict[str, Any] = {"from": sender, "value": value, "data": "0x" + data.hex()}
        if to is not None:
            tx["to"] = to
        try:
            return self.tester.estimate_gas(tx)
        except TransactionFailed as failure:
            raise RevertData(_tester_revert_bytes(failure)) from None

    def _logs_before(self, raw: dict[str, Any]) -> int:
        """How many logs the transactions before this receipt's in its block emitted: a paced block
        carries several, and a log's index counts over the block (eth-tester counts per receipt)."""
        if not raw["transaction_index"]:
            return 0
        earlier = self.tester.get_block_by_number(raw["block_number"])["transactions"][:raw["transaction_index"]]
        return sum(len(self.tester.get_transaction_receipt(h)["logs"]) for h in earlier)

    @staticmethod
    def _log(entry: dict[str, Any], logs_before: int = 0) -> Log:
        return Log(
            address=to_checksum_address(entry["address"]),
            topics=tuple(_hex_bytes(t) for t in entry["topics"]),
            data=_hex_bytes(entry["data"]),
            block_number=entry["block_number"],
            tx_hash=_hex_bytes(entry["transaction_hash"]),
            log_index=logs_before + entry["log_index"],
        )

    def balance(self, account: str) -> int:
        return self.tester.get_balance(account)

    def now(self) -> int:
        latest = self.tester.get_block_by_number("latest")["timestamp"]
        return max(latest, self._wall_time()) if self.follow_wall_clock else latest

    def block_number(self) -> int:
        return self.tester.get_block_by_number("latest")["number"]

    def mine(self, timestamp: int | None = None) -> None:
        with self._mined:  # a block mined here carries the transactions waiting for one
            if timestamp is None:
                self._keep_time()
                self.tester.mine_blocks(1)
            else:
                # eth-tester's time_travel(t) mines a block at t - 1 and makes t the next one's time.
                if timestamp <= self.now():
                    raise ChainError(f"cannot mine at {timestamp}: latest block is at {self.now()}")
                if self.follow_wall_clock:
                    self._clock_offset = max(self._clock_offset, timestamp - int(self._clock()))
                self.tester.time_travel(timestamp + 1)
            self._mined.notify_all()

    def logs(self, address: str, from_block: int, to_block: int | None = None) -> list[Log]:
        # Not eth-tester's log filter: it finds each receipt by walking back from the head,
        # so one read over N blocks cost O(N²) (80 s for 1,000 blocks).
        address = to_checksum_address(address)
        latest = self.block_number()
        last = latest if to_block is None else min(to_block, latest)
        self._index.extend(self.tester.backend.chain, latest)
        return self._index.logs(address, from_block, last)

    def transaction_input(self, tx_hash: bytes) -> bytes:
        chain = self.tester.backend.chain
        self._index.extend(chain, self.block_number())
        found = self._index.transaction(chain, bytes(tx_hash))
        if found is None:  # in the pending block, or unknown: eth-tester says which
            return _hex_bytes(self.tester.get_transaction_by_hash("0x" + bytes(tx_hash).hex())["data"])
        return bytes(found.data)

    def snapshot(self) -> Any:
        return self.tester.take_snapshot()

    def revert(self, mark: Any) -> None:
        self.tester.revert_to_snapshot(mark)
        self._index.forget_above(self.block_number())

    def new_account(self, funding: int) -> str:
        key = os.urandom(32)
        account = to_checksum_address(self.tester.add_account("0x" + key.hex()))
        if funding:
            self.transact(self.accounts[0], account, b"", value=funding, gas=21_000)
        return account


class _BlockIndex:
    """The logs and transaction positions of the embedded chain's mined blocks, read once.

    Built forward from py-evm's canonical chain on demand; each entry keeps its block's hash,
    and a head that no longer matches (a revert the owner did not report) drops the index.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hashes: list[bytes] = []  # block number -> canonical hash when indexed
        self._logs: dict[str, list[Log]] = {}  # address -> its logs, in chain order
        self._transactions: dict[bytes, tuple[int, int]] = {}  # tx hash -> (block, index)

    def forget_above(self, number: int) -> None:
        with self._lock:
            self._truncate(number + 1)

    def _truncate(self, count: int) -> None:
        if count >= len(self._hashes):
            return
        del self._hashes[count:]
        for address, entries in list(self._logs.items()):
            kept = [entry for entry in entries if entry.block_number < count]
            if kept:
                self._logs[address] = kept
            else:
                del self._logs[address]
        self._transactions = {tx: where for tx, where in self._transactions.items() if where[0] < count}

    def extend(self, chain: Any, latest: int) -> None:
        with self._lock:
            if self._hashes and (len(self._hashes) - 1 > latest
                                 or chain.chaindb.get_canonical_block_hash(len(self._hashes) - 1) != self._hashes[-1]):
                self._truncate(0)
            for number in range(len(self._hashes), latest + 1):
                block = chain.get_canonical_block_by_number(number)
                receipts = block.get_receipts(chain.chaindb) if block.transactions else ()
                log_index = 0  # counted over the block, as a node's logIndex is (eth-tester counts per receipt)
                for position, (transaction, receipt) in enumerate(zip(block.transactions, receipts)):
                    self._transactions[transaction.hash] = (number, position)
                    for entry in receipt.logs:
                        log = Log(
                            address=to_checksum_address(entry.address),
                            topics=tuple(topic.to_bytes(32, "big") for topic in entry.topics),
                            data=bytes(entry.data),
                            block_number=number,
                            tx_hash=bytes(transaction.hash),
                            log_index=log_index,
                        )
                        log_index += 1
                        self._logs.setdefault(log.address, []).append(log)
                self._hashes.append(block.hash)

    def logs(self, address: str, first: int, last: int) -> list[Log]:
        with self._lock:
            entries = self._logs.get(address, [])
            start = bisect.bisect_left(entries, first, key=lambda log: log.block_number)
            stop = bisect.bisect_right(entries, last, key=lambda log: log.block_number)
            return entries[start:stop]

    def transaction(self, chain: Any, tx_hash: bytes) -> Any:
        with self._lock:
            where = self._transactions.get(tx_hash)
        if where is None:
            return None
        return chain.get_canonical_block_by_number(where[0]).transactions[where[1]]


def _tester_revert_bytes(failure: Exception) -> bytes:
    """eth-tester reports revert data as the repr of a bytes object, or the decoded Error(string)."""
    message = failure.args[0] if failure.args else ""
    if isinstance(message, bytes):
        return message
    text = str(message).removeprefix("execution reverted: ")
    if text.startswith(("b'", 'b"')):
        value = ast.literal_eval(text)
        if isinstance(value, bytes):
            return value
    if text and not text.lower().startswith(("out of gas", "invalid")):
        # eth-tester already decoded an Error(string) revert: encode it back.
        return bytes.fromhex("08c379a0") + abi_encode(["string"], [text])
    return b""


__all__ = ["EmbeddedChain"]
