"""The settlement contract and its Python client.

The contract (``contracts/solidity/GavelSettlement.sol``) escrows job payments, holds node
stakes, records trace roots, disputes and verdicts, slashes and pays out. Its compiled ABI and
bytecode are committed under ``contracts/artifacts/`` (rebuilt by ``scripts/build_contracts.mjs``).
Version 2 (``GavelSettlementV2.sol``, docs/economics.md) runs beside it: ``SettlementV2``, with its
terms, records and events in ``contracts.settlement_v2``.

Back-ends: ``EmbeddedChain`` (in-process EVM, the default; memory only, snapshot/revert) and
``RpcChain`` (any JSON-RPC URL; ``AnvilProcess`` starts a local anvil for multi-process networks).
"""

from .anvil import AnvilProcess, find_anvil
from .chain import ETHER, Chain, RpcChain
from .embedded_chain import EmbeddedChain
from .errors import ChainError, ContractRevert, SettlementError
from .records import (
    ClientRefunded,
    DisputeInfo,
    DisputeLapsed,
    DisputeOpened,
    DisputeRuled,
    DisputeStatus,
    JobAdvanced,
    JobInfo,
    JobOpened,
    JobStatus,
    LoggedEvent,
    NodeExited,
    NodeInfo,
    NodeRegistered,
    NodeStatus,
    Outcome,
    ProviderAccepted,
    ProviderPaid,
    Role,
    SeatInfo,
    SettlementEvent,
    StakeAdded,
    StakeSlashed,
    StakeUnlocked,
    TraceCommitted,
    UnbondingBegun,
    UnbondingCancelled,
    Withdrawn,
)
from .settlement import GAS_LIMITS, Settlement, TxResult
from .settlement_v2 import GAS_LIMITS_V2, SettlementV2

__all__ = [
    "ETHER",
    "GAS_LIMITS",
    "GAS_LIMITS_V2",
    "AnvilProcess",
    "Chain",
    "ChainError",
    "ClientRefunded",
    "ContractRevert",
    "DisputeInfo",
    "DisputeLapsed",
    "DisputeOpened",
    "DisputeRuled",
    "DisputeStatus",
    "EmbeddedChain",
    "JobAdvanced",
    "JobInfo",
    "JobOpened",
    "JobStatus",
    "LoggedEvent",
    "NodeExited",
    "NodeInfo",
    "NodeRegistered",
    "NodeStatus",
    "Outcome",
    "ProviderAccepted",
    "ProviderPaid",
    "Role",
    "RpcChain",
    "SeatInfo",
    "Settlement",
    "SettlementError",
    "SettlementEvent",
    "SettlementV2",
    "StakeAdded",
    "StakeSlashed",
    "StakeUnlocked",
    "TraceCommitted",
    "TxResult",
    "UnbondingBegun",
    "UnbondingCancelled",
    "Withdrawn",
    "find_anvil",
]
