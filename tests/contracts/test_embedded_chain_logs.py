"""The embedded chain's log reads: the same logs as eth-tester's own filter, through snapshots,
reverts and time jumps, and each mined block read from py-evm once, not once per query (the
filter found every receipt by walking back from the head: one read from block 0 of a chain
a test suite had grown cost O(blocks²))."""

import pytest

from contracts import EmbeddedChain, Role, Settlement

pytestmark = pytest.mark.settlement


def _filter_logs(chain: EmbeddedChain, address: str, first: int, last: int | None = None):
    """What eth-tester's log filter returns: the reference."""
    filter_id = chain.tester.create_log_filter(
        from_block=first, to_block=last if last is not None else "latest", address=address)
    try:
        return [chain._log(entry) for entry in chain.tester.get_all_filter_logs(filter_id)]
    finally:
        chain.tester.delete_filter(filter_id)


def _register(settlement: Settlement, account: str) -> None:
    settlement.connect(account).register(bytes.fromhex(account[2:]).ljust(32, b"\0"), Role.PROVIDER, stake=10**18)


@pytest.fixture
def deployed():
    chain = EmbeddedChain()
    settlement = Settlement.deploy(chain, account=chain.accounts[0], unbonding_delay=60, min_stake=10**17,
                                   winner_share_bps=5000)
    return chain, settlement


def _same_as_filter(chain: EmbeddedChain, address: str) -> list:
    head = chain.block_number()
    for first, last in ((0, None), (0, head), (head // 2, None), (head // 2, head - 1), (head + 1, None)):
        assert chain.logs(address, first, last) == _filter_logs(chain, address, first, last), (first, last)
    return chain.logs(address, 0)


def test_logs_match_the_filter_through_a_revert_a_time_jump_and_new_blocks(deployed):
    chain, settlement = deployed
    address = settlement.address
    _register(settlement, chain.accounts[1])
    before = _same_as_filter(chain, address)
    assert before and all(log.address == address for log in before)
    mark = chain.snapshot()
    _register(settlement, chain.accounts[2])
    chain.mine(chain.now() + 3600)
    _register(settlement, chain.accounts[3])
    assert len(_same_as_filter(chain, address)) > len(before)
    # A transaction that moves only ether leaves the contract's logs as they were.
    chain.transact(chain.accounts[4], chain.accounts[5], b"", value=1, gas=21_000)
    chain.revert(mark)
    assert _same_as_filter(chain, address) == before
    _register(settlement, chain.accounts[6])
    after = _same_as_filter(chain, address)
    assert after[: len(before)] == before and len(after) > len(before)
    assert chain.logs(chain.accounts[7], 0) == []


def test_a_revert_the_chain_object_did_not_make_is_noticed_by_the_block_hashes(deployed):
    chain, settlement = deployed
    mark = chain.snapshot()
    _register(settlement, chain.accounts[1])
    chain.logs(settlement.address, 0)
    # Straight to eth-tester, past EmbeddedChain.revert: the index learns it from the head's hash.
    chain.tester.revert_to_snapshot(mark)
    _register(settlement, chain.accounts[2])
    _register(settlement, chain.accounts[3])
    assert _same_as_filter(chain, settlement.address)


def test_each_mined_block_is_read_from_the_chain_once_and_old_transactions_are_found_by_hash(deployed, monkeypatch):
    chain, settlement = deployed
    receipts = [chain.transact(chain.accounts[1], chain.accounts[2], b"\x01\x02", value=1, gas=30_000)
                for _ in range(40)]
    chain.logs(settlement.address, 0)
    py_evm = chain.tester.backend.chain
    reads = []
    original = type(py_evm).get_canonical_block_by_number
    monkeypatch.setattr(type(py_evm), "get_canonical_block_by_number",
                        lambda self, number: reads.append(number) or original(self, number))
    for _ in range(3):
        chain.logs(settlement.address, 0)
    assert set(reads) == {chain.block_number()}  # the head, which block_number itself reads
    _register(settlement, chain.accounts[3])
    reads.clear()
    logged = chain.logs(settlement.address, 0)
    assert set(reads) == {chain.block_number()}
    assert logged == _filter_logs(chain, settlement.address, 0)
    reads.clear()
    assert chain.transaction_input(receipts[0].tx_hash) == b"\x01\x02"
    assert set(reads) == {receipts[0].block_number, chain.block_number()}
