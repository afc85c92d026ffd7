"""Array-module dispatch: every operator runs one code path over NumPy or CuPy.

An operator never chooses its backend; it takes the module of its inputs. CuPy is
optional: importing it must not be required to use the NumPy path, and a machine
without a GPU (where `import cupy` may work but every array op fails) reports
CuPy as unavailable.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np

from .errors import OpError


@functools.cache
def cupy_module() -> ModuleType | None:
    """The cupy module if it imports *and* a CUDA device answers, else None."""
    try:
        import cupy  # noqa: PLC0415 - optional dependency
    except Exception:
        return None
    try:
        if not cupy.is_available():
            return None
        cupy.zeros(1).sum()  # a device that imports but cannot run kernels is unavailable
    except Exception:
        return None
    return cupy


def gpu_available() -> bool:
    return cupy_module() is not None


def array_module(*arrays: Any) -> ModuleType:
    """numpy or cupy, from the arrays given (Python scalars are ignored); mixing is an error."""
    modules = set()
    for a in arrays:
        if a is None or isinstance(a, (bool, int, float)):
            continue
        if isinstance(a, (np.ndarray, np.generic)):
            modules.add(np)
            continue
        cp = cupy_module()
        if cp is not None and isinstance(a, cp.ndarray):
            modules.add(cp)
            continue
        raise OpError(f"unsupported array type {type(a).__name__}; expected a numpy or cupy ndarray")
    if len(modules) > 1:
        raise OpError("inputs mix NumPy and CuPy arrays; move them to one device first")
    return modules.pop() if modules else np


def to_numpy(a: Any) -> np.ndarray:
    """A host copy (no copy for NumPy input)."""
    if isinstance(a, np.ndarray):
        return a
    cp = cupy_module()
    if cp is not None and isinstance(a, cp.ndarray):
        return cp.asnumpy(a)
    return np.asarray(a)


def to_device(a: np.ndarray, xp: ModuleType) -> Any:
    """Move a host array to the module `xp` (identity for NumPy)."""
    if xp is np:
        return a
    return xp.asarray(a)
