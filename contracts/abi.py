"""A small ABI codec over ``eth_abi``: calls, return values, event logs and custom errors.

Kept apart from web3's contract objects so both back-ends (embedded EVM, JSON-RPC) share
one encoding path and a transaction costs one EVM execution and no formatter chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import eth_abi
from eth_utils import keccak, to_checksum_address

from .errors import ContractRevert


def _type_string(param: dict[str, Any]) -> str:
    """The canonical ABI type of one parameter, tuples spelled out."""
    kind = param["type"]
    if kind.startswith("tuple"):
        inner = ",".join(_type_string(c) for c in param["components"])
        return f"({inner}){kind[len('tuple'):]}"
    return kind


def _normalise(param: dict[str, Any], value: Any) -> Any:
    """Decoded values in Python's terms: checksummed addresses, nested tuples kept."""
    kind = param["type"]
    if kind == "address":
        return to_checksum_address(value)
    if kind.startswith("tuple") and kind != "tuple":  # arrays of tuples
        return tuple(_normalise({**param, "type": kind[: kind.rindex("[")]}, v) for v in value)
    if kind == "tuple":
        return tuple(_normalise(c, v) for c, v in zip(param["components"], value))
    if kind.endswith("]") and kind.startswith("address"):
        return tuple(to_checksum_address(v) for v in value)
    return value


def _signature(item: dict[str, Any]) -> str:
    return f"{item['name']}({','.join(_type_string(p) for p in item['inputs'])})"


@dataclass(frozen=True)
class FunctionAbi:
    name: str
    selector: bytes
    input_types: tuple[str, ...]
    outputs: tuple[dict[str, Any], ...]

    def encode(self, *args: Any) -> bytes:
        return self.selector + eth_abi.encode(self.input_types, args)

    def decode_result(self, data: bytes) -> tuple[Any, ...]:
        types = [_type_string(p) for p in self.outputs]
        values = eth_abi.decode(types, data)
        return tuple(_normalise(p, v) for p, v in zip(self.outputs, values))


@dataclass(frozen=True)
class EventAbi:
    name: str
    topic: bytes
    inputs: tuple[dict[str, Any], ...]

    def decode(self, topics: list[bytes], data: bytes) -> dict[str, Any]:
        indexed = [p for p in self.inputs if p["indexed"]]
        plain = [p for p in self.inputs if not p["indexed"]]
        values: dict[str, Any] = {}
        for param, topic in zip(indexed, topics[1:]):
            (values[param["name"]],) = eth_abi.decode([_type_string(param)], topic)
            values[param["name"]] = _normalise(param, values[param["name"]])
        decoded = eth_abi.decode([_type_string(p) for p in plain], data)
        for param, value in zip(plain, decoded):
            values[param["name"]] = _normalise(param, value)
        return values


@dataclass(frozen=True)
class ErrorAbi:
    name: str
    selector: bytes
    inputs: tuple[dict[str, Any], ...]

    def decode(self, data: bytes) -> dict[str, Any]:
        values = eth_abi.decode([_type_string(p) for p in self.inputs], data[4:])
        return {p["name"] or f"arg{i}": _normalise(p, v) for i, (p, v) in enumerate(zip(self.inputs, values))}


# Errors every Solidity contract may raise besides its own.
_BUILTIN_ERRORS = (
    {"type": "error", "name": "Error", "inputs": [{"name": "message", "type": "string"}]},
    {"type": "error", "name": "Panic", "inputs": [{"name": "code", "type": "uint256"}]},
)


class ContractAbi:
    """Functions by name, events by topic and errors by selector of one contract's ABI."""

    def __init__(self, abi: Iterable[dict[str, Any]]):
        self.functions: dict[str, FunctionAbi] = {}
        self.events: dict[bytes, EventAbi] = {}
        self.errors: dict[bytes, ErrorAbi] = {}
        self.constructor_types: tuple[str, ...] = ()
        for item in list(abi) + list(_BUILTIN_ERRORS):
            kind = item["type"]
            if kind == "function":
                self.functions[item["name"]] = FunctionAbi(
                    item["name"],
                    keccak(text=_signature(item))[:4],
                    tuple(_type_string(p) for p in item["inputs"]),
                    tuple(item["outputs"]),
                )
            elif kind == "event":
                topic = keccak(text=_signature(item))
                self.events[topic] = EventAbi(item["name"], topic, tuple(item["inputs"]))
            elif kind == "error":
                selector = keccak(text=_signature(item))[:4]
                self.errors[selector] = ErrorAbi(item["name"], selector, tuple(item["inputs"]))
            elif kind == "constructor":
                self.constructor_types = tuple(_type_string(p) for p in item["inputs"])

    def encode_call(self, name: str, *args: Any) -> bytes:
        return self.functions[name].encode(*args)

    def encode_constructor(self, *args: Any) -> bytes:
        return eth_abi.encode(self.constructor_types, args)

    def decode_result(self, name: str, data: bytes) -> tuple[Any, ...]:
        return self.functions[name].decode_result(data)

    def decode_call(self, data: bytes) -> tuple[str, tuple[Any, ...]]:
        """(function name, arguments) of a call's input data; raises ValueError for a selector
        this ABI does not know or arguments that do not decode."""
        function = next((f for f in self.functions.values() if f.selector == data[:4]), None)
        if function is None:
            raise ValueError(f"no function with selector 0x{data[:4].hex()} in this ABI")
        try:
            return function.name, tuple(eth_abi.decode(function.input_types, data[4:]))
        except eth_abi.exceptions.DecodingError as error:
            raise ValueError(f"the input of {function.name} does not decode: {error}") from None

    def decode_log(self, topics: list[bytes], data: bytes) -> tuple[str, dict[str, Any]] | None:
        """(event name, arguments by name), or None for a log this ABI does not know."""
        if not topics or topics[0] not in self.events:
            return None
        event = self.events[topics[0]]
        return event.name, event.decode(topics, data)

    def revert(self, data: bytes) -> ContractRevert:
        """The exception for revert data: the custom error's name and arguments when the ABI knows it."""
        if len(data) >= 4 and data[:4] in self.errors:
            error = self.errors[data[:4]]
            try:
                return ContractRevert(error.name, error.decode(data), data)
            except eth_abi.exceptions.DecodingError:
                pass
        return ContractRevert("", {}, data)
