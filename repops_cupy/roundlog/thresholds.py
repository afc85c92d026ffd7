"""Disagreement bounds per rounding site: D = beta * u * (max |v| over the element's chunk).

``u = 2**-53`` and the chunk is one example's part of the site tensor (or the whole
tensor for shared and step sites). ``beta`` is looked up by site key
(``"<op>:out<j>"`` for an op's j-th output, ``"<op>:grad<k>"`` for the gradient with
respect to its k-th tensor input, ``"param_grad"``, ``"optim:<name>"``, ...).

- ``beta = 0`` marks a site whose float64 value is the same bits on every machine:
  a fixed composition of correctly rounded IEEE operations (add, mul, div, sqrt...)
  on float32-valued inputs, or a copy. Its rounding needs no log. Sums of two
  float32 values often land exactly on a float32 midpoint; a nonzero bound would
  log all of those for nothing.
- otherwise ``beta`` comes from measurement (:func:`repops_cupy.roundlog.calibrate`):
  the largest ``|v_A - v_B| / (u * chunk max|v|)`` seen between two configurations
  that computed from identical float32 inputs, times ``MARGIN``, and at least
  ``FLOOR_BETA`` (an op that never disagreed here may on other hardware: other SIMD
  paths for exp/erf, other reduction orders). Keys never measured get
  ``DEFAULT_BETA``.

The chunk is per example, not per row: a row that is pure float64 noise (the
gradient for the first query of causal attention, mathematically zero) must be
measured against its example's scale, or its noise would look large.

Because the bound is relative to the chunk's largest value and not to each
element's own float32 ulp, an element as large as its chunk's largest gets a
threshold of ~beta * 2**-30 of its own ulp, and an element that cancelled down to
near zero gets many of its ulps (it is logged, as a value entry where needed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

# Ops whose forward output, and whose gradients for inputs of the output's shape,
# are fixed compositions of correctly rounded float64 operations or copies: the
# same bits under any thread count, BLAS or batch split. (Gradients for a
# broadcast input sum over the broadcast axes, so they are not on this list.)
EXACT_OPS = frozenset({
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "where", "maximum", "minimum",
    "clamp", "masked_fill", "sqrt", "square", "embedding", "max_pool2d", "pow_int2",
    "zeros_like", "ones_like", "full_like", "ones", "zeros", "full", "arange", "tril", "triu",
    "float", "double", "to", "type_as", "expand_as_copy",
    "dropout",  # x * (0 or float32(1/(1-p))): a float32 product, exact in float64
    "own_gelu",  # the project's GELU and its gradient: one fixed float64 sequence (own_ops)
})

MIN_BETA = 8.0  # the bound must exceed float64 resolution: D >= 4 u |v| needs beta >= 4
FLOOR_BETA = 256.0  # inexact op measured here, whatever it measured
DEFAULT_BETA = 4096.0  # op never measured: generous
MARGIN = 16.0  # beta = MARGIN * measured max ratio


def _default_table() -> dict[str, float]:
    from .calibrated import BETAS  # noqa: PLC0415 - generated table, see scripts/bench_roundlog.py --calibrate
    return dict(BETAS)


@dataclass
class Thresholds:
    betas: dict[str, float] = field(default_factory=dict)
    default: float = DEFAULT_BETA

    @classmethod
    def measured(cls, overrides: Mapping[str, float] | None = None) -> "Thresholds":
        """The shipped table (measured on the example models) with optional overrides."""
        table = _default_table()
        table.update(overrides or {})
        return cls(table)

    def beta(self, key: str) -> float:
        op = key.split(":", 1)[0]
        if key in self.betas:
            b = self.betas[key]
        elif f"{op}:*" in self.betas:
            b = self.betas[f"{op}:*"]
        else:
            b = self.default
        return 0.0 if b == 0.0 else max(b, MIN_BETA)

    @staticmethod
    def from_ratios(ratios: Mapping[str, float], margin: float = MARGIN, floor: float = FLOOR_BETA) -> dict[str, float]:
        """beta = margin * measured max ratio, at least ``floor``, rounded up to a power of two."""
        out = {}
        for key, r in sorted(ratios.items()):
            b = max(margin * r, floor)
            out[key] = float(2.0 ** math.ceil(math.log2(b)))
        return out

    def to_dict(self) -> dict:
        return {"default": self.default, "betas": dict(sorted(self.betas.items()))}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Thresholds":
        return cls(dict(d.get("betas", {})), float(d.get("default", DEFAULT_BETA)))
