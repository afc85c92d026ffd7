"""Shape operators: reshape, transpose, broadcast_to, sum_to, causal_mask.

Specification
-------------
- reshape/transpose/broadcast_to move values without touching them (NumPy semantics;
  reshape takes at most one -1). They accept float32, int32 and int64 and may return a
  view of their input: op outputs are never to be written in place.
- sum_to(x, shape) undoes a broadcast of `shape` to x.shape: the axes summed are the
  leading axes x has beyond len(shape), and every axis where `shape` has 1 and x has
  more. For each output element its addends are taken in row-major order over the
  summed axes (in their axis order), widened to float64, added by the fixed pairwise
  tree of `reduce.tree_sum_f64`, and the sum rounded once to float32: the float32
  op reduce.sum over those axes, reshaped to `shape`.
- causal_mask(x; fill) sets x[..., i, j] to float32(fill) where j > i (above the
  diagonal of the last two axes) and leaves the other entries as they are.
"""
from __future__ import annotations

import math
from typing import Any


from . import registry
from ._backend import array_module
from ._nn_checks import as_array, float32_attr, require_float32, require_shape_op_dtype
from .errors import OpError
from . import reduce
from .registry import Attr


def _resolve_reshape(op: str, size: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise OpError(f"{op}: shape {shape} may hold non-negative sizes and at most one -1")
    known = math.prod(d for d in shape if d != -1)
    if unknown:
        if known == 0 or size % known:
            raise OpError(f"{op}: cannot reshape {size} elements into {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if math.prod(shape) != size:
        raise OpError(f"{op}: cannot reshape {size} elements into {shape}")
    return shape


def reshape(x: Any, shape: tuple[int, ...]) -> Any:
    """The same values in row-major order with a new shape (one -1 is inferred)."""
    require_shape_op_dtype("reshape", "x", x)
    xp = array_module(x)
    return xp.reshape(x, _resolve_reshape("reshape", x.size, tuple(shape)))


def transpose(x: Any, perm: tuple[int, ...]) -> Any:
    """Axes permuted: output axis i is input axis perm[i]."""
    require_shape_op_dtype("transpose", "x", x)
    if sorted(perm) != list(range(x.ndim)):
        raise OpError(f"transpose: perm {tuple(perm)} is not a permutation of the {x.ndim} axes")
    xp = array_module(x)
    return xp.transpose(x, tuple(perm))


def _broadcast_axes(op: str, small: tuple[int, ...], big: tuple[int, ...]) -> tuple[int, ...]:
    """Axes of `big` that a broadcast of `small` to `big` repeats along; error if it is no broadcast."""
    lead = len(big) - len(small)
    if lead < 0 or any(s not in (1, b) for s, b in zip(small, big[lead:])):
        raise OpError(f"{op}: shape {small} does not broadcast to {big}")
    return tuple(range(lead)) + tuple(lead + i for i, (s, b) in enumerate(zip(small, big[lead:])) if s == 1 and b != 1)


def broadcast_to(x: Any, shape: tuple[int, ...]) -> Any:
    """x repeated along new leading axes and along its size-1 axes (NumPy rules)."""
    require_shape_op_dtype("broadcast_to", "x", x)
    shape = tuple(shape)
    _broadcast_axes("broadcast_to", tuple(x.shape), shape)
    xp = array_module(x)
    return xp.broadcast_to(x, shape)


def sum_to(x: Any, shape: tuple[int, ...]) -> Any:
    """Sum of x over the axes a broadcast of `shape` to x.shape repeated (fixed float64 tree)."""
    require_float32("sum_to", "x", x)
    shape = tuple(shape)
    summed = _broadcast_axes("sum_to", shape, tuple(x.shape))
    xp = array_module(x)
    if not summed:
        return xp.reshape(x, shape)
    # reduce.sum orders the addends as specified above: C order over the summed axes
    return as_array(xp, reduce.sum(x, summed).reshape(shape))


def causal_mask(x: Any, fill: float = float("-inf")) -> Any:
    """x with entries above the diagonal of the last two axes (column > row) set to float32(fill)."""
    require_float32("causal_mask", "x", x)
    if x.ndim < 2:
        raise OpError(f"causal_mask: x must have at least 2 axes, got shape {tuple(x.shape)}")
    xp = array_module(x)
    rows, cols = x.shape[-2:]
    above = xp.arange(cols)[None, :] > xp.arange(rows)[:, None]
    return as_array(xp, xp.where(above, float32_attr(fill), x))


# --- backward rules ---------------------------------------------------------------


def _reshape_vjp(emit, g, inputs, out, attrs):
    return (emit("reshape", g, shape=tuple(inputs[0].shape)),)


def _transpose_vjp(emit, g, inputs, out, attrs):
    perm = attrs["perm"]
    inverse = tuple(sorted(range(len(perm)), key=lambda i: perm[i]))
    return (emit("transpose", g, perm=inverse),)


def _broadcast_to_vjp(emit, g, inputs, out, attrs):
    return (emit("sum_to", g, shape=tuple(inputs[0].shape)),)


def _sum_to_vjp(emit, g, inputs, out, attrs):
    return (emit("broadcast_to", g, shape=tuple(inputs[0].shape)),)


def _causal_mask_vjp(emit, g, inputs, out, attrs):
    return (emit("causal_mask", g, fill=0.0),)


def _register() -> None:
    shape = {"shape": Attr(tuple)}
    registry.register("reshape", reshape, arity=1, attrs=shape, vjp=_reshape_vjp)
    registry.register("transpose", transpose, arity=1, attrs={"perm": Attr(tuple)}, vjp=_transpose_vjp)
    registry.register("broadcast_to", broadcast_to, arity=1, attrs=shape, vjp=_broadcast_to_vjp)
    registry.register("sum_to", sum_to, arity=1, attrs=shape, vjp=_sum_to_vjp)
    registry.register("causal_mask", causal_mask, arity=1, attrs={"fill": Attr(float, float("-inf"))}, vjp=_causal_mask_vjp)


_register()
