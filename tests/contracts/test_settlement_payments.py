"""Pull payments on the embedded EVM: withdraw, double withdraw, re-entrancy, refused transfers;
and the client's plumbing (events query, reverts without data, snapshots)."""

import pytest
from .settlement_world import ACCEPT_WINDOW, PRICE, reverts

from contracts import (
    ContractRevert,
    JobOpened,
    NodeRegistered,
    Role,
    Withdrawn,
)
from contracts.abi import ContractAbi
from contracts.artifacts import load_artifact
from contracts.chain import RevertData

pytestmark = pytest.mark.settlement

MODE_ACCEPT, MODE_REENTER, MODE_REFUSE = 0, 1, 2


class Receiver:
    """The ReentrantReceiver test contract, acting as a client of the settlement contract."""

    def __init__(self, world):
        self.world = world
        self.abi = ContractAbi(load_artifact("ReentrantReceiver").abi)
        init = load_artifact("ReentrantReceiver").bytecode + self.abi.encode_constructor(world.settlement.address)
        receipt = world.chain.transact(world.deployer, None, init, gas=1_500_000)
        self.address = receipt.contract_address

    def _send(self, name, *args, value=0):
        data = self.abi.encode_call(name, *args)
        try:
            return self.world.chain.transact(self.world.deployer, self.address, data, value=value, gas=1_000_000)
        except RevertData as reverted:
            raise self.world.settlement.abi.revert(reverted.data) from None

    def configure(self, mode, reentry_call=b""):
        self._send("configure", mode, reentry_call)

    def forward(self, settlement_call: bytes, value=0):
        """Makes the receiver call the settlement contract (the receiver is msg.sender)."""
        return self._send("forward", settlement_call, value=value)

    def read(self, name):
        return self.abi.decode_result(name, self.world.chain.call(self.address, self.abi.encode_call(name)))[0]


def _refunded_job_for(world, receiver):
    """A job opened by the receiver that no provider took: after the acceptance deadline it is refunded."""
    s = world.settlement
    now = world.chain.now()
    job = b"\x42" * 32
    call = s.abi.encode_call("openJob", job, 1, 10**18, now + ACCEPT_WINDOW, now + 200, now + 300, 50, "0x" + "00" * 20)
    receiver.forward(call, value=PRICE)
    world.chain.advance_time(ACCEPT_WINDOW)
    s.settle(job)
    assert s.credit_of(receiver.address) == PRICE
    return job


def test_withdraw_pays_exactly_the_credit_once(cast):
    jid = cast.committed_job(roots=("same", "same"))
    cast.chain.advance_time(300)
    cast.settlement.settle(jid)
    p1 = cast.as_(cast.providers[0])
    owed = p1.credit_of()
    before = cast.chain.balance(p1.account)
    result = p1.withdraw()
    assert result.events == (Withdrawn(p1.account, owed),)
    assert cast.chain.balance(p1.account) == before + owed - result.fee
    assert p1.credit_of() == 0
    with reverts("WithdrawNothing", account=p1.account):
        p1.withdraw()
    with reverts("WithdrawNothing", account=cast.outsider):
        cast.as_(cast.outsider).withdraw()


def test_reentrant_withdraw_is_refused(world):
    receiver = Receiver(world)
    s = world.settlement
    _refunded_job_for(world, receiver)
    withdraw_call = s.abi.encode_call("withdraw")
    receiver.configure(MODE_REENTER, withdraw_call)
    contract_before = s.balance()

    receiver.forward(withdraw_call)

    assert receiver.read("reentryAttempts") == 1
    assert receiver.read("reentrySuccesses") == 0
    assert s.abi.revert(receiver.read("lastReentryError")).name == "SettlementReentrantCall"
    assert receiver.read("received") == PRICE
    assert world.chain.balance(receiver.address) == PRICE
    assert s.balance() == contract_before - PRICE
    assert s.credit_of(receiver.address) == 0
    with reverts("WithdrawNothing", account=receiver.address):
        receiver.forward(withdraw_call)


def test_reentry_into_another_function_is_refused(cast):
    receiver = Receiver(cast)
    s = cast.settlement
    _refunded_job_for(cast, receiver)
    # A second job whose settlement is due: the receiver tries to settle it from inside withdraw.
    other = cast.open_job("other")
    cast.chain.advance_time(ACCEPT_WINDOW)
    receiver.configure(MODE_REENTER, s.abi.encode_call("settle", other))
    receiver.forward(s.abi.encode_call("withdraw"))
    assert s.abi.revert(receiver.read("lastReentryError")).name == "SettlementReentrantCall"
    assert s.job(other).status.name == "OPEN"
    s.settle(other)  # outside a withdrawal the same call goes through
    assert s.job(other).status.name == "REFUNDED"


def test_a_refused_transfer_keeps_the_credit(world):
    receiver = Receiver(world)
    s = world.settlement
    _refunded_job_for(world, receiver)
    receiver.configure(MODE_REFUSE)
    with reverts("WithdrawTransferFailed", account=receiver.address, amount=PRICE):
        receiver.forward(s.abi.encode_call("withdraw"))
    assert s.credit_of(receiver.address) == PRICE
    receiver.configure(MODE_ACCEPT)
    receiver.forward(s.abi.encode_call("withdraw"))
    assert world.chain.balance(receiver.address) == PRICE
    assert s.credit_of(receiver.address) == 0


def test_events_query_returns_typed_records_in_order(cast):
    start = cast.chain.block_number() + 1
    jid = cast.open_job()
    logged = cast.settlement.events(from_block=0)
    assert [type(entry.event) for entry in logged[:4]] == [NodeRegistered] * 4
    assert logged[-1].event == cast.settlement.events(from_block=start)[0].event
    assert isinstance(logged[-1].event, JobOpened) and logged[-1].event.job_id == jid
    assert logged[-1].block_number == start
    assert [entry.block_number for entry in logged] == sorted(entry.block_number for entry in logged)


def test_a_gas_limit_too_low_surfaces_as_a_revert_without_data(cast):
    s = cast.as_(cast.providers[0])
    s.gas_limits["addStake"] = 22_000
    with pytest.raises(ContractRevert) as refused:
        s.add_stake(1)
    assert refused.value.name == "" and refused.value.data == b""
    assert "without data" in str(refused.value)


def test_reverts_name_the_error_and_its_arguments(cast):
    with pytest.raises(ContractRevert) as refused:
        cast.as_(cast.providers[0]).register(b"\x01" * 32, Role.PROVIDER, stake=10**18)
    assert refused.value.name == "NodeAlreadyRegistered"
    assert refused.value.arguments == {"account": cast.providers[0]}
    assert str(refused.value) == f"NodeAlreadyRegistered(account={cast.providers[0]!r})"
    unknown = cast.settlement.abi.revert(b"\xde\xad\xbe\xef")
    assert unknown.name == "" and "unknown data 0xdeadbeef" in str(unknown)


def test_snapshot_and_revert_of_the_embedded_chain(cast):
    mark = cast.chain.snapshot()
    jid = cast.open_job()
    assert cast.settlement.balance() > 0 and cast.settlement.job(jid).price == PRICE
    cast.chain.revert(mark)
    assert cast.settlement.job(jid).status.name == "NONE"
