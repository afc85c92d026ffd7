"""Exact GEMM engines for digit planes: each returns exact integer sums, so all agree.

An engine takes one K chunk of the digits of a batch of Bt products: A's rows stacked,
(Bt * M, DIGITS, L) int8 most significant first, and B's, (Bt, DIGITS, L, N) int8
least significant first. It returns `planes` (P, Bt * M, N) with the exact integer
sums and `weights` (P,): the chunk's contribution to V' is sum_q planes[q] *
2^weights[q]. Which engine ran never shows in the result.

- "int8": torch._int_mm, int8 x int8 with int32 accumulation (oneDNN, VNNI on CPU).
  Exact while |sum| < 2^31: a chunk of L <= 16384 sums at most 5 * L * 2^14 < 2^31.
  oneDNN's kernels for CPUs *without* VNNI saturate int16 intermediates and are not
  exact; `int8_available` therefore runs a saturation probe once before this engine is
  used, and the caller falls back to float64 if it fails.
- "float64" (NumPy/OpenBLAS or CuPy/cuBLAS) and "torch" (torch float64, MKL): digits
  grouped into 16-bit values, 7 K-lengths of float64 GEMM; every partial sum is an
  integer below 2^53, so any summation order is exact.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np

from ._matmul_spec import DIGITS, MAX_DIAGONAL, pair_weight_bits

CHUNK = 16384  # K chunk length: keeps every engine's sums exact (see above)
ENGINES = ("int8", "float64", "torch")


@functools.cache
def torch_available() -> bool:
    """True if torch imports (the "int8" and "torch" engines need it; "float64" does not)."""
    try:
        import torch  # noqa: F401, PLC0415 - heavy optional import
    except ImportError:
        return False
    return True


@functools.cache
def int8_available() -> bool:
    """True if torch._int_mm gives exact int32 sums here, probed on saturating inputs.

    Constant matrices at the int8 extremes (where int16 intermediates would saturate)
    have a known product, K * x * y; the shapes span small and large kernels. A random
    probe is checked against an exact float64 product.
    """
    if not torch_available():
        return False
    import torch  # noqa: PLC0415 - heavy optional import, only for this engine

    try:
        for (m, k, n) in ((16, 4096, 16), (300, 2048, 260), (512, 2048, 512)):
            for x, y in ((-128, -128), (127, -128), (-128, 127), (127, 127)):
                a = torch.full((m, k), x, dtype=torch.int8)
                b = torch.full((k, n), y, dtype=torch.int8)
                if not bool((torch._int_mm(a, b) == k * x * y).all()):
                    return False
        rng = np.random.default_rng(0)
        a = rng.integers(-128, 128, (96, 8192), dtype=np.int8)
        b = rng.integers(-128, 128, (8192, 80), dtype=np.int8)
        got = torch._int_mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        want = a.astype(np.float64) @ b.astype(np.float64)  # exact: integer sums below 2^27
        return bool(np.array_equal(got.astype(np.float64), want))
    except RuntimeError:
        return False


def diagonal_blocks():
    """For each kept diagonal d: (first A digit, number of pairs, first B plane)."""
    for d in range(MAX_DIAGONAL + 1):
        s_lo, s_hi = max(0, d - (DIGITS - 1)), min(DIGITS - 1, d)
        yield d, s_lo, s_hi - s_lo + 1, DIGITS - 1 - d + s_lo


_BLOCKS = tuple(diagonal_blocks())
_DIAGONAL_WEIGHTS = np.array([pair_weight_bits(d, 0) for d, _, _, _ in _BLOCKS], np.int64)


def int8_planes(lhs: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact digit products with torch._int_mm (caller checked `int8_available`).

    One product per kept diagonal d and product of the batch: sum_{s+t=d} A_s B_t is
    [A_s0 .. A_s1] @ [B_t0; ..; B_t1], contiguous K-stacked blocks (A's digits are stored
    most significant first, B's least significant first), so 19 digit pairs take 6 calls,
    each summing at most 5 * L int8 products. The views of every call are cut by whole-batch
    slicing and `unbind` (C loops), which leaves one Python step per call: a product of
    attention heads (Bt = batch x heads) is many small calls.
    """
    import torch  # noqa: PLC0415

    nb, _, length, n = rhs.shape
    m = lhs.shape[0] // nb
    if m * 4 <= n:
        return _int8_stacked_rows(torch, lhs, rhs)
    planes = np.empty((len(_BLOCKS), nb * m, n), np.int32)
    a_all = lhs.reshape(nb, m, DIGITS * length)
    b_all = rhs.reshape(nb, DIGITS * length, n)
    if nb == 1:  # views cut by NumPy: a torch slice costs twice a NumPy slice and from_numpy
        mm, wrap = torch._int_mm, torch.from_numpy
        for q, (_, s0, count, t0) in enumerate(_BLOCKS):
            mm(wrap(a_all[0, :, s0 * length:(s0 + count) * length]),
               wrap(b_all[0, t0 * length:(t0 + count) * length]), out=wrap(planes[q]))
        return planes, _DIAGONAL_WEIGHTS
    out = torch.from_numpy(planes).view(len(_BLOCKS), nb, m, n)
    a_all, b_all = torch.from_numpy(a_all), torch.from_numpy(b_all)
    for q, (_, s0, count, t0) in enumerate(_BLOCKS):
        a_cols, b_rows = slice(s0 * length, (s0 + count) * length), slice(t0 * length, (t0 + count) * length)
        for a, b, o in zip(a_all[:, :, a_cols].unbind(0), b_all[:, b_rows].unbind(0), out[q].unbind(0)):
            torch._int_mm(a, b, out=o)
    return planes, _DIAGONAL_WEIGHTS


