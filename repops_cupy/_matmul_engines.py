"""Exact GEMM engines for digit planes: each returns exact integer sums, so all agree.

An engine takes one K chunk of the digits of a batch of Bt products: A's rows stacked,
(Bt * M, DIGITS, L) int8 most significant first, and B's, (Bt, DIGITS, L, N) int8
least significant first. It returns `planes` (P, Bt * M, N) with the exact integer
sums and `weights` (P,): the chunk's contribution to V' is sum_q planes[q] *
2^weights[q]. Which engine ran never shows in the result.

- "int8": torch._int_mm, int8 x int8 with int32 accumulation (oneDNN, VNNI on CPU).
  Exact while |sum| < 2^31: a chunk of L <= 16384 sums at most 5 * L * 2^14 < 2^31.
  oneDNN's kernels for CPUs *without* VNNI saturate int16 intermediates and are not
  exact; `int8_available` therefore runs a saturation probe once per machine before this
  engine is used (its answer kept on disk, `probe_cache`), and the caller falls back to
  float64 if it fails.
- "float64" (NumPy/OpenBLAS or CuPy/cuBLAS) and "torch" (torch float64, MKL): digits
  grouped into 16-bit values, 7 K-lengths of float64 GEMM; every partial sum is an
  integer below 2^53, so any summation order is exact.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import inspect
import os
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

from ._matmul_spec import DIGITS, MAX_DIAGONAL, pair_weight_bits
from .probe_cache import cpu_identity, remembered

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
    """True if torch._int_mm gives exact int32 sums on this CPU (see `probe_int8`): probed once
    per machine, torch build and ISA limit, the answer kept on disk (`probe_cache`)."""
    return torch_available() and remembered("int8-probe", _cpu_key("torch", probe_int8),
                                            lambda: probe_int8(cpu_calls()))


@functools.cache
def int8_pays_on_cpu() -> bool:
    """True if the int8 engine is exact on this CPU and also faster than float64 GEMM: the
    engine "auto" takes on NumPy arrays. Without VNNI, oneDNN's exact int8 kernels are slow
    (measured on an AVX2-only EPYC: a 256x128x128 product 41 ms against 4.8 ms, 512^3 3.2 s
    against 70 ms). Timed once per machine (`int8_beats_float64`), the answer kept on disk;
    both engines give the same bits, so the choice is one of speed alone. A process that
    finds "no" there never imports torch for its products."""
    if not _torch_installed():
        return False
    key = _cpu_key("torch", "numpy", probe_int8, int8_beats_float64)
    return remembered("int8-faster", key, lambda: int8_available() and int8_beats_float64()) and torch_available()


def _torch_installed() -> bool:
    """Whether an import of torch could succeed, asked without importing it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


ISA_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")  # they change the kernels torch picks


def _cpu_key(*parts: str | Callable[..., Any]) -> str:
    """What a probe's answer depends on: the CPU, the ISA limits, the releases of the packages
    and the sources of the probes named. Read without importing torch (2 s), which a cached
    answer may spare."""
    return "\n".join((cpu_identity(), *(f"{v}={os.environ.get(v, '')}" for v in ISA_ENV),
                      *(_release(p) if isinstance(p, str) else _source(p) for p in parts)))


def _release(package: str) -> str:
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} absent"


