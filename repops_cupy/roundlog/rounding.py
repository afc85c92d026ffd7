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
    """Where [v - d, v + d] rounds to more than one float32 value (d >= 0, float64)."""
    return (v - d).to(F32) != (v + d).to(F32)


def decide(v: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, Decisions]:
    """Trainer side: round a flat float64 tensor and list the entries to log.

    ``d`` is the per-element disagreement bound (flat float64, same shape, >= 0).
    Returns the float32 result and the entries. Non-finite values are never logged.
    """
    r = v.to(F32)
    # Exact zeros are structural (masked positions, unselected pooling inputs); a
    # machine that instead computes a tiny nonzero there shows up as a breach.
    amb = ambiguous(v, d) & torch.isfinite(v) & torch.isfinite(r) & (v != 0)
    idx = amb.nonzero().flatten()
    if idx.numel() == 0:
        empty_i = idx
        return r, Decisions(empty_i, torch.zeros(0, dtype=torch.bool), empty_i, torch.zeros(0, dtype=F32))
    va, da, ra = v[idx], d[idx], r[idx]
    lo, hi = bracket(va)
    narrow = da < BIT_ENTRY_MAX_D_OVER_SPACING * (hi - lo)
    bit_idx = idx[narrow]
    bit_up = ra[narrow].to(F64) == hi[narrow]
    value_idx = idx[~narrow]
    return r, Decisions(bit_idx, bit_up, value_idx, ra[~narrow])


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
    """Auditor side: round a flat float64 tensor, applying the trainer's entries."""
    rep = ApplyReport()
    r = v.to(F32)
    logged = torch.zeros(v.shape, dtype=torch.bool)
    if dec.bit_pos.numel():
        p = dec.bit_pos
        vp, dp = v[p], d[p]
        lo, hi = bracket(vp)
        mid = (lo + hi) * 0.5  # exact: lo and hi are float32 values
        want = torch.where(dec.bit_up, hi, lo).to(F32)
        rep.corrections += int((want != r[p]).sum())
        rep.implausible += int(((vp - mid).abs() > 2 * dp).sum() + (lo == hi).sum())
        r[p] = want
        logged[p] = True
    if dec.value_pos.numel():
        p = dec.value_pos
        vp, dp = v[p], d[p]
        rep.corrections += int((dec.value != r[p]).sum())
        lo, hi = bracket(vp)
        rep.implausible += int(((dec.value.to(F64) - vp).abs() > 2 * dp + (hi - lo)).sum())
        r[p] = dec.value
        logged[p] = True
    half = 0.5 * d
    breach = ambiguous(v, half) & ~logged & torch.isfinite(v) & (v != 0)
    rep.breaches += int(breach.sum())
    return r, rep
