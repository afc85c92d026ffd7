"""The reproducible matrix product: float32 in, float32 out, the same bits everywhere.

Specification
-------------
For A (M, K) and B (K, N), float32, every output element is a pure function of the
bits of one row of A and one column of B:

1. Scale. For row i of A, let e_i be the binary exponent of its largest finite |value|
   (frexp: |max| = m * 2^e_i, m in [0.5, 1)); sigma_i = 38 - e_i (38 for an all-zero
   row), so the row's largest value scaled by 2^sigma_i lies in [2^37, 2^38). Columns
   of B likewise give tau_j. Non-finite entries count as 0 here.
2. Truncate. X = rint(a * 2^sigma_i) (nearest, ties to even): an integer, |X| < 2^38.
   Likewise Y = rint(b * 2^tau_j).
3. Digits. X = sum_{s=0..4} alpha_s * 2^(8 (4 - s)), balanced base 256: alpha_4 ..
   alpha_1 are the residues taken in [-128, 128) from the bottom up, alpha_0 (in
   [-64, 64]) the rest. beta_t for Y the same way.
4. Sum. V = sum over the 19 digit pairs with s + t <= 5 of
   2^(8 (8 - s - t)) * sum_k alpha_s[i, k] * beta_t[k, j], computed exactly.
5. Round. C[i, j] = V * 2^-(sigma_i + tau_j) rounded once to float32 (nearest, ties
   to even; subnormal and overflow results as IEEE says). An exact zero gives +0.0.

The constants (5 digits of 8 bits, the 19 pairs) do not depend on K, M or N, and no
K chunking appears in the specification: V is an exact integer, so how an engine cuts
K (16384 per chunk here, to keep int32 sums exact) cannot show. Batches: each product
of a batch is computed as above, batch axes broadcast like np.matmul. Non-finite inputs: an output element whose
row of A or column of B holds an inf or NaN is what IEEE arithmetic gives for the
exact products summed in any order: NaN if a NaN takes part, if inf meets 0, or if
+inf and -inf products meet, else the infinity of the infinite products. Only that
row's and that column's outputs are affected. K = 0 gives +0.0; K >= 2^30 is refused.

Why these constants: the kept pairs carry about 38 bits of each operand, enough that
on normal random data (K = 256..4096) at least 99.97% of outputs were correctly
rounded and none was more than 1 ulp off (plain float32 matmul: 10-12%, thousands of
ulp). 17 pairs measured 99.94%, too close to the 99.9% bar. Entries far below their
row's largest lose bits in step 2: data spanning 10^+-8 measured 98.5-99.7% correctly
rounded, heavy cancellation far worse (still much better than float32).

How it is computed: the digit products are exact integer GEMMs, so no engine, thread
count, SIMD level, memory order or K chunking can change a bit. The int8 engine is
torch._int_mm (int8 x int8 -> int32, 19 K-lengths of int8 GEMM); the float64 engines
(NumPy/OpenBLAS, torch/MKL, CuPy/cuBLAS) group digits into 16-bit values and need 7
K-lengths of float64 GEMM. On CPU "auto" takes int8 where it is exact and, timed once
per machine, faster (with VNNI; without it the exact int8 kernels ran 8 to 46x slower
than float64 on an AVX2-only EPYC); on GPU, where CUDA torch's is exact. Splitting and
combining run as compiled loops (numba) on CPU, as array code elsewhere. See
`_matmul_spec` and `_matmul_engines`.

What it costs on CPU, and why fewer products need another scheme: one int8 product
runs at about 4.1x the rate of a float32 one here (1024^3, one thread: 4.9 ms against
21 ms), so the 19 digit pairs cost at least 19 / 4.1 = 4.6x float32 before splitting
and combining. Fewer pairs lose the accuracy: with 8-bit digits every dropped diagonal
costs 8 bits, and s + t <= 4 (15 pairs) measured 99.65-99.87% correctly rounded and
up to 2 ulp off (48 x 48 outputs for each K of 256, 1024, 4096, normal data), under
the 99.9% / 1 ulp bar. An exact
V from residues (Ozaki scheme II: int8 products modulo coprime p <= 256, then the
Chinese remainder theorem) needs prod p > 2 |V|, 2^87 for |X|, |Y| < 2^37 and K = 4096;
coprime moduli near 256 give under 8 bits each, so 11-12 products plus the
reconstruction: still 2.7x float32 or more.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from . import _matmul_cpu as cpu
from . import _matmul_spec as spec
from ._backend import array_module
from ._matmul_engines import (CHUNK, ENGINES, calls_for, cuda_int8_available, float64_planes, int8_available,
                              int8_pays_on_cpu, int8_planes, torch_available)
from .errors import OpError
from .registry import Attr, register

ENGINE_ENV = "REPOPS_GEMM_ENGINE"  # selfcheck sets it to compare engines
KERNELS = ("numba", "array")


@dataclass
class _Operand:
    """One side of a batch of products, split into digits per K chunk.

    A's side holds the rows of all Bt products stacked, (Bt * M, K); B's side the
    batch, (Bt, K, N). `values` is the original float32 data (for the non-finite
    outputs), `shift` the exponent shift per row of A, (Bt * M,), or per column of B,
    (Bt, N); `nonfinite` marks those rows or columns that hold inf or NaN; `chunks`
    the int8 digits of each K chunk.
    """

    values: Any
    shift: Any
    nonfinite: Any
    chunks: list[Any] = field(default_factory=list)


@dataclass
class PreparedB:
    """The right operand of `matmul`, split once and reusable across calls (weights).

    Gives bit for bit what passing the array itself gives.
    """

    shape: tuple[int, int]
    operand: _Operand
    xp: ModuleType
    kernels: str


def _chunk_bounds(k: int) -> list[tuple[int, int]]:
    return [(k0, min(k, k0 + CHUNK)) for k0 in range(0, k, CHUNK)]


def _abs_max(x: Any, axis: int, xp: ModuleType) -> Any:
    """Largest |x| along an axis (exact, order-free); 0 along an empty axis."""
    if x.shape[axis] == 0:
        shape = list(x.shape)
        del shape[axis]
        return xp.zeros(tuple(shape), xp.float32)
    return xp.abs(x).max(axis=axis)


PARALLEL_MIN_ELEMENTS = 1 << 17  # below this, starting numba's threads costs more than it saves


def _cpu_kernels(elements: int):
    return cpu.parallel if elements >= PARALLEL_MIN_ELEMENTS else cpu.serial


def _prepare_lhs(a: Any, xp: ModuleType, kernels: str, shift: Any = None) -> _Operand:
    """A's rows (R, K) split into digits; `shift` given: finite A cut with that shift per row."""
    m, k = a.shape
    if a.size == 0:  # nothing to split; the product is empty or all zeros
        return _Operand(a, xp.zeros(m, xp.int32), xp.zeros(m, bool))
    if kernels == "numba":
        run = _cpu_kernels(m * k)
        a = np.ascontiguousarray(a)
        nonfinite = np.zeros(m, np.bool_)
        if shift is None:
            shift = np.empty(m, np.int32)
            run.row_shifts(a.view(np.int32), shift, nonfinite)
        chunks = []
        for k0, k1 in _chunk_bounds(k):
            out = np.empty((m, spec.DIGITS, k1 - k0), np.int8)
            run.split_rows(a, shift, k0, out)
            chunks.append(out)
        return _Operand(a, shift, nonfinite, chunks)
    finite, bad = spec.finite_part(a, xp)
    if shift is None:
        shift = spec.exponent_shift(_abs_max(finite, 1, xp), xp)
    chunks = [spec.split_lhs(finite[:, k0:k1], shift, xp) for k0, k1 in _chunk_bounds(k)]
    return _Operand(a, shift, bad.any(axis=1), chunks)


