"""Flattening an op's arguments and results into leaves and back: a small torch pytree.

``torch.utils._pytree`` costs ~10 us per small structure here, and every intercepted
op flattens its arguments and results several times. Only what ops take and return
is handled: tuples (also namedtuples and torch's result structs), lists and dicts;
anything else is a leaf.
"""
from __future__ import annotations

from typing import Any, Iterator

Spec = Any  # None for a leaf, else (type, [child specs]) or (dict, {key: child spec})


def flatten(obj: Any) -> tuple[list, Spec]:
    leaves: list = []
    return leaves, _flatten(obj, leaves)


def _flatten(obj: Any, leaves: list) -> Spec:
    if isinstance(obj, (tuple, list)):
        return type(obj), [_flatten(x, leaves) for x in obj]
    if type(obj) is dict:
        return dict, {k: _flatten(v, leaves) for k, v in obj.items()}
    leaves.append(obj)
    return None


def unflatten(leaves: list, spec: Spec) -> Any:
    return _unflatten(iter(leaves), spec)


def _unflatten(it: Iterator, spec: Spec) -> Any:
    if spec is None:
        return next(it)
    kind, children = spec
    if kind is dict:
        return {k: _unflatten(it, c) for k, c in children.items()}
    values = [_unflatten(it, c) for c in children]
    if kind is list:
        return values
    if kind is tuple:
        return tuple(values)
    if hasattr(kind, "_fields"):  # namedtuple
        return kind(*values)
    return kind(values)  # torch.return_types.* (structseq) and other tuple types built from one sequence


def leaves_of(obj: Any) -> list:
    return flatten(obj)[0]
