"""The operator registry: a name maps to a forward, an attribute schema and a backward rule.

Theory of operation
-------------------
An operator is a *name*. Its forward implementation, its attribute schema and its
backward rule are registered together once, at import of the module that defines it.
Everything that executes an operator -- eager calls, the training-graph interpreter,
the referee recomputing one node of a dispute -- goes through :func:`run`, which
checks the arity, fills and type-checks the attributes and then calls the forward.

Every operator has exactly one output array. Backward rules do not compute
gradients themselves: they *emit* other registered operators through an ``emit``
callback, ``emit(op_name, *inputs, **attrs) -> value``. Called with
:func:`eager_emit`, the rule computes gradients now; called by the graph builder,
the same rule appends nodes to a step graph, so that every gradient computation is
itself a node that a dispute can bisect to and a referee can recompute.

A rule has the signature ``rule(emit, g, inputs, out, attrs) -> tuple`` and returns
one entry per input: the gradient with respect to that input, or ``None`` where the
input is not differentiable (indices, masks) or the gradient is not wanted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .errors import OpError

REQUIRED = object()
_ATTR_KINDS = (int, float, bool, str, tuple)


@dataclass(frozen=True)
class Attr:
    """One attribute: its Python kind and default (``REQUIRED`` when it has none).

    Attributes travel on the wire (msgpack) and are hashed into the step graph, so
    only plain values are allowed: int, float, bool, str, or a tuple of ints.
    """

    kind: type
    default: Any = REQUIRED

    def __post_init__(self) -> None:
        if self.kind not in _ATTR_KINDS:
            raise TypeError(f"attribute kind {self.kind!r} is not one of {_ATTR_KINDS}")

    def coerce(self, op: str, name: str, value: Any) -> Any:
        kind = self.kind
        if kind is bool:
            if not isinstance(value, bool):
                raise OpError(f"{op}: attribute {name!r} must be bool, got {type(value).__name__}")
            return value
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise OpError(f"{op}: attribute {name!r} must be int, got {type(value).__name__}")
            return int(value)
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise OpError(f"{op}: attribute {name!r} must be a number, got {type(value).__name__}")
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                raise OpError(f"{op}: attribute {name!r} must be str, got {type(value).__name__}")
            return value
        # tuple of ints (axes, shapes, permutations); lists from msgpack are accepted
        if not isinstance(value, (tuple, list)) or any(
            isinstance(v, bool) or not isinstance(v, int) for v in value
        ):
            raise OpError(f"{op}: attribute {name!r} must be a tuple of ints, got {value!r}")
        return tuple(int(v) for v in value)


VjpRule = Callable[[Callable[..., Any], Any, Sequence[Any], Any, Mapping[str, Any]], tuple]


@dataclass(frozen=True)
class OpDef:
    name: str
    forward: Callable[..., Any]
    arity: int
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    vjp: VjpRule | None = None
    doc: str = ""

    def canonical_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Attributes with defaults filled and kinds checked, keys in sorted order."""
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise OpError(f"{self.name}: unknown attribute(s) {sorted(unknown)}")
        out: dict[str, Any] = {}
        for key in sorted(self.attrs):
            spec = self.attrs[key]
            if key in attrs:
                out[key] = spec.coerce(self.name, key, attrs[key])
            elif spec.default is REQUIRED:
                raise OpError(f"{self.name}: missing required attribute {key!r}")
            else:
                out[key] = spec.default
        return out


_OPS: dict[str, OpDef] = {}


def register(
    name: str,
    forward: Callable[..., Any],
    *,
    arity: int,
    attrs: Mapping[str, Attr] | None = None,
    vjp: VjpRule | None = None,
) -> OpDef:
    """Register an operator once; a second registration of a name is a bug."""
    if name in _OPS:
        raise RuntimeError(f"operator {name!r} registered twice")
    op = OpDef(name, forward, arity, dict(attrs or {}), vjp, (forward.__doc__ or "").strip())
    _OPS[name] = op
    return op


def get(name: str) -> OpDef:
    try:
        return _OPS[name]
    except KeyError:
        raise OpError(f"unknown operator {name!r}") from None


def names() -> list[str]:
    return sorted(_OPS)


def run(name: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None) -> Any:
    """Execute one operator from its name, input arrays and attributes."""
    op = get(name)
    if len(inputs) != op.arity:
        raise OpError(f"{name}: expected {op.arity} input(s), got {len(inputs)}")
    return op.forward(*inputs, **op.canonical_attrs(attrs or {}))


def eager_emit(name: str, *inputs: Any, **attrs: Any) -> Any:
    """The ``emit`` callback that computes at once: backward rules run eagerly with it."""
    return run(name, inputs, attrs)


def vjp(
    name: str,
    g: Any,
    inputs: Sequence[Any],
    out: Any,
    attrs: Mapping[str, Any] | None = None,
    emit: Callable[..., Any] = eager_emit,
) -> tuple:
    """Gradients of one operator with respect to its inputs, given the output gradient."""
    op = get(name)
    if op.vjp is None:
        raise OpError(f"{name}: operator has no backward rule")
    grads = op.vjp(emit, g, tuple(inputs), out, op.canonical_attrs(attrs or {}))
    if len(grads) != op.arity:
        raise RuntimeError(f"{name}: backward rule returned {len(grads)} gradients for {op.arity} inputs")
    return tuple(grads)
