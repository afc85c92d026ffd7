"""Node registration, stake and unbonding on the embedded EVM: every operation and every guard."""

import pytest
from .settlement_world import (
    MIN_STAKE,
    NODE_STAKE,
    UNBONDING_DELAY,
    WINNER_SHARE_BPS,
    ed25519_key,
    reverts,
)

from contracts import (
    ETHER,
    NodeExited,
    NodeRegistered,
    NodeStatus,
    Role,
    Settlement,
    StakeAdded,
    UnbondingBegun,
    UnbondingCancelled,
    Withdrawn,
)

pytestmark = pytest.mark.settlement


def test_deploy_records_its_settings(world):
    s = world.settlement
    assert s.setting("UNBONDING_DELAY") == UNBONDING_DELAY
    assert s.setting("MIN_STAKE") == MIN_STAKE
    assert s.setting("WINNER_SHARE_BPS") == WINNER_SHARE_BPS
    assert s.setting("MAX_PROVIDERS") == 16
    assert s.balance() == 0


def test_a_setting_is_read_from_the_chain_once_per_binding(world, monkeypatch):
    s = Settlement(world.chain, world.settlement.address, world.settlement.account)
    calls = []
    call = world.chain.call
    monkeypatch.setattr(world.chain, "call", lambda *a, **k: calls.append(a) or call(*a, **k))
    assert [s.setting("MIN_STAKE") for _ in range(3)] == [MIN_STAKE] * 3
    assert len(calls) == 1  # nodes read such constants on every poll: each read is an EVM call
    fresh = Settlement(world.chain, s.address, s.account)  # a new binding (a restarted chain) reads afresh
    assert fresh.setting("MIN_STAKE") == MIN_STAKE and len(calls) == 2


def test_deploy_refuses_a_winner_share_above_everything(world):
    with reverts("SettlementInvalidShare", winnerShareBps=10_001):
        Settlement.deploy(world.chain, winner_share_bps=10_001)


def test_register_holds_the_stake_and_binds_the_key(world):
    p = world.providers[0]
    result = world.as_(p).register(ed25519_key("p"), Role.PROVIDER | Role.AUDITOR, stake=2 * ETHER)
    assert result.events == (NodeRegistered(p, ed25519_key("p"), Role.PROVIDER | Role.AUDITOR, 2 * ETHER),)
    node = world.settlement.node(p)
    assert (node.ed25519_key, node.stake, node.locked, node.roles, node.status) == (
        ed25519_key("p"), 2 * ETHER, 0, Role.PROVIDER | Role.AUDITOR, NodeStatus.ACTIVE)
    assert world.settlement.balance() == 2 * ETHER


def test_a_pure_client_registers_without_stake(world):
    world.as_(world.client).register(ed25519_key("client"), Role.CLIENT, stake=0)
    assert world.settlement.node(world.client).status == NodeStatus.ACTIVE


def test_register_guards(world):
    p = world.as_(world.providers[0])
    with reverts("NodeZeroKey"):
        p.register(b"\0" * 32, Role.PROVIDER, stake=MIN_STAKE)
    with reverts("NodeInvalidRoles", roles=0):
        p.register(ed25519_key("p"), 0, stake=MIN_STAKE)
    with reverts("NodeInvalidRoles", roles=8):
        p.register(ed25519_key("p"), 8, stake=MIN_STAKE)
    with reverts("NodeStakeBelowMinimum", sent=MIN_STAKE - 1, minimum=MIN_STAKE):
        p.register(ed25519_key("p"), Role.AUDITOR, stake=MIN_STAKE - 1)
    p.register(ed25519_key("p"), Role.PROVIDER, stake=MIN_STAKE)
    with reverts("NodeAlreadyRegistered", account=p.account):
        p.register(ed25519_key("p"), Role.PROVIDER, stake=MIN_STAKE)
    # Every refused registration left the money where it was.
    assert world.settlement.balance() == MIN_STAKE


def test_add_stake(cast):
    p = cast.as_(cast.providers[0])
    assert p.add_stake(7).events == (StakeAdded(p.account, 7, NODE_STAKE + 7),)
    assert cast.settlement.node(p.account).stake == NODE_STAKE + 7
    with reverts("NodeZeroAmount"):
        p.add_stake(0)
    with reverts("NodeNotRegistered", account=cast.outsider):
        cast.as_(cast.outsider).add_stake(1)
    p.begin_unbonding()
    with reverts("NodeNotActive", account=p.account):
        p.add_stake(1)


def test_unbonding_waits_the_delay_then_credits_the_whole_stake(cast):
    p = cast.as_(cast.providers[0])
    begun = p.begin_unbonding()
    available_at = cast.chain.now() + UNBONDING_DELAY
    assert begun.events == (UnbondingBegun(p.account, available_at),)
    assert cast.settlement.node(p.account).status == NodeStatus.UNBONDING
    with reverts("NodeNotActive"):
        p.begin_unbonding()

    cast.mine_at(available_at - 2)  # the next transaction lands one second early
    with reverts("NodeUnbondingNotElapsed", availableAt=available_at):
        p.complete_unbonding()
    # That refused attempt was mined at available_at - 1; the next lands on time.
    assert p.complete_unbonding().events == (NodeExited(p.account, NODE_STAKE),)
    assert cast.settlement.node(p.account).status == NodeStatus.NONE
    assert cast.settlement.credit_of(p.account) == NODE_STAKE

    before = cast.chain.balance(p.account)
    withdrawn = p.withdraw()
    assert withdrawn.events == (Withdrawn(p.account, NODE_STAKE),)
    assert cast.chain.balance(p.account) == before + NODE_STAKE - withdrawn.fee
    assert cast.settlement.balance() == (len(cast.providers) - 1 + 1) * NODE_STAKE  # the others and the auditor

    # Gone means gone; a new registration is a new start.
    with reverts("NodeNotUnbonding", account=p.account):
        p.complete_unbonding()
    p.register(ed25519_key("again"), Role.PROVIDER, stake=MIN_STAKE)
    assert cast.settlement.node(p.account).ed25519_key == ed25519_key("again")


def test_unbonding_waits_for_open_jobs(cast):
    jid = cast.seated_job()
    p = cast.as_(cast.providers[0])
    p.begin_unbonding()
    # An unbonding provider still owes its commitment, and takes no new seat.
    p.commit(jid, b"\x01" * 32)
    cast.as_(cast.providers[1]).commit(jid, b"\x01" * 32)
    other = cast.open_job("another")
    with reverts("NodeNotActive", account=p.account):
        p.accept(other)
    cast.chain.advance_time(UNBONDING_DELAY)
    with reverts("NodeObligationsOpen", obligations=1):
        p.complete_unbonding()
    cast.settlement.settle(jid)
    assert p.complete_unbonding().one(NodeExited).stake_credited == NODE_STAKE
    assert cast.settlement.credit_of(p.account) == NODE_STAKE + (3 * ETHER + 1) // 2


def test_cancel_unbonding(cast):
    p = cast.as_(cast.providers[0])
    with reverts("NodeNotUnbonding", account=p.account):
        p.cancel_unbonding()
    with reverts("NodeNotUnbonding", account=p.account):
        p.complete_unbonding()
    p.begin_unbonding()
    assert p.cancel_unbonding().events == (UnbondingCancelled(p.account),)
    node = cast.settlement.node(p.account)
    assert (node.status, node.unbonding_since) == (NodeStatus.ACTIVE, 0)
    # Active again: it takes seats.
    cast.as_(p.account).accept(cast.open_job())
