"""How the CPU kernels are compiled: numba without fastmath, cached on disk where it can be.

numba compiles without fastmath, so every float operation is the IEEE operation that
the array code performs, in the same order: no contraction into FMA, no reassociation.
error_model="numpy": x/0 is the IEEE inf or NaN, as in NumPy (numba's default would
raise ZeroDivisionError, and its check blocks SIMD).

Three decorators: `scalar` for elementwise helpers, inlined into the loops that call
them (LLVM would leave the larger ones as calls, and a call keeps a loop from being
vectorized); `function` for a serial loop compiled once (the tree, the spans);
`kernel` for a parallel driver (numba's `prange`).

numba keys a cached entry by its function's file and bytecode only. The kernels
inline each other across the modules of this package and compile in the values of
`repops_cupy.constants`, so every entry is also keyed by a fingerprint of those
values and of this package's sources: a change anywhere never finds old machine code.

numba is optional: without it `AVAILABLE` is False, nothing here compiles, and the
operators run their array code.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from .. import constants

try:
    from numba import njit
except ImportError:  # pragma: no cover - exercised where numba is absent (tests/repops/test_imports.py)
    AVAILABLE = False
else:
    AVAILABLE = True


def fingerprint() -> str:
    """The values of `constants` and the bytes of this package's sources: what cached kernels depend on."""
    h = hashlib.sha256()
    values = sorted((name, value) for name, value in vars(constants).items()
                    if name.isupper() and isinstance(value, (float, int, tuple)))
    h.update(repr(values).encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


if AVAILABLE:
    try:
        from numba.core.caching import FunctionCache
    except ImportError:  # pragma: no cover - a numba without this class keeps its own cache keys
        FunctionCache = None

    if FunctionCache is not None:

        class _FingerprintedCache(FunctionCache):
            """numba's on-disk cache, its entries also keyed by `fingerprint()`."""

            key = fingerprint()

            def _index_key(self, sig, codegen):
                return (*super()._index_key(sig, codegen), self.key)

    def compile_with(**options):
        """njit with an on-disk cache (reused by later processes), without one where no cache dir is writable."""

        def decorate(fn):
            try:
                dispatcher = njit(cache=True, nogil=True, error_model="numpy", **options)(fn)
            except RuntimeError:  # numba found no writable cache location
                return njit(cache=False, nogil=True, error_model="numpy", **options)(fn)
            if FunctionCache is not None and type(dispatcher._cache) is FunctionCache:
                dispatcher._cache = _FingerprintedCache(fn)
            return dispatcher

        return decorate

    scalar = compile_with(inline="always")
    function = compile_with()
    kernel = compile_with(parallel=True)
