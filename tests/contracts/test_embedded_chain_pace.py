"""The embedded chain paced like a chain with one-second blocks (``block_lead``): a burst of
transactions from several senders waits for one block instead of each taking a block of its
own one second after the last (which put the chain's clock a second ahead per transaction, and
closed windows of chain time early in wall time); a failure among them reports its own revert
data; the clock never gets more than the lead ahead. The wall clock is the test's, moved by hand."""
from __future__ import annotations

import threading

import pytest

from contracts import EmbeddedChain
from contracts.chain import RevertData

pytestmark = pytest.mark.settlement

# init code returning a runtime that always reverts with the word 42
RUNTIME = bytes.fromhex("602a60005260206000fd")
ALWAYS_REVERTS = bytes.fromhex("69") + RUNTIME + bytes.fromhex("600052600a6016f3")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _paced(lead: int):
    lock, chain_clock = threading.RLock(), Clock(0.0)
    chain = EmbeddedChain(follow_wall_clock=True, lock=lock, clock=chain_clock)
    chain_clock.now = float(chain.now())  # the wall clock where the chain stands
    chain.block_lead = lead
    return chain, lock, chain_clock


def _pending(chain: EmbeddedChain, lock) -> int:
    with lock:
        return len(chain.tester.get_block_by_number("pending")["transactions"])


def test_a_burst_waits_for_one_block_once_the_chain_is_the_lead_ahead_and_the_clock_stays_within_it():
    chain, lock, clock = _paced(lead=1)
    with lock:  # mined at once, 1 s ahead of the clock: the lead
        reverter = chain.transact(chain.accounts[0], None, ALWAYS_REVERTS, gas=200_000).contract_address
    assert chain.now() == int(clock.now) + 1
    receipts, failures = {}, {}

    def send(i: int) -> None:
        sender = chain.accounts[1 + i % 3]
        with lock:
            try:
                receipts[i] = chain.transact(sender, reverter if i == 4 else chain.accounts[9], b"", value=1,
                                             gas=60_000)
            except RevertData as reverted:
                failures[i] = reverted

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]  # two from each of three senders
    for t in threads:
        t.start()
    while _pending(chain, lock) < 6:  # every sender waits: the next block would be 2 s ahead of the clock
        for t in threads:
            t.join(0.05)
    assert not receipts and not failures
    clock.now += 1  # the clock's next second: one block takes them all
    for t in threads:
        t.join(30)
    assert sorted(receipts) == [0, 1, 2, 3, 5] and list(failures) == [4]
    blocks = {r.block_number for r in receipts.values()} | {failures[4].receipt.block_number}
    assert blocks == {chain.block_number()} and len(chain.tester.get_block_by_number("latest")["transactions"]) == 6
    assert failures[4].data == (42).to_bytes(32, "big")  # its own revert data, from the state it left
    assert chain.now() <= int(clock.now) + 1
    for sender in chain.accounts[1:4]:
        assert chain.tester.get_nonce(sender) == 2


def test_without_a_lead_each_transaction_takes_a_block_a_second_ahead_of_the_last():
    lock, clock = threading.RLock(), Clock(0.0)
    chain = EmbeddedChain(follow_wall_clock=True, lock=lock, clock=clock)
    clock.now = float(chain.now())
    with lock:
        for _ in range(5):
            chain.transact(chain.accounts[1], chain.accounts[9], b"", value=1, gas=21_000)
    assert chain.now() == int(clock.now) + 5  # five seconds of chain time in no time at all


