"""Version 2's node registry and payments: the constructor, registration, unbonding, withdraw and its guards."""

import pytest
from eth_utils import keccak

from contracts import ETHER, Role, Withdrawn
from contracts.artifacts import load_artifact
from contracts.abi import ContractAbi
from contracts.chain import RevertData
from contracts.embedded_chain import EmbeddedChain
from contracts.settlement import Settlement
from contracts.settlement_v2 import SettlementV2

from .settlement_world import MIN_STAKE, NODE_STAKE, UNBONDING_DELAY, ed25519_key, reverts
from .settlement_world_v2 import MARGIN, PROVIDER_STAKE

pytestmark = pytest.mark.settlement


def test_the_constructor_records_every_setting(world_v2):
    s = world_v2.settlement
    settings = s.chain_settings()
    assert (settings.margin, settings.bandwidth, settings.block_seconds, settings.max_interval_seconds,
            settings.winner_share_bps) == (MARGIN, 10**6, 12, 3_600, 5_000)
    assert (s.setting("UNBONDING_DELAY"), s.setting("MIN_STAKE")) == (UNBONDING_DELAY, MIN_STAKE)


@pytest.mark.parametrize("share", [10_000, 10_001])
def test_a_winner_share_of_the_whole_lock_is_refused(share):
    with reverts("SettlementInvalidShare", winnerShareBps=share):
        SettlementV2.deploy(EmbeddedChain(), winner_share_bps=share)


@pytest.mark.parametrize("setting", ["margin", "bandwidth", "block_seconds", "max_interval_seconds"])
def test_zero_chain_settings_are_refused(setting):
    with reverts("SettlementZeroSetting"):
        SettlementV2.deploy(EmbeddedChain(), **{setting: 0})


def test_version_1_calls_are_absent(world_v2):
    for name in ("open_dispute", "lapse", "dispute", "dispute_count", "providers"):
        assert hasattr(Settlement, name) and not hasattr(world_v2.settlement, name)


def test_register_and_its_guards(world_v2):
    p = world_v2.as_(world_v2.providers[0])
    with reverts("NodeZeroKey"):
        p.register(b"\0" * 32, Role.PROVIDER, stake=NODE_STAKE)
    with reverts("NodeInvalidRoles", roles=16):
        p.register(ed25519_key("p"), 16, stake=NODE_STAKE)
    with reverts("NodeInvalidRoles", roles=0):
        p.register(ed25519_key("p"), 0, stake=NODE_STAKE)
    with reverts("NodeStakeBelowMinimum", sent=MIN_STAKE - 1, minimum=MIN_STAKE):
        p.register(ed25519_key("p"), Role.PROVIDER, stake=MIN_STAKE - 1)
    p.register(ed25519_key("p"), Role.PROVIDER, stake=NODE_STAKE)
    with reverts("NodeAlreadyRegistered"):
        p.register(ed25519_key("p"), Role.PROVIDER, stake=NODE_STAKE)
    assert p.node().stake == NODE_STAKE and p.node().roles == Role.PROVIDER


def test_the_referee_registry_lists_referees_from_register_to_complete_unbonding(world_v2):
    """ROLE_REFEREE (section 9): a staked role; the draws probe the registry; leaving takes the node out of it."""
    w = world_v2
    a, b, c = w.providers
    with reverts("NodeStakeBelowMinimum", sent=MIN_STAKE - 1, minimum=MIN_STAKE):
        w.as_(a).register(ed25519_key("a"), Role.REFEREE, stake=MIN_STAKE - 1)
    for i, account in enumerate((a, b, c)):
        w.as_(account).register(ed25519_key(f"r{i}"), Role.REFEREE | Role.AUDITOR, stake=NODE_STAKE)
    w.as_(w.client).register(w.client_key, Role.CLIENT, stake=0)
    assert w.settlement.referees() == (a, b, c)
    w.as_(a).begin_unbonding()
    assert w.settlement.referees() == (a, b, c)  # listed until it leaves (the draw skips it: not active)
    w.mine_at(w.chain.now() + UNBONDING_DELAY)
    w.as_(a).complete_unbonding()
    assert w.settlement.referees() == (c, b)  # the last takes the leaver's place
    w.as_(b).begin_unbonding()
    w.mine_at(w.chain.now() + UNBONDING_DELAY)
    w.as_(b).complete_unbonding()
    assert w.settlement.referees() == (c,)
    w.as_(b).register(ed25519_key("again"), Role.REFEREE, stake=NODE_STAKE)
    assert w.settlement.referees() == (c, b)