def _prepare_rhs(b: Any, xp: ModuleType, kernels: str, shift: Any = None) -> _Operand:
    """A batch of B (Bt, K, N) split into digits, per column of each product; `shift`
    given (Bt, N): finite B cut with that shift per column."""
    nb, k, n = b.shape
    if b.size == 0:  # nothing to split; the product is empty or all zeros
        return _Operand(b, xp.zeros((nb, n), xp.int32), xp.zeros((nb, n), bool))
    if kernels == "numba":
        run = _cpu_kernels(nb * k * n)
        b = np.ascontiguousarray(b)
        nonfinite = np.zeros((nb, n), np.bool_)
        if shift is None:
            shift = np.empty((nb, n), np.int32)
            run.col_shifts(b.view(np.int32), shift, nonfinite)
        chunks = []
        for k0, k1 in _chunk_bounds(k):
            out = np.empty((nb, spec.DIGITS, k1 - k0, n), np.int8)
            run.split_cols(b, shift, k0, out)
            chunks.append(out)
        return _Operand(b, shift, nonfinite, chunks)
    finite, bad = spec.finite_part(b, xp)
    if shift is None:
        shift = spec.exponent_shift(_abs_max(finite, 1, xp), xp)
    chunks = [spec.split_rhs(finite[:, k0:k1], shift, xp) for k0, k1 in _chunk_bounds(k)]
    return _Operand(b, shift, bad.any(axis=1), chunks)