def test_the_logs_of_a_block_carrying_several_transactions_are_numbered_over_the_block():
    # A reader resumes at (block, log index): with each receipt's logs counted from 0, as eth-tester
    # counts them, the second transaction's event of a block read as already handed and was skipped.
    from contracts import Role, Settlement

    chain, lock, clock = _paced(lead=1)
    with lock:
        settlement = Settlement.deploy(chain, account=chain.accounts[0], unbonding_delay=60, min_stake=10**17,
                                       winner_share_bps=5000)
    receipts, transact = {}, chain.transact

    def register(i: int) -> None:
        account = chain.accounts[1 + i]
        with lock:
            settlement.connect(account).register(bytes.fromhex(account[2:]).ljust(32, b"\0"), Role.PROVIDER,
                                                 stake=10**18)

    def recorded(sender, *args, **kwargs):  # the chain's own receipts, which Settlement decodes to events
        receipts[sender] = transact(sender, *args, **kwargs)
        return receipts[sender]

    chain.transact = recorded

    threads = [threading.Thread(target=register, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    while _pending(chain, lock) < 3:
        for t in threads:
            t.join(0.05)
    clock.now += 2
    for t in threads:
        t.join(30)
    block = chain.block_number()
    logs = [log for log in chain.logs(settlement.address, block) if log.block_number == block]
    assert len({log.tx_hash for log in logs}) == 3  # one block, three transactions
    assert [log.log_index for log in logs] == list(range(len(logs)))
    by_receipt = sorted((log for r in receipts.values() for log in r.logs if log.address == settlement.address),
                        key=lambda log: log.log_index)
    assert by_receipt == logs  # a receipt's logs carry the same indices as the chain's log read


# init code returning a runtime that logs block.timestamp (TIMESTAMP, MSTORE, LOG0 of the word)
LOGS_ITS_TIME = bytes.fromhex("69") + bytes.fromhex("42600052602060" + "00a000") + bytes.fromhex("600052600a6016f3")


def test_a_transaction_runs_at_the_time_of_the_block_that_carries_it():
    # A transaction joined the pending block at the time that block had when the last one was mined,
    # and the block was stamped with the clock's time only when it was mined: a move sent at its
    # deadline was refused as too early, in a block whose own time was past the deadline.
    chain, lock, clock = _paced(lead=1)
    with lock:
        logger = chain.transact(chain.accounts[0], None, LOGS_ITS_TIME, gas=200_000).contract_address
    clock.now += 5  # five quiet seconds: the chain is behind the clock now
    with lock:
        receipt = chain.transact(chain.accounts[1], logger, b"", gas=60_000)
    seen = int.from_bytes(receipt.logs[0].data, "big")
    block_time = chain.tester.get_block_by_number(receipt.block_number)["timestamp"]
    assert seen == block_time >= int(clock.now)

    times: dict[int, int] = {}

    def send(i: int) -> None:
        with lock:
            r = chain.transact(chain.accounts[2 + i], logger, b"", gas=60_000)
        times[i] = (int.from_bytes(r.logs[0].data, "big"), r.block_number)

    with lock:  # mined at once, which puts the chain the lead ahead of the clock
        chain.transact(chain.accounts[1], logger, b"", gas=60_000)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:  # the next block would be past the lead: they wait in one block
        t.start()
    while _pending(chain, lock) < 3:
        for t in threads:
            t.join(0.05)
    clock.now += 4  # the block is mined late: it keeps the time its transactions ran at
    for t in threads:
        t.join(30)
    (block,) = {number for _, number in times.values()}
    assert {seen for seen, _ in times.values()} == {chain.tester.get_block_by_number(block)["timestamp"]}


def test_a_paced_chain_makes_a_block_each_second_it_is_behind_the_clock_with_nothing_sent():
    # A draw is made blocks after it was armed: with blocks only for transactions, a draw armed when
    # nothing else was being sent waited for ever.
    lock, clock = threading.RLock(), Clock(0.0)
    chain = EmbeddedChain(follow_wall_clock=True, lock=lock, clock=clock)
    clock.now = float(chain.now())
    with chain.paced(2, tick=0.01):
        first = chain.block_number()
        clock.now += 3  # three quiet seconds
        with lock:
            while chain.block_number() == first:
                chain._mined.wait(1)
        latest = chain.tester.get_block_by_number("latest")
        assert latest["timestamp"] == int(clock.now) and not latest["transactions"]
        with lock:
            number = chain.block_number()
            chain._mined.wait(0.2)  # twenty ticks with the chain level with the clock: no block
            assert chain.block_number() == number
    assert chain.block_lead is None
