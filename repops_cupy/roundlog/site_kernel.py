"""One compiled pass per rounding site: the same decisions as :mod:`.rounding`, faster.

:func:`.rounding.decide` and :func:`.rounding.apply` are the specification: torch array
code that walks a site's float64 values about ten times (|v|, the chunk maxima, v - D,
v + D, two conversions, a comparison, the finite checks, the float32 result and its
float64 copy). :func:`scan` does it in two loops over the values, compiled by numba
without fastmath (``repops_cupy.cpu_kernels.compiler``): the same IEEE operations on
the same operands, so the same bits and the same positions, in the same order;
``tests/roundlog/test_roundlog_site_kernel.py`` compares them. The few ambiguous
positions then go through the specification's own code (:func:`.rounding.entries_for`,
:func:`.rounding.apply_entries`).

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

if AVAILABLE:
    from ..cpu_kernels.compiler import function

    @function
    def _scan(v, chunk, beta_u, half, r64, scales, cand, cand_d):  # pragma: no cover - compiled
        """r64 = float64(float32(v)); scales = max finite |v| per chunk; cand = the flat
        positions where [v - D', v + D'] rounds to two float32 values (D' = D, or D/2 with
        ``half``), v and float32(v) finite and v nonzero, with their D. Returns the count."""
        n = v.size
        count = 0
        for c0 in range(0, n, chunk):
            scale = 0.0
            for i in range(c0, c0 + chunk):
                a = abs(v[i])
                if a > scale and a != np.inf:
                    scale = a
            scales[c0 // chunk] = scale
            d = scale * beta_u
            dd = d * 0.5 if half else d
            for i in range(c0, c0 + chunk):
                x = v[i]
                r = np.float32(x)
                r64[i] = np.float64(r)
                if np.float32(x - dd) != np.float32(x + dd) and np.isfinite(x) and np.isfinite(r) and x != 0.0:
                    cand[count] = i
                    cand_d[count] = d
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


def scan(flat: torch.Tensor, chunk: int, beta_u: float, half: bool):
    """(r as float64, chunk maxima, candidate positions, their D) for a flat float64 site."""
    v = flat.detach().contiguous().numpy()
    n = v.size
    r64 = np.empty(n, dtype=np.float64)
    scales = np.empty(n // chunk if n else 0, dtype=np.float64)
    cand = np.empty(n, dtype=np.int64)  # pages never written are never touched
    cand_d = np.empty(n, dtype=np.float64)
    count = _scan(v, chunk, beta_u, half, r64, scales, cand, cand_d) if n else 0
    return (torch.from_numpy(r64), torch.from_numpy(scales), torch.from_numpy(cand[:count].copy()),
            torch.from_numpy(cand_d[:count].copy()))


def decide(flat: torch.Tensor, chunk: int, beta_u: float) -> tuple[torch.Tensor, Decisions]:
    """As :func:`.rounding.decide` on ``flat.view(-1, chunk)`` with D = beta_u * chunk max;
    the result as float64."""
    r64, _, idx, da = scan(flat, chunk, beta_u, False)
    return r64, rounding.entries_for(idx, flat[idx], da)


def apply(flat: torch.Tensor, chunk: int, beta_u: float, dec: Decisions) -> tuple[torch.Tensor, ApplyReport]:
    """As :func:`.rounding.apply`; the result as float64."""
    r64, scales, near, _ = scan(flat, chunk, beta_u, True)
    rep = rounding.apply_entries(lambda p: (flat[p], scales[p // chunk] * beta_u), r64, dec)
    rep.breaches += rounding.unlogged(near, dec)
    return r64, rep


__all__ = ["AVAILABLE", "F64", "active", "apply", "decide", "round_plain", "scan"]
