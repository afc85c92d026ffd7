"""One compiled pass per rounding site: the same decisions as :mod:`.rounding`, faster.

:func:`.rounding.decide` and :func:`.rounding.apply` are the specification: torch array
code that walks a site's float64 values about ten times (|v|, the chunk maxima, v - D,
v + D, two conversions, a comparison, the finite checks, the float32 result and its
float64 copy). :func:`scan_np` does it in three loops compiled by numba without fastmath
(``repops_cupy.cpu_kernels.compiler``), the first two free of branches so that they
vectorize: the chunk maxima (an integer max over the bit patterns), the rounding with a
flag per position, then the few flagged positions. The same IEEE operations on the same
operands, so the same bits and the same positions, in the same order;
``tests/roundlog/test_roundlog_site_kernel.py`` compares them. The trainer's entries for
the ambiguous positions follow :func:`.rounding.entries_for`'s rule in NumPy
(:func:`entries_np`); the auditor's go through the specification's own code
(:func:`.rounding.apply_entries`).

Without numba, or with REPOPS_CPU_KERNELS=0 (as for the other compiled kernels),
:func:`active` is False and the engine runs the specification.
"""
from __future__ import annotations

import numpy as np
import torch

from ..cpu_kernels import enabled
from ..cpu_kernels.compiler import AVAILABLE
from . import rounding
from .rounding import F64, ApplyReport, Decisions

_ABS = 0x7FFFFFFFFFFFFFFF  # float64 bits without the sign
_INF = 0x7FF0000000000000  # the bits of +inf: finite magnitudes lie below

