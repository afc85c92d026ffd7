"""Exceptions of the settlement client.

``SettlementError`` is the base. ``ContractRevert`` means the contract refused the move: it
carries the custom error's name (``"JobDeadlinePassed"``) and its arguments by name
(``{"deadline": 1700000000}``), decoded from the revert data against the ABI. ``ChainError``
means the chain or the node behind the URL failed (RPC error, no receipt in time).
"""

from __future__ import annotations

from typing import Any


class SettlementError(Exception):
    """Base of every error raised by ``contracts``."""


class ContractRevert(SettlementError):
    """The contract reverted. ``name`` is the custom error's name ("" when the revert data is
    empty or unknown, as for out-of-gas), ``arguments`` its arguments by name, ``data`` the raw bytes."""

    def __init__(self, name: str, arguments: dict[str, Any], data: bytes):
        self.name = name
        self.arguments = dict(arguments)
        self.data = bytes(data)
        if name:
            shown = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
            message = f"{name}({shown})"
        elif data:
            message = f"reverted with unknown data 0x{data.hex()}"
        else:
            message = "reverted without data (out of gas or invalid opcode)"
        super().__init__(message)


class ChainError(SettlementError):
    """The chain back-end failed: a JSON-RPC error, a missing receipt, a process that would not start."""