def _source(fn: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(fn)
    except OSError:  # no source files: the bytecode and constants stand for it
        return repr((fn.__code__.co_code, fn.__code__.co_consts))


@functools.cache
def cuda_int8_available(cp: ModuleType) -> bool:
    """True if a CUDA build of torch sees the GPU and its _int_mm passes `probe_int8` there."""
    if not torch_available():
        return False
    import torch  # noqa: PLC0415 - heavy optional import, only for this engine

    try:
        if not torch.cuda.is_available():
            return False
    except RuntimeError:
        return False
    return probe_int8(cuda_calls(cp))


def probe_int8(calls: Int8Calls) -> bool:
    """Whether calls.int_mm sums exactly, probed on saturating and random inputs.

    Constant matrices at the int8 extremes (where int16 intermediates would saturate)
    have a known product, K * x * y; the shapes span small and large kernels and meet
    CUDA's shape rules. A random probe is checked against an exact float64 product.
    """
    xp, wrap = calls.xp, calls.wrap
    try:
        for (m, k, n) in ((32, 4096, 16), (304, 2048, 272), (512, 2048, 512)):
            out = xp.empty((m, n), np.int32)
            for x, y in ((-128, -128), (127, -128), (-128, 127), (127, 127)):
                calls.int_mm(wrap(xp.full((m, k), x, np.int8)), wrap(xp.full((k, n), y, np.int8)), out=wrap(out))
                if not bool((out == k * x * y).all()):
                    return False
        rng = np.random.default_rng(0)
        a = xp.asarray(rng.integers(-128, 128, (96, 8192), dtype=np.int8))
        b = xp.asarray(rng.integers(-128, 128, (8192, 80), dtype=np.int8))
        out = xp.empty((96, 80), np.int32)
        calls.int_mm(wrap(a), wrap(b), out=wrap(out))
        want = xp.matmul(a.astype(np.float64), b.astype(np.float64))  # exact: integer sums below 2^27
        return bool(xp.array_equal(out.astype(np.float64), want))
    except RuntimeError:
        return False


def int8_beats_float64(rounds: int = 3) -> bool:
    """Whether int8 digit planes take less time than float64 ones for one K chunk of a
    128 x 256 x 128 product (best of `rounds` each, same digits): the part of a product
    that differs between the engines."""
    rng = np.random.default_rng(0)
    lhs = rng.integers(-128, 128, (128, DIGITS, 256), dtype=np.int8)
    rhs = rng.integers(-128, 128, (1, DIGITS, 256, 128), dtype=np.int8)

    def best(run: Callable[[], Any]) -> float:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times)

    return best(lambda: int8_planes(lhs, rhs, cpu_calls())) < best(lambda: float64_planes(lhs, rhs, np, "float64"))


def diagonal_blocks():
    """For each kept diagonal d: (first A digit, number of pairs, first B plane)."""
    for d in range(MAX_DIAGONAL + 1):
        s_lo, s_hi = max(0, d - (DIGITS - 1)), min(DIGITS - 1, d)
        yield d, s_lo, s_hi - s_lo + 1, DIGITS - 1 - d + s_lo


_BLOCKS = tuple(diagonal_blocks())
_DIAGONAL_WEIGHTS = np.array([pair_weight_bits(d, 0) for d, _, _, _ in _BLOCKS], np.int64)
_PAIRS = tuple((s, t) for s in range(DIGITS) for t in range(DIGITS) if s + t <= MAX_DIAGONAL)
_PAIR_WEIGHTS = np.array([pair_weight_bits(s, t) for s, t in _PAIRS], np.int64)


@dataclass(frozen=True)
class Int8Calls:
    """How digit arrays reach torch._int_mm: the only part of the int8 engine that differs
    between CPU (NumPy, torch.from_numpy) and GPU (CuPy, torch.from_dlpack, zero-copy).

    `pad` gives (least M, multiple of M, of K, of N) for every call: CUDA's _int_mm takes
    M > 16 and K, N multiples of 8. Zero rows, columns and K entries add zero products,
    so the sums stay exact; padded rows and columns are cut off the planes. `narrow_n`:
    on CPU an output width under this that is not a multiple of 16 is padded to one
    (measured, one thread, whole matmul: 512x256x62 1.47 -> 1.19 ms, 512x64x62 unchanged).
    `batch_all_pairs`: a batch of products takes one call per product covering all 25
    digit pairs instead of one per diagonal (6 per product): on CPU that measured mixed
    (16 heads of 64x32x64: 0.61 -> 0.94 ms, of 64x64x32: 0.65 -> 0.54 ms; 19 pair planes
    are written and combined instead of 6 diagonal ones), so only the GPU, where each
    call is a kernel launch, takes it.
    """

    xp: ModuleType
    wrap: Callable[[Any], Any]
    int_mm: Callable[..., Any]
    pad: tuple[int, int, int, int] = (0, 1, 1, 1)
    narrow_n: int = 0
    batch_all_pairs: bool = False