if AVAILABLE:
    from ..cpu_kernels.compiler import function

    @function
    def _chunk_scales(bits, chunk, scales):  # pragma: no cover - compiled
        """scales[c] = the bits of max finite |v| over chunk c (0 if none). Non-negative float64
        values order as their bit patterns, so an integer max gives the float max, and the
        loop vectorizes (a float max with NaN rules would not)."""
        for c in range(bits.size // chunk):
            m = 0
            for i in range(c * chunk, (c + 1) * chunk):
                b = bits[i] & _ABS
                b = b if b < _INF else 0
                m = b if b > m else m
            scales[c] = m

    @function
    def _round_flag(v, chunk, dds, r64, flags):  # pragma: no cover - compiled
        """r64 = float64(float32(v)); flags = float32(v - D') != float32(v + D'), D' per chunk.
        No branch, so it vectorizes; the few flagged positions are checked by _collect."""
        for c in range(v.size // chunk):
            dd = dds[c]
            for i in range(c * chunk, (c + 1) * chunk):
                x = v[i]
                r64[i] = np.float64(np.float32(x))
                flags[i] = np.float32(x - dd) != np.float32(x + dd)

    @function
    def _collect(v, r64, flags, chunk, ds, cand, cand_d):  # pragma: no cover - compiled
        """The flagged positions whose v and float32(v) are finite and v nonzero, with their D."""
        count = 0
        for i in range(v.size):
            if flags[i]:
                x = v[i]
                if np.isfinite(x) and np.isfinite(r64[i]) and x != 0.0:
                    cand[count] = i
                    cand_d[count] = ds[i // chunk]
                    count += 1
        return count

    @function
    def _round_plain(v, r64):  # pragma: no cover - compiled
        for i in range(v.size):
            r64[i] = np.float64(np.float32(v[i]))


def active() -> bool:
    """Whether the engine should round through this module now."""
    return AVAILABLE and enabled(np)


def round_plain(flat: torch.Tensor) -> torch.Tensor:
    """float64(float32(v)) in one pass (an exact site: nothing to decide)."""
    v = flat.detach().contiguous().numpy()
    r64 = np.empty(v.size, dtype=np.float64)
    if v.size:
        _round_plain(v, r64)
    return torch.from_numpy(r64)


def scan_np(v: np.ndarray, chunk: int, beta_u: float, half: bool):
    """(r as float64, chunk maxima, candidate positions, their D) for a flat float64 site, as NumPy:
    the positions where [v - D', v + D'] rounds to two float32 values (D' = D, or D/2 with
    ``half``; D = beta_u * the chunk's max finite |v|), v and float32(v) finite and v nonzero."""
    n = v.size
    r64 = np.empty(n, dtype=np.float64)
    if not n:
        return r64, np.empty(0, np.float64), np.empty(0, np.int64), np.empty(0, np.float64)
    scale_bits = np.empty(n // chunk, dtype=np.int64)
    _chunk_scales(v.view(np.int64), chunk, scale_bits)
    scales = scale_bits.view(np.float64)
    d = scales * beta_u
    flags = np.empty(n, dtype=np.bool_)
    _round_flag(v, chunk, d * 0.5 if half else d, r64, flags)
    cand = np.empty(n, dtype=np.int64)  # pages never written are never touched
    cand_d = np.empty(n, dtype=np.float64)
    count = _collect(v, r64, flags, chunk, d, cand, cand_d)
    return r64, scales, cand[:count].copy(), cand_d[:count].copy()


def scan(flat: torch.Tensor, chunk: int, beta_u: float, half: bool):
    """As :func:`scan_np`, on and to torch tensors."""
    return tuple(torch.from_numpy(a) for a in scan_np(flat.detach().contiguous().numpy(), chunk, beta_u, half))


def entries_np(va: np.ndarray, da: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`.rounding.entries_for`'s rule in NumPy, for the values ``va`` and bounds ``da`` at
    ambiguous positions: (which are bit entries, their directions up, float32 results). The same
    IEEE operations (conversions, nextafter, a comparison, a scaling by 1/8), so the same entries."""
    ra, rd, lo, hi = _bracket(va)
    narrow = da < rounding.BIT_ENTRY_MAX_D_OVER_SPACING * (hi - lo)
    return narrow, rd[narrow] == hi[narrow], ra


def _bracket(va: np.ndarray):
    """float32(va), it as float64, and the float32 neighbours lo <= va <= hi as float64
    (:func:`.rounding.bracket`)."""
    ra = va.astype(np.float32)
    rd = ra.astype(np.float64)
    up = np.nextafter(ra, np.float32(np.inf)).astype(np.float64)
    down = np.nextafter(ra, np.float32(-np.inf)).astype(np.float64)
    return ra, rd, np.where(rd <= va, rd, down), np.where(rd >= va, rd, up)


def decide_np(v: np.ndarray, chunk: int, beta_u: float):
    """(r as float64, bit positions, bit directions, value positions, float32 values): the
    trainer's side of a flat float64 site, as :func:`decide`, in NumPy."""
    r64, _, idx, da = scan_np(v, chunk, beta_u, False)
    if not idx.size:
        return r64, idx, np.empty(0, np.bool_), idx, np.empty(0, np.float32)
    narrow, up, ra = entries_np(v[idx], da)
    return r64, idx[narrow], up, idx[~narrow], ra[~narrow]


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
    rules (the same IEEE operations and counts) over the compiled scan's plain rounding."""
    r64, scales, near, _ = scan_np(v, chunk, beta_u, True)
    rep = ApplyReport()
    for p, bits, values in ((bit_pos, bit_up, None), (value_pos, None, value)):
        if not p.size:
            continue
        vp, dp = v[p], scales[p // chunk] * beta_u
        _, _, lo, hi = _bracket(vp)
        if values is None:
            mid = (lo + hi) * 0.5  # exact: lo and hi are float32 values
            want = np.where(bits, hi, lo).astype(np.float32)
            rep.implausible += int(np.count_nonzero(np.abs(vp - mid) > 2 * dp) + np.count_nonzero(lo == hi))
        else:
            want = values
            rep.implausible += int(np.count_nonzero(np.abs(values.astype(np.float64) - vp) > 2 * dp + (hi - lo)))
        rep.corrections += int(np.count_nonzero(want != r64[p]))
        r64[p] = want
    if near.size:
        rep.breaches += int(np.count_nonzero(~np.isin(near, np.concatenate([bit_pos, value_pos]))))
    return r64, rep


__all__ = ["AVAILABLE", "F64", "active", "apply", "apply_np", "decide", "decide_np", "entries_np", "round_plain", "scan", "scan_np"]
