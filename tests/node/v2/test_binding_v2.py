"""A node configured for settlement version 2 binds to a version-2 deployment, beside version 1."""
from __future__ import annotations

import pytest

from contracts import Settlement
from contracts.settlement_v2 import SettlementV2
from node.config import Settings
from node.errors import ConfigError
from node.roles.chain import DEV_DEPLOYER_KEY_V2, V2_SETTLEMENT_NONCE, canonical_address, open_binding_sync


def test_each_version_has_its_own_embedded_deployment_and_registers_there():
    first = open_binding_sync(Settings(settlement="2"), b"binding-v2-a")
    second = open_binding_sync(Settings(settlement="2"), b"binding-v2-b")
    v1 = open_binding_sync(Settings(), b"binding-v2-a")
    assert type(first.settlement) is SettlementV2 and type(v1.settlement) is Settlement
    assert first.address == second.address != v1.address
    first.ensure_registered_sync(b"\x07" * 32, 3, 2 * 10**18)
    assert first.key_of_sync(first.account) == b"\x07" * 32
    assert first.settlement.chain_settings().winner_share_bps == 5_000  # a version-2-only view answers


def test_an_unknown_version_is_refused_by_name():
    with pytest.raises(ConfigError, match="settlement must be 1 or 2, not '3'"):
        open_binding_sync(Settings(settlement="3"), b"binding-v2-c")


def test_the_canonical_version_2_address_is_the_deployers_fifth_creation():
    from eth_account import Account

    from contracts import EmbeddedChain

    chain = EmbeddedChain()
    deployer = chain.accounts[0]
    deployed = SettlementV2.deploy(chain, account=deployer)
    assert deployed.address == canonical_address(deployer, V2_SETTLEMENT_NONCE)
    assert canonical_address(Account.from_key(DEV_DEPLOYER_KEY_V2).address, V2_SETTLEMENT_NONCE) != deployed.address