CUDA_PAD = (17, 16, 16, 16)  # M > 16; K and N multiples of 8, here of 16 (aligned slices)


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def padded_sizes(calls: Int8Calls, m: int, length: int, n: int) -> tuple[int, int, int]:
    """(M, L, N) of the int8 calls for digit blocks of M rows, L entries of K and N columns."""
    least_m, mult_m, mult_k, mult_n = calls.pad
    if calls.narrow_n and n < calls.narrow_n:
        mult_n = max(mult_n, 16)
    return _round_up(max(m, least_m), mult_m), _round_up(length, mult_k), _round_up(n, mult_n)


@functools.cache
def cpu_calls() -> Int8Calls:
    import torch  # noqa: PLC0415 - heavy optional import, only for this engine

    return Int8Calls(np, torch.from_numpy, torch._int_mm, narrow_n=128)


@functools.cache
def cuda_calls(cp: ModuleType) -> Int8Calls:
    """CuPy arrays handed to CUDA torch by DLPack (zero-copy), _int_mm on CuPy's stream.

    The two lines below that touch the GPU are the only int8 code the CPU tests cannot
    run; everything around them runs here with NumPy and the CPU _int_mm (the tests use
    `Int8Calls(np, torch.from_numpy, torch._int_mm, CUDA_PAD)`).
    """
    import torch  # noqa: PLC0415 - heavy optional import, only for this engine

    def int_mm(a, b, out):
        stream = cp.cuda.get_current_stream().ptr
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream else contextlib.nullcontext():
            torch._int_mm(a, b, out=out)

    return Int8Calls(cp, torch.from_dlpack, int_mm, CUDA_PAD, batch_all_pairs=True)


def calls_for(xp: ModuleType) -> Int8Calls:
    """The int8 calls for arrays of module xp (NumPy: CPU torch; CuPy: CUDA torch)."""
    return cpu_calls() if xp is np else cuda_calls(xp)


def int8_planes(lhs: Any, rhs: Any, calls: Int8Calls | None = None) -> tuple[Any, np.ndarray]:
    """Exact digit products with torch._int_mm (caller checked that the engine is exact here).

    One product per kept diagonal d: sum_{s+t=d} A_s B_t is [A_s0 .. A_s1] @ [B_t0; ..; B_t1],
    contiguous K-stacked blocks (A's digits are stored most significant first, B's least
    significant first), so 19 digit pairs take 6 calls, each summing at most 5 * L int8
    products. With `calls.batch_all_pairs`, a batch of products (attention heads) takes one
    call per product instead, all 25 digit pairs at once (the 19 kept ones are cut out).
    """
    calls = calls or cpu_calls()
    nb, _, length, n = rhs.shape
    m = lhs.shape[0] // nb
    if calls.pad == (0, 1, 1, 1) and m * 4 <= n:
        return _int8_stacked_rows(calls, lhs, rhs)
    sizes = padded_sizes(calls, m, length, n)
    if nb > 1 and calls.batch_all_pairs:
        return _int8_all_pairs(calls, lhs, rhs, sizes)
    return _int8_diagonals(calls, lhs, rhs, sizes)


def _padded_digits(calls: Int8Calls, lhs: Any, rhs: Any, sizes: tuple[int, int, int]) -> tuple[Any, Any]:
    """A's digits (Bt, M', DIGITS, L') and B's (Bt, DIGITS, L', N'), zero-padded (views if no padding)."""
    xp = calls.xp
    nb, _, length, n = rhs.shape
    m = lhs.shape[0] // nb
    mp, lp, np_ = sizes
    a = lhs.reshape(nb, m, DIGITS, length)
    if (mp, lp) != (m, length):
        a = xp.zeros((nb, mp, DIGITS, lp), np.int8)
        a[:, :m, :, :length] = lhs.reshape(nb, m, DIGITS, length)
    b = rhs
    if (lp, np_) != (length, n):
        b = xp.zeros((nb, DIGITS, lp, np_), np.int8)
        b[:, :, :length, :n] = rhs
    return a, b