def int8_ready(xp: ModuleType) -> bool:
    """Whether the exact int8 engine runs for arrays of module xp (CPU torch with an exact
    _int_mm for NumPy; a CUDA torch for CuPy)."""
    return int8_available() if xp is np else cuda_int8_available(xp)


def _select_engine(engine: str, xp: ModuleType) -> str:
    if engine == "auto":
        engine = os.environ.get(ENGINE_ENV, "auto")
    if engine == "auto":
        fast_int8 = int8_pays_on_cpu() if xp is np else cuda_int8_available(xp)
        return "int8" if fast_int8 else "float64"
    if engine not in ENGINES:
        raise OpError(f"matmul: unknown engine {engine!r}; expected one of {('auto',) + ENGINES}")
    if engine == "torch" and xp is not np:
        raise OpError("matmul: engine 'torch' runs on CPU arrays only")
    if engine in ("int8", "torch") and not torch_available():
        raise OpError(f"matmul: engine {engine!r} needs the torch package (pip install torch); "
                      "engine 'float64' needs NumPy alone and gives the same bits")
    if engine == "int8" and not int8_ready(xp):
        raise OpError("matmul: torch._int_mm is not exact on this CPU (no VNNI); use engine 'float64'" if xp is np
                      else "matmul: engine 'int8' on CuPy arrays needs a CUDA build of torch that sees the GPU")
    return engine


def _select_kernels(kernels: str, xp: ModuleType) -> str:
    if kernels == "auto":
        return "numba" if xp is np and cpu.AVAILABLE else "array"
    if kernels not in KERNELS:
        raise OpError(f"matmul: unknown kernels {kernels!r}; expected 'auto' or one of {KERNELS}")
    if kernels == "numba" and (xp is not np or not cpu.AVAILABLE):
        raise OpError("matmul: numba kernels need NumPy arrays and numba installed")
    return kernels


def _products(lhs: _Operand, rhs: _Operand, xp: ModuleType, engine: str, kernels: str) -> Any:
    """The Bt products of stacked A rows (Bt * M, K) and B (Bt, K, N), as (Bt * M, N)."""
    rows, k = lhs.values.shape
    nb, _, n = rhs.values.shape
    m = rows // nb if nb else 0
    if rows == 0 or n == 0 or k == 0:
        return xp.zeros((rows, n), xp.float32)
    row_factor = spec.scale_factors(lhs.shift, xp)
    col_factor = spec.scale_factors(rhs.shift, xp)
    carry = None
    last = len(lhs.chunks) - 1
    for c, (a_digits, b_digits) in enumerate(zip(lhs.chunks, rhs.chunks)):
        if engine == "int8":
            planes, weights = int8_planes(a_digits, b_digits, calls_for(xp))
        else:
            planes, weights = float64_planes(a_digits, b_digits, xp, engine)
        if kernels == "numba":
            run = _cpu_kernels(rows * n * len(weights))
            if c < last:
                if carry is None:
                    carry = (np.zeros((rows, n), np.int64), np.zeros((rows, n), np.int64))
                run.accumulate(planes, weights, *carry)
                continue
            out = np.empty((rows, n), np.float32)
            hi, lo = carry if carry is not None else (np.empty((0, 0), np.int64),) * 2
            run.combine(planes, weights, row_factor, col_factor, hi, lo, out)
        elif c < last:
            carry = spec.accumulate(planes, [int(w) for w in weights], xp, carry)
            continue
        else:
            by_batch = planes.reshape(planes.shape[0], nb, m, n)
            if carry is not None:
                carry = tuple(x.reshape(nb, m, n) for x in carry)
            out = spec.combine(by_batch, [int(w) for w in weights], row_factor.reshape(nb, m, 1),
                               col_factor.reshape(nb, 1, n), xp, carry).reshape(rows, n)
    _overwrite_nonfinite(out, lhs, rhs, m, xp)
    return out


