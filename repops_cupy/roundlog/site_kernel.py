"""One compiled pass per rounding site: the same decisions as :mod:`.rounding`, faster.

:func:`.rounding.decide` and :func:`.rounding.apply` are the specification: torch array
code that walks a site's float64 values about ten times (|v|, the chunk maxima, v - D,
v + D, two conversions, a comparison, the finite checks, the float32 result and its
float64 copy), then the entries. :func:`_site` does a whole site in one call compiled by
numba without fastmath (``repops_cupy.cpu_kernels.compiler``): per chunk of the site, the
chunk's maximum (an integer max over the bit patterns), then per block of ``_BLOCK``
values the rounding with a flag per position (branch-free, so it vectorizes, and the
block's flags stay in cache), then the block's few flagged positions, read eight flags at
a time. A flagged position is, for the trainer, classified at once as a bit or a value
entry (:func:`.rounding.entries_for`'s rule); for the auditor, a margin breach unless the
log has an entry there (:func:`.rounding.unlogged`: the flagged positions and the log's
both ascend, so one merge finds them). The auditor's entries are then applied as
:func:`.rounding.apply_entries` does. The same IEEE operations on the same operands (also
float32 nextafter), so the same bits, entries, positions and tallies, in the same order;
``tests/roundlog/test_roundlog_site_kernel.py`` compares them.

Without numba, or with REPOPS_CPU_KERNELS=0 (as for the other compiled kernels),
:func:`active` is False and the engine runs the specification.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from ..cpu_kernels import enabled
from ..cpu_kernels.compiler import AVAILABLE
from .rounding import BIT_ENTRY_MAX_D_OVER_SPACING, F64, ApplyReport, Decisions

_ABS = 0x7FFFFFFFFFFFFFFF  # float64 bits without the sign
_INF = 0x7FF0000000000000  # the bits of +inf: finite magnitudes lie below
_BLOCK = 4096  # values rounded and flagged at a time (a multiple of 8: whole flag words)

if AVAILABLE:
    from ..cpu_kernels.compiler import function, scalar

    @function
    def _chunk_max(bits):  # pragma: no cover - compiled
        """The bits of max finite |v| over a chunk's float64 bit patterns (0 if none). Non-negative
        float64 values order as their bit patterns, so an integer max gives the float max, and
        the loop vectorizes (a float max with NaN rules would not)."""
        m = 0
        for i in range(bits.size):
            b = bits[i] & _ABS
            b = b if b < _INF else 0
            m = b if b > m else m
        return m

    @function
    def _round_flag(v, r64, flags, dd):  # pragma: no cover - compiled
        """r64 = float64(float32(v)); flags = float32(v - dd) != float32(v + dd) as 0/1 bytes;
        returns whether any is set. No branch, so it vectorizes."""
        some = np.uint8(0)
        for i in range(v.size):
            x = v[i]
            r64[i] = np.float64(np.float32(x))
            f = np.uint8(np.float32(x - dd) != np.float32(x + dd))
            flags[i] = f
            some |= f
        return some

    @scalar
    def _bracket(x):  # pragma: no cover - compiled
        """(float32(x), it as float64, lo, hi): the float32 neighbours lo <= x <= hi as float64
        (:func:`.rounding.bracket`: nextafter in float32, then the same selections)."""
        ra = np.float32(x)
        rd = np.float64(ra)
        up = np.float64(np.nextafter(ra, np.float32(np.inf)))
        down = np.float64(np.nextafter(ra, np.float32(-np.inf)))
        return ra, rd, rd if rd <= x else down, rd if rd >= x else up

    @function
    def _site(v, chunk, beta_u, train, r64, scales, flags, bit_pos, bit_up, value_pos, value):  # pragma: no cover
        """One site, flat float64 ``v`` in chunks of ``chunk``, D = beta_u * the chunk's max finite
        |v|. Fills r64 = float64(float32(v)) and ``scales`` (the chunk maxima). A position is
        flagged where [v - D', v + D'] rounds to two float32 values, v and float32(v) finite and
        v nonzero: D' = D for the trainer (``train``), which writes the entries into the four
        arrays (their capacity v.size) and returns (bit entries, value entries, 0); D' = D/2 for
        the auditor, which reads the log's entries from them (positions ascending), applies them
        to r64 and returns (corrections, implausible, breaches)."""
        words = flags.view(np.uint64)
        scale_bits = scales.view(np.int64)
        nb = nv = breaches = 0
        jb = jv = 0  # the auditor's merge: the first logged position not below the flagged one
        for c in range(v.size // chunk):
            lo = c * chunk
            scale_bits[c] = _chunk_max(v[lo : lo + chunk].view(np.int64))
            d = scales[c] * beta_u
            dd = d if train else d * 0.5
            for b in range(lo, lo + chunk, _BLOCK):
                e = min(b + _BLOCK, lo + chunk)
                if not _round_flag(v[b:e], r64[b:e], flags, dd):
                    continue
                for w in range((e - b + 7) // 8):
                    if not words[w]:
                        continue
                    for k in range(8 * w, min(8 * w + 8, e - b)):  # bytes past e - b are stale
                        i = b + k
                        x = v[i]
                        if not (flags[k] and np.isfinite(x) and np.isfinite(r64[i]) and x != 0.0):
                            continue
                        if train:
                            ra, rd, flo, fhi = _bracket(x)
                            if d < BIT_ENTRY_MAX_D_OVER_SPACING * (fhi - flo):
                                bit_pos[nb] = i
                                bit_up[nb] = rd == fhi
                                nb += 1
                            else:
                                value_pos[nv] = i
                                value[nv] = ra
                                nv += 1
                        else:
                            while jb < bit_pos.size and bit_pos[jb] < i:
                                jb += 1
                            while jv < value_pos.size and value_pos[jv] < i:
                                jv += 1
                            logged = (jb < bit_pos.size and bit_pos[jb] == i) or (jv < value_pos.size and value_pos[jv] == i)
                            breaches += 0 if logged else 1
        if train:
            return nb, nv, 0
        corrections = implausible = 0
        for k in range(bit_pos.size):
            p = bit_pos[k]
            vp, dp = v[p], scales[p // chunk] * beta_u
            _, _, flo, fhi = _bracket(vp)
            mid = (flo + fhi) * 0.5  # exact: lo and hi are float32 values
            want = np.float32(fhi if bit_up[k] else flo)
            implausible += (1 if abs(vp - mid) > 2 * dp else 0) + (1 if flo == fhi else 0)
            corrections += 1 if want != r64[p] else 0
            r64[p] = want
        for k in range(value_pos.size):
            p = value_pos[k]
            vp, dp = v[p], scales[p // chunk] * beta_u
            _, _, flo, fhi = _bracket(vp)
            want = value[k]
            implausible += 1 if abs(np.float64(want) - vp) > 2 * dp + (fhi - flo) else 0
            corrections += 1 if want != r64[p] else 0
            r64[p] = want
        return corrections, implausible, breaches

    @function
    def _round_plain(v, r64):  # pragma: no cover - compiled
        for i in range(v.size):
            r64[i] = np.float64(np.float32(v[i]))


def active() -> bool:
    """Whether the engine should round through this module now."""
    return AVAILABLE and enabled(np)


def round_plain_np(v: np.ndarray) -> np.ndarray:
    """float64(float32(v)) of a flat contiguous float64 array in one pass (an exact site: nothing to decide)."""
    r64 = np.empty(v.size, dtype=np.float64)
    if v.size:
        _round_plain(v, r64)
    return r64


def round_plain(flat: torch.Tensor) -> torch.Tensor:
    """As :func:`round_plain_np`, on and to torch tensors."""
    return torch.from_numpy(round_plain_np(flat.detach().contiguous().numpy()))


def _buffers(v: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """r64, the chunk maxima and one block's flags for :func:`_site`."""
    return np.empty(v.size, np.float64), np.empty(v.size // chunk, np.float64), np.empty(_BLOCK, np.uint8)


_scratch = threading.local()  # per thread: a node trains and audits in worker threads of one process


def _entry_buffers(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Room for n entries of each kind, reused from site to site (the entries are copied out)."""
    bufs = getattr(_scratch, "entries", None)
    if bufs is None or bufs[0].size < n:
        bufs = _scratch.entries = (np.empty(n, np.int64), np.empty(n, np.bool_), np.empty(n, np.int64),
                                   np.empty(n, np.float32))
    return bufs


def decide_np(v: np.ndarray, chunk: int, beta_u: float):
    """(r as float64, bit positions, bit directions, value positions, float32 values): the
    trainer's side of a flat float64 site (:func:`.rounding.decide` with
    :func:`.rounding.entries_for`), in NumPy."""
    r64, scales, flags = _buffers(v, chunk)
    if not v.size:
        return r64, np.empty(0, np.int64), np.empty(0, np.bool_), np.empty(0, np.int64), np.empty(0, np.float32)
    bit_pos, bit_up, value_pos, value = _entry_buffers(v.size)
    nb, nv, _ = _site(v, chunk, beta_u, True, r64, scales, flags, bit_pos, bit_up, value_pos, value)
    return r64, bit_pos[:nb].copy(), bit_up[:nb].copy(), value_pos[:nv].copy(), value[:nv].copy()


def decide(flat: torch.Tensor, chunk: int, beta_u: float) -> tuple[torch.Tensor, Decisions]:
    """As :func:`.rounding.decide` on ``flat.view(-1, chunk)`` with D = beta_u * chunk max;
    the result as float64."""
    r64, bit_pos, bit_up, value_pos, value = decide_np(flat.detach().contiguous().numpy(), chunk, beta_u)
    return torch.from_numpy(r64), Decisions(*(torch.from_numpy(a) for a in (bit_pos, bit_up, value_pos, value)))


def apply(flat: torch.Tensor, chunk: int, beta_u: float, dec: Decisions) -> tuple[torch.Tensor, ApplyReport]:
    """As :func:`.rounding.apply`; the result as float64."""
    r64, rep = apply_np(flat.detach().contiguous().numpy(), chunk, beta_u,
                        *(t.numpy() for t in (dec.bit_pos, dec.bit_up, dec.value_pos, dec.value)))
    return torch.from_numpy(r64), rep


def apply_np(v: np.ndarray, chunk: int, beta_u: float, bit_pos: np.ndarray, bit_up: np.ndarray,
             value_pos: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, ApplyReport]:
    """The auditor's side in NumPy: :func:`.rounding.apply_entries` and :func:`.rounding.unlogged`'s
    rules (the same IEEE operations and counts); positions ascending, as a decoded log holds them."""
    r64, scales, flags = _buffers(v, chunk)
    if not v.size:
        return r64, ApplyReport()
    counts = _site(v, chunk, beta_u, False, r64, scales, flags, np.ascontiguousarray(bit_pos, np.int64),
                   np.ascontiguousarray(bit_up, np.bool_), np.ascontiguousarray(value_pos, np.int64),
                   np.ascontiguousarray(value, np.float32))
    return r64, ApplyReport(*counts)


__all__ = ["AVAILABLE", "F64", "active", "apply", "apply_np", "decide", "decide_np", "round_plain", "round_plain_np"]
