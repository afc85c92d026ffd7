"""Rounding float64 values to float32 and deciding which decisions must be logged.

Every value that a rounding-log run keeps is a float32 number, carried in a float64
tensor. An operation computes in float64 from float32-valued inputs, so two honest
machines get float64 results that differ only by the operation's own float64
rounding error. That disagreement is bounded per element by ``D`` (an absolute
float64 amount, see :mod:`.thresholds`). Rounding to float32 is then unambiguous
unless the interval ``[v - D, v + D]`` contains a float32 rounding midpoint:

- no midpoint: nothing is logged, every machine rounds the same way;
- one midpoint, and ``D`` small against the float32 spacing there: a *bit entry*,
  the direction the trainer took (1 = up, to the larger neighbour);
- otherwise (the value sits so close to zero, or the op is so ill-conditioned, that
  ``D`` spans float32 cells): a *value entry*, the trainer's float32 result itself.

Exact zeros are never logged: they come from structure (masks, pooling), the same
on every machine.

An auditor applies the entries at the logged positions and rounds normally
elsewhere. It also checks the trainer's entries are plausible for its own value
and counts *margin breaches*: unlogged positions where its own value lies within
``D/2`` of a midpoint, which means the two machines disagreed by more than half
the bound. A breach is what an escaped flip looks like from the auditor's side.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

F64 = torch.float64
F32 = torch.float32
UNIT_ROUNDOFF_F64 = 2.0 ** -53
_POS_INF32 = torch.tensor(float("inf"), dtype=F32)
_NEG_INF32 = torch.tensor(float("-inf"), dtype=F32)
# A bit entry is used only where D < spacing/8: then the auditor's value, within
# 2D of the trainer's midpoint, is inside the same float32 cell (neighbouring cells
# are at least half as wide, so their midpoints are >= 3/4 spacing away).
BIT_ENTRY_MAX_D_OVER_SPACING = 0.125


def round32(v: torch.Tensor) -> torch.Tensor:
    """Nearest float32 (ties to even), as float32."""
    return v.to(F32)


def bracket(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 neighbours lo <= v <= hi (equal where v is a float32 value), as float64."""
    r = v.to(F32)
    rd = r.to(F64)
    up = torch.nextafter(r, _POS_INF32).to(F64)
    down = torch.nextafter(r, _NEG_INF32).to(F64)
    lo = torch.where(rd <= v, rd, down)
    hi = torch.where(rd >= v, rd, up)
    return lo, hi


@dataclass
class Decisions:
    """The entries one site's rounding needs, positions local to the flattened site tensor."""

    bit_pos: torch.Tensor  # int64
    bit_up: torch.Tensor  # bool
    value_pos: torch.Tensor  # int64
    value: torch.Tensor  # float32


def ambiguous(v: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Where [v - d, v + d] rounds to more than one float32 value (d >= 0, float64, broadcast)."""
    return (v - d).to(F32) != (v + d).to(F32)


def _as_rows(v: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both as 2-D: v (n, c) and d (n, 1) or (n, c). Flat inputs become one column."""
    if v.dim() == 1:
        return v.view(-1, 1), d.reshape(-1, 1)
    return v, d


def _candidates(v2: torch.Tensor, d2: torch.Tensor, cols: int, half: bool = False):
    """Flat positions, values and bounds where the rounding is ambiguous; finite, nonzero."""
    dd = d2 * 0.5 if half else d2
    rows, cs = ambiguous(v2, dd).nonzero(as_tuple=True)
    vs = v2[rows, cs]
    # Exact zeros are structural (masked positions, unselected pooling inputs); a
    # machine that instead computes a tiny nonzero there shows up as a breach.
    keep = torch.isfinite(vs) & torch.isfinite(vs.to(F32)) & (vs != 0)
    rows, cs, vs = rows[keep], cs[keep], vs[keep]
    return rows * cols + cs, vs, d2.expand_as(v2)[rows, cs]


def decide(v: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, Decisions]:
    """Trainer side: round a float64 tensor and list the entries to log.

    ``v`` is flat, or (chunks, chunk size) with ``d`` of shape (chunks, 1): the
    disagreement bound per element (float64, >= 0). Returns the flat float32 result
    and the entries, positions in the flattened tensor. Non-finite values are never logged.
    """
    v2, d2 = _as_rows(v, d)
    r = v2.to(F32).reshape(-1)
    idx, va, da = _candidates(v2, d2, v2.shape[1])
    return r, entries_for(idx, va, da)


def entries_for(idx: torch.Tensor, va: torch.Tensor, da: torch.Tensor) -> Decisions:
    """The entries for the ambiguous positions ``idx`` (values ``va``, bounds ``da``)."""
    if idx.numel() == 0:
        return Decisions(idx, torch.zeros(0, dtype=torch.bool), idx, torch.zeros(0, dtype=F32))
    ra = va.to(F32)
    lo, hi = bracket(va)
    narrow = da < BIT_ENTRY_MAX_D_OVER_SPACING * (hi - lo)
    bit_up = ra[narrow].to(F64) == hi[narrow]
    return Decisions(idx[narrow], bit_up, idx[~narrow], ra[~narrow])


@dataclass
class ApplyReport:
    corrections: int = 0  # entries whose logged result differs from the auditor's own rounding
    implausible: int = 0  # entries that do not fit the auditor's own value within 2D
    breaches: int = 0  # unlogged positions within D/2 of a midpoint (see module doc)

    def add(self, other: "ApplyReport") -> None:
        self.corrections += other.corrections
        self.implausible += other.implausible
        self.breaches += other.breaches


def apply(v: torch.Tensor, d: torch.Tensor, dec: Decisions) -> tuple[torch.Tensor, ApplyReport]:
    """Auditor side: round a float64 tensor (shaped as for :func:`decide`), applying the entries."""
    v2, d2 = _as_rows(v, d)
    cols = v2.shape[1]
    r = v2.to(F32).reshape(-1)
    dfull = d2.expand_as(v2)
    rep = apply_entries(lambda p: (v2[p // cols, p % cols], dfull[p // cols, p % cols]), r, dec)
    near, _, _ = _candidates(v2, d2, cols, half=True)
    rep.breaches += unlogged(near, dec)
    return r, rep


def apply_entries(at, r: torch.Tensor, dec: Decisions) -> ApplyReport:
    """Overwrite the plain rounding ``r`` (flat) at the logged positions; ``at(positions)``
    gives the auditor's own float64 values and bounds there."""
    rep = ApplyReport()
    for p, bits, values in ((dec.bit_pos, dec.bit_up, None), (dec.value_pos, None, dec.value)):
        if not p.numel():
            continue
        vp, dp = at(p)
        lo, hi = bracket(vp)
        if values is None:
            mid = (lo + hi) * 0.5  # exact: lo and hi are float32 values
            want = torch.where(bits, hi, lo).to(F32)
            rep.implausible += int(((vp - mid).abs() > 2 * dp).sum() + (lo == hi).sum())
        else:
            want = values
            rep.implausible += int(((values.to(F64) - vp).abs() > 2 * dp + (hi - lo)).sum())
        rep.corrections += int((want != r[p]).sum())
        r[p] = want.to(r.dtype)
    return rep


def unlogged(near: torch.Tensor, dec: Decisions) -> int:
    """How many of the positions ``near`` (within D/2 of a midpoint) carry no entry: breaches."""
    if not near.numel():
        return 0
    return int((~torch.isin(near, torch.cat([dec.bit_pos, dec.value_pos]))).sum())
