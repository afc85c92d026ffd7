"""Argument checks and small conversions shared by the elementwise, shape and nn ops."""
from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from .errors import OpError

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
SHAPE_OP_DTYPES = (np.dtype(np.float32), *INDEX_DTYPES)


def require_float32(op: str, name: str, x: Any) -> None:
    dtype = getattr(x, "dtype", None)
    if dtype != np.float32:
        raise OpError(f"{op}: {name} must be a float32 array, got {_describe(x)}")


def require_index(op: str, name: str, x: Any) -> None:
    dtype = getattr(x, "dtype", None)
    if dtype not in INDEX_DTYPES:
        raise OpError(f"{op}: {name} must be an int32 or int64 array, got {_describe(x)}")


def require_shape_op_dtype(op: str, name: str, x: Any) -> None:
    dtype = getattr(x, "dtype", None)
    if dtype not in SHAPE_OP_DTYPES:
        raise OpError(f"{op}: {name} must be a float32, int32 or int64 array, got {_describe(x)}")


def require_range(op: str, name: str, ids: Any, xp: Any, high: int) -> None:
    """Every index in [0, high); one device sync on CuPy."""
    if ids.size and bool(xp.any((ids < 0) | (ids >= high))):
        raise OpError(f"{op}: {name} out of range [0, {high})")


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise OpError(f"{op}: axis {axis} out of range for an array of rank {ndim}")
    return axis % ndim


def broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise OpError(f"{op}: shapes {' and '.join(map(str, shapes))} do not broadcast") from None


def float32_attr(value: float) -> np.float32:
    """A scalar attribute as float32, rounded to nearest (finite values past the range become inf)."""
    with np.errstate(over="ignore"):
        return np.float32(value)


def as_array(xp: Any, result: Any) -> Any:
    """NumPy turns 0-d results into scalars; ops always return arrays."""
    return result if isinstance(result, xp.ndarray) else xp.asarray(result)


def _describe(x: Any) -> str:
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return type(x).__name__
    return f"{dtype} array of shape {tuple(x.shape)}"


def ieee_quiet(xp: Any):
    """inf - inf, 0 * inf and overflow are IEEE results here, not mistakes: NumPy need not warn."""
    return np.errstate(all="ignore") if xp is np else contextlib.nullcontext()