def _cut(planes: Any, nb: int, m: int, n: int) -> Any:
    """Planes (P, Bt, M', N') without their padded rows and columns, as (P, Bt * M, N)."""
    if planes.shape[2] == m:  # padded columns only: a view, no copy
        return planes.reshape(planes.shape[0], nb * m, planes.shape[3])[:, :, :n]
    return planes[:, :, :m, :n].reshape(planes.shape[0], nb * m, n)


def _int8_diagonals(calls: Int8Calls, lhs: Any, rhs: Any, sizes: tuple[int, int, int]) -> tuple[Any, np.ndarray]:
    """One call per kept diagonal and product (views of the digit arrays, cut by the array module)."""
    nb, _, length, n = rhs.shape
    m = lhs.shape[0] // nb
    mp, lp, np_ = sizes
    a, b = _padded_digits(calls, lhs, rhs, sizes)
    a_all, b_all = a.reshape(nb, mp, DIGITS * lp), b.reshape(nb, DIGITS * lp, np_)
    planes = calls.xp.empty((len(_BLOCKS), nb, mp, np_), np.int32)
    mm, wrap = calls.int_mm, calls.wrap
    for bt in range(nb):
        for q, (_, s0, count, t0) in enumerate(_BLOCKS):
            mm(wrap(a_all[bt, :, s0 * lp:(s0 + count) * lp]), wrap(b_all[bt, t0 * lp:(t0 + count) * lp]),
               out=wrap(planes[q, bt]))
    return _cut(planes, nb, m, n), _DIAGONAL_WEIGHTS


def _int8_all_pairs(calls: Int8Calls, lhs: Any, rhs: Any, sizes: tuple[int, int, int]) -> tuple[Any, np.ndarray]:
    """One call per product of the batch: A's digits stacked along M times B's side by side
    along N, (DIGITS * M', L') @ (L', DIGITS * N'), every digit pair; the kept 19 cut out."""
    xp = calls.xp
    nb, _, length, n = rhs.shape
    m = lhs.shape[0] // nb
    mp, lp, np_ = sizes
    a, b = _padded_digits(calls, lhs, rhs, sizes)
    a_rows = xp.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(nb, DIGITS * mp, lp)
    b_cols = xp.ascontiguousarray(b[:, ::-1].transpose(0, 2, 1, 3)).reshape(nb, lp, DIGITS * np_)
    every = xp.empty((nb, DIGITS * mp, DIGITS * np_), np.int32)
    mm, wrap = calls.int_mm, calls.wrap
    for bt in range(nb):
        mm(wrap(a_rows[bt]), wrap(b_cols[bt]), out=wrap(every[bt]))
    s_index = xp.asarray([s for s, _ in _PAIRS])
    t_index = xp.asarray([t for _, t in _PAIRS])
    planes = every.reshape(nb, DIGITS, mp, DIGITS, np_)[:, s_index, :, t_index, :]  # (P, Bt, M', N')
    return _cut(planes, nb, m, n), _PAIR_WEIGHTS


def _int8_stacked_rows(calls: Int8Calls, lhs: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Few rows, many columns: read each B digit plane once, A digits stacked along M."""
    nb, _, length, n = rhs.shape
    m = lhs.shape[0] // nb
    pairs = [(s, t) for t in range(DIGITS) for s in range(DIGITS) if s + t <= MAX_DIAGONAL]
    planes = np.empty((len(pairs), nb * m, n), np.int32)
    out = calls.wrap(planes)
    for bt in range(nb):
        a_by_digit = np.ascontiguousarray(lhs[bt * m:(bt + 1) * m].transpose(1, 0, 2))  # (DIGITS, M, L)
        a_all = calls.wrap(a_by_digit.reshape(DIGITS * m, length))
        # pair products land as rows (q * M ...) of `product`; with one batch that is `planes`
        product = out.reshape(len(pairs) * m, n) if nb == 1 else calls.wrap(np.empty((len(pairs) * m, n), np.int32))
        q = 0
        for t in range(DIGITS):
            count = min(DIGITS - 1, MAX_DIAGONAL - t) + 1  # A digits 0..count-1 meet B digit t
            calls.int_mm(a_all[: count * m], calls.wrap(rhs[bt, DIGITS - 1 - t]), out=product[q * m:(q + count) * m])
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
