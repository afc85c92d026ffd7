"""Compiled contracts committed under ``contracts/artifacts/`` and the digest of their sources.

``scripts/build_contracts.mjs`` writes the artifacts with the pinned solc-js; this module
only reads them, so Python users need no Node.js.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_DIR = PACKAGE_DIR / "solidity"
ARTIFACT_DIR = PACKAGE_DIR / "artifacts"


@dataclass(frozen=True)
class Artifact:
    """One compiled contract: its ABI, creation bytecode and the digest of the sources it came from."""

    contract_name: str
    source_name: str
    abi: tuple[dict[str, Any], ...]
    bytecode: bytes
    deployed_bytecode: bytes
    source_hash: str
    compiler_version: str
    settings: dict[str, Any]


@functools.cache
def load_artifact(contract_name: str) -> Artifact:
    """Reads ``contracts/artifacts/<contract_name>.json``."""
    raw = json.loads((ARTIFACT_DIR / f"{contract_name}.json").read_text())
    return Artifact(
        contract_name=raw["contractName"],
        source_name=raw["sourceName"],
        abi=tuple(raw["abi"]),
        bytecode=bytes.fromhex(raw["bytecode"].removeprefix("0x")),
        deployed_bytecode=bytes.fromhex(raw["deployedBytecode"].removeprefix("0x")),
        source_hash=raw["sourceHash"],
        compiler_version=raw["compiler"]["version"],
        settings=raw["settings"],
    )


def source_units() -> list[str]:
    """Solidity source unit names (paths relative to ``contracts/solidity``), sorted."""
    return sorted(p.relative_to(SOURCE_DIR).as_posix() for p in SOURCE_DIR.rglob("*.sol"))


def current_source_hash() -> str:
    """sha256 over (unit name, NUL, content, NUL) of every source, as the build script computes it."""
    digest = hashlib.sha256()
    for unit in source_units():
        digest.update(unit.encode())
        digest.update(b"\0")
        digest.update((SOURCE_DIR / unit).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()