def test_add_stake_and_its_guards(cast_v2):
    p = cast_v2.as_(cast_v2.providers[0])
    with reverts("NodeZeroAmount"):
        p.add_stake(0)
    p.add_stake(ETHER)
    assert p.node().stake == NODE_STAKE + ETHER
    with reverts("NodeNotRegistered"):
        cast_v2.as_(cast_v2.outsider).add_stake(ETHER)


def test_unbonding_blocks_new_seats_and_waits_for_locks(cast_v2):
    w = cast_v2
    jid = w.seated_job()
    p = w.as_(w.providers[0])
    with reverts("NodeNotUnbonding"):
        p.cancel_unbonding()
    p.begin_unbonding()
    other = w.open_job(nonce=2)
    with reverts("NodeNotActive"):
        p.accept(other)
    with reverts("NodeUnbondingNotElapsed"):
        p.complete_unbonding()
    w.chain.advance_time(UNBONDING_DELAY)
    with reverts("NodeObligationsOpen", obligations=1):
        p.complete_unbonding()
    assert w.settlement.job(jid).provider_stake == PROVIDER_STAKE
    p.cancel_unbonding()
    assert p.node().status == 1


def test_a_node_without_enough_free_stake_cannot_sit(cast_v2):
    w = cast_v2
    jid = w.open_job(provider_stake=NODE_STAKE + 1)
    with reverts("NodeInsufficientFreeStake", free=NODE_STAKE, needed=NODE_STAKE + 1):
        w.as_(w.providers[0]).accept(jid)


def test_only_providers_sit_and_only_clients_open(cast_v2):
    w = cast_v2
    jid = w.open_job()
    w.as_(w.outsider).register(ed25519_key("auditor"), Role.AUDITOR, stake=NODE_STAKE)
    with reverts("NodeMissingRole", role=int(Role.PROVIDER)):
        w.as_(w.outsider).accept(jid)
    with reverts("NodeMissingRole", role=int(Role.CLIENT)):
        w.as_(w.outsider).open_job(w.terms(client_key=ed25519_key("auditor")), b"")


def _receiver(w):
    """A ReentrantReceiver bound to version 2, registered as a provider and gone: its stake is a credit."""
    artifact = load_artifact("ReentrantReceiver")
    abi = ContractAbi(artifact.abi)
    receipt = w.chain.transact(w.deployer, None, artifact.bytecode + abi.encode_constructor(w.settlement.address),
                               gas=2_000_000)
    address = receipt.contract_address
    s = w.settlement

    def forward(name, *args, value=0):
        data = abi.encode_call("forward", s.abi.encode_call(name, *args))
        return w.chain.transact(w.deployer, address, data, value=value, gas=1_000_000)

    forward("register", keccak(b"receiver"), int(Role.PROVIDER), value=NODE_STAKE)
    forward("beginUnbonding")
    w.chain.advance_time(UNBONDING_DELAY)
    forward("completeUnbonding")
    assert s.credit_of(address) == NODE_STAKE

    def configure(mode, reentry=b""):
        w.chain.transact(w.deployer, address, abi.encode_call("configure", mode, reentry), gas=200_000)

    def read(name):
        return abi.decode_result(name, w.chain.call(address, abi.encode_call(name)))[0]

    return address, forward, configure, read


def test_withdraw_pays_the_credit_once(cast_v2):
    w = cast_v2
    with reverts("WithdrawNothing"):
        w.as_(w.outsider).withdraw()
    address, forward, configure, read = _receiver(w)
    forward("withdraw")
    assert read("received") == NODE_STAKE and w.settlement.credit_of(address) == 0


def test_a_reentrant_withdraw_is_refused_and_the_credit_paid_once(cast_v2):
    w = cast_v2
    address, forward, configure, read = _receiver(w)
    configure(1, w.settlement.abi.encode_call("withdraw"))
    forward("withdraw")
    assert read("reentryAttempts") == 1 and read("reentrySuccesses") == 0
    assert w.settlement.abi.revert(read("lastReentryError")).name == "SettlementReentrantCall"
    assert read("received") == NODE_STAKE and w.settlement.credit_of(address) == 0
    w.assert_every_coin_accounted()


def test_a_refused_transfer_keeps_the_credit(cast_v2):
    w = cast_v2
    address, forward, configure, read = _receiver(w)
    configure(2)
    with pytest.raises(RevertData) as refused:
        forward("withdraw")
    assert w.settlement.abi.revert(refused.value.data).name == "WithdrawTransferFailed"
    assert w.settlement.credit_of(address) == NODE_STAKE


def test_withdrawn_event(cast_v2):
    w = cast_v2
    w.as_(w.providers[0]).begin_unbonding()
    w.chain.advance_time(UNBONDING_DELAY)
    w.as_(w.providers[0]).complete_unbonding()
    assert w.as_(w.providers[0]).withdraw().events == (Withdrawn(w.providers[0], NODE_STAKE),)