def exact_sums(a: Any, b: Any, row_shift: Any, col_shift: Any) -> tuple[Any, Any]:
    """Step 4 of the specification for finite 2-D a (M, K) and b (K, N), cut with the shifts
    given (step 1 done by the caller): V as exact int64 (hi, lo), V = hi * 2^24 + lo.

    V is linear in K: the sums of shares of K add up exactly to the whole product's V, so
    workers holding shares of K combine theirs by integer addition, then `round_sums`.
    """
    xp = array_module(a, b)
    engine, kernels = _select_engine("auto", xp), _select_kernels("auto", xp)
    m, n = a.shape[0], b.shape[1]
    hi, lo = xp.zeros((m, n), xp.int64), xp.zeros((m, n), xp.int64)
    if a.size == 0 or b.size == 0:
        return hi, lo
    lhs = _prepare_lhs(a, xp, kernels, xp.asarray(row_shift, xp.int32))
    rhs = _prepare_rhs(b[None], xp, kernels, xp.asarray(col_shift, xp.int32).reshape(1, n))
    for a_digits, b_digits in zip(lhs.chunks, rhs.chunks):
        if engine == "int8":
            planes, weights = int8_planes(a_digits, b_digits, calls_for(xp))
        else:
            planes, weights = float64_planes(a_digits, b_digits, xp, engine)
        if kernels == "numba":
            _cpu_kernels(m * n * len(weights)).accumulate(planes, weights, hi, lo)
        else:
            hi, lo = spec.accumulate(planes, [int(w) for w in weights], xp, (hi, lo))
    return hi, lo


def round_sums(hi: Any, lo: Any, row_shift: Any, col_shift: Any) -> Any:
    """Step 5: float32 of V * 2^-(row_shift + col_shift), rounded once; lo may be any int64."""
    xp = array_module(hi)
    hi = hi + (lo >> spec.SPLIT_WEIGHT)  # exact: renormalise lo into [0, 2^24)
    lo = lo & ((1 << spec.SPLIT_WEIGHT) - 1)
    return spec.round_hi_lo(hi, lo, spec.scale_factors(xp.asarray(row_shift), xp)[:, None],
                            spec.scale_factors(xp.asarray(col_shift), xp)[None, :], xp)


def _overwrite_nonfinite(out: Any, lhs: _Operand, rhs: _Operand, m: int, xp: ModuleType) -> None:
    """Outputs in rows or columns that hold inf/NaN: the IEEE result, per product."""
    if not (bool(lhs.nonfinite.any()) or bool(rhs.nonfinite.any())):
        return  # the common case, decided in two reductions
    bad_rows = lhs.nonfinite.reshape(-1, m).any(axis=1)
    bad_batches = xp.nonzero(bad_rows | rhs.nonfinite.any(axis=1))[0]
    for bt in bad_batches.tolist():
        block = out[bt * m:(bt + 1) * m]
        a, b = lhs.values[bt * m:(bt + 1) * m], rhs.values[bt]
        if bool(bad_rows[bt]):
            rows = xp.nonzero(lhs.nonfinite[bt * m:(bt + 1) * m])[0]
            block[rows] = spec.nonfinite_block(a[rows], b, xp)
        if bool(rhs.nonfinite[bt].any()):
            cols = xp.nonzero(rhs.nonfinite[bt])[0]
            block[:, cols] = spec.nonfinite_block(a, b[:, cols], xp)


def _check_operand(name: str, x: Any) -> None:
    if x.dtype != np.float32:
        raise OpError(f"matmul: {name} must be float32, got {x.dtype}")
    if x.ndim < 2:
        raise OpError(f"matmul: {name} must have at least 2 axes (a 1-D vector is not supported; "
                      f"reshape it to a (1, n) or (n, 1) matrix), got shape {tuple(x.shape)}")