def _int8_stacked_rows(torch: ModuleType, lhs: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Few rows, many columns: read each B digit plane once, A digits stacked along M."""
    nb, _, length, n = rhs.shape
    m = lhs.shape[0] // nb
    pairs = [(s, t) for t in range(DIGITS) for s in range(DIGITS) if s + t <= MAX_DIAGONAL]
    planes = np.empty((len(pairs), nb * m, n), np.int32)
    out = torch.from_numpy(planes)
    for bt in range(nb):
        a_by_digit = np.ascontiguousarray(lhs[bt * m:(bt + 1) * m].transpose(1, 0, 2))  # (DIGITS, M, L)
        a_all = torch.from_numpy(a_by_digit.reshape(DIGITS * m, length))
        # pair products land as rows (q * M ...) of `product`; with one batch that is `planes`
        product = out.reshape(len(pairs) * m, n) if nb == 1 else torch.empty((len(pairs) * m, n), dtype=torch.int32)
        q = 0
        for t in range(DIGITS):
            count = min(DIGITS - 1, MAX_DIAGONAL - t) + 1  # A digits 0..count-1 meet B digit t
            torch._int_mm(a_all[: count * m], torch.from_numpy(rhs[bt, DIGITS - 1 - t]), out=product[q * m:(q + count) * m])
            q += count
        if nb > 1:
            out[:, bt * m:(bt + 1) * m] = product.reshape(len(pairs), m, n)
    return planes, np.array([pair_weight_bits(s, t) for s, t in pairs], np.int64)


def _grouped(lhs: Any, rhs: Any) -> tuple[list[Any], list[Any]]:
    """Digits as float64 batches: A's (G0, G1, a2, a3, a4) (Bt, M, L), B's (H0, H1, b2, b3, b4)
    (Bt, L, N), with G = 2^8 hi + lo."""
    nb, _, length, _ = rhs.shape
    lhs = lhs.reshape(nb, -1, DIGITS, length)
    a = [lhs[:, :, s, :].astype(np.float64) for s in range(DIGITS)]
    b = [rhs[:, DIGITS - 1 - t].astype(np.float64) for t in range(DIGITS)]
    g = [a[0] * 256.0 + a[1], a[2] * 256.0 + a[3]]  # exact: small integers
    h = [b[0] * 256.0 + b[1], b[2] * 256.0 + b[3]]
    return g + a[2:], h + b[2:]


def float64_planes(lhs: Any, rhs: Any, xp: ModuleType, engine: str) -> tuple[Any, np.ndarray]:
    """Exact digit products with float64 GEMMs on 16-bit digit groups.

    The 19 kept digit pairs, grouped: weight 2^24: G0 H0; weight 2^8: G0 H1 + G1 H0;
    weight 1: G0 b4 + a4 H0 + a2 H1 + a3 b2. Every group product expands into kept
    pairs only, at the weights of the specification.
    """
    (g0, g1, a2, a3, a4), (h0, h1, b2, b3, b4) = _grouped(lhs, rhs)
    cat = xp.concatenate
    products = [
        (g0, h0),
        (cat([g0, g1], axis=2), cat([h1, h0], axis=1)),
        (cat([g0, a4, a2, a3], axis=2), cat([b4, h0, h1, b2], axis=1)),
    ]
    if engine == "torch":
        import torch  # noqa: PLC0415

        planes = xp.stack([
            torch.matmul(torch.from_numpy(x), torch.from_numpy(y)).numpy()  # exact: integer partial sums < 2^53
            for x, y in products
        ])
    else:
        planes = xp.stack([xp.matmul(x, y) for x, y in products])  # exact: integer partial sums < 2^53
    nb, m, n = planes.shape[1:]
    return planes.reshape(len(products), nb * m, n), np.array([24, 8, 0], np.int64)