def prepare_b(b: Any, transpose_b: bool = False, *, kernels: str = "auto") -> PreparedB:
    """Split a 2-D right operand once (e.g. a weight read by several products of one step)."""
    xp = array_module(b)
    _check_operand("b", b)
    if b.ndim != 2:
        raise OpError(f"matmul: prepare_b takes a 2-D matrix, got shape {tuple(b.shape)}")
    if transpose_b:
        b = b.T
    kernels = _select_kernels(kernels, xp)
    return PreparedB(tuple(b.shape), _prepare_rhs(b[None], xp, kernels), xp, kernels)


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, *,
           engine: str = "auto", kernels: str = "auto") -> Any:
    """op(a) @ op(b) for float32 (..., M, K) and (..., K, N), batch axes broadcast.

    op transposes the last two axes where `transpose_a` / `transpose_b` is set. `b` may
    be a `PreparedB`. `engine` ("auto", "int8", "float64", "torch") and `kernels`
    ("auto", "numba", "array") choose how it is computed, never what: see the module
    docstring for the specification.
    """
    prepared = b if isinstance(b, PreparedB) else None
    xp = array_module(a) if prepared else array_module(a, b)
    if prepared and (transpose_b or prepared.xp is not xp):
        raise OpError("matmul: a PreparedB carries its own transpose and device")
    _check_operand("a", a)
    if transpose_a:
        a = xp.swapaxes(a, -1, -2)
    if prepared:
        kernels = prepared.kernels if kernels == "auto" else kernels
        if kernels != prepared.kernels:
            raise OpError(f"matmul: b was prepared with {prepared.kernels!r} kernels")
        b_shape = prepared.shape
    else:
        _check_operand("b", b)
        if transpose_b:
            b = xp.swapaxes(b, -1, -2)
        b_shape = tuple(b.shape)
    m, k = a.shape[-2:]
    if b_shape[-2] != k:
        raise OpError(f"matmul: inner dimensions differ: {tuple(a.shape)} @ {b_shape}")
    if k >= spec.MAX_K:
        raise OpError(f"matmul: K = {k} is at or above the supported limit 2^30")
    n = b_shape[-1]
    try:
        batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b_shape[:-2]))
    except ValueError:
        raise OpError(f"matmul: batch axes do not broadcast: {tuple(a.shape)} @ {b_shape}") from None
    engine = _select_engine(engine, xp)
    kernels = _select_kernels(kernels, xp)
    count = math.prod(batch)

    if len(b_shape) == 2 and tuple(a.shape[:-2]) == batch:
        # rows are independent: a batch over one B is one product with stacked rows
        rhs = prepared.operand if prepared else _prepare_rhs(b[None], xp, kernels)
        lhs = _prepare_lhs(a.reshape(count * m, k), xp, kernels)
    else:
        # every product of the batch at once: A's rows stacked, B's batch kept
        a = a if a.shape == batch + (m, k) else xp.broadcast_to(a, batch + (m, k))
        b = b if b.shape == batch + (k, n) else xp.broadcast_to(b, batch + (k, n))
        lhs = _prepare_lhs(a.reshape(count * m, k), xp, kernels)
        rhs = _prepare_rhs(b.reshape(count, k, n), xp, kernels)
    return _products(lhs, rhs, xp, engine, kernels).reshape(batch + (m, n))


def matmul_forward(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Any:
    """Reproducible float32 matrix product op(a) @ op(b); see `repops_cupy.matmul`."""
    return matmul(a, b, transpose_a, transpose_b)


def _matmul_vjp(emit, g, inputs, out, attrs):
    a, b = inputs
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    # With A = op(a), B = op(b): dA = g B^T and dB = A^T g, written in a, b and g.
    if ta:
        da = emit("matmul", b, g, transpose_a=tb, transpose_b=True)
    else:
        da = emit("matmul", g, b, transpose_a=False, transpose_b=not tb)
    if tb:
        db = emit("matmul", g, a, transpose_a=True, transpose_b=ta)
    else:
        db = emit("matmul", a, g, transpose_a=not ta, transpose_b=False)
    if tuple(da.shape) != tuple(a.shape):
        da = emit("sum_to", da, shape=tuple(a.shape))
    if tuple(db.shape) != tuple(b.shape):
        db = emit("sum_to", db, shape=tuple(b.shape))
    return da, db


register(
    "matmul",
    matmul_forward,
    arity=2,
    attrs={"transpose_a": Attr(bool, False), "transpose_b": Attr(bool, False)},
    vjp=_matmul_vjp,
)
