"""Ops a rounding-log run computes with the project's own operators instead of torch's float64 kernels.

GELU. torch's float64 GELU (and its backward) evaluates erf with SLEEF: AVX-512, AVX2 or
SSE code by the build and the CPU, and std::erf for the lanes left over at the end of a
tensor, so two honest machines may get float64 values that differ in the last bits; the
sites ``gelu:out0`` and ``gelu:grad0`` were logged at the floor bound because calibration
here never saw them differ. It is also slow: on this project's machines 7 ms for 262,144
values in the state the CPU is mostly found in (27 ns a value, 90x torch's float32 GELU,
7x its own float64 erf), four of them a step in the GPT job, more than the whole float32
step. :func:`repops_cupy.elementwise.gelu` and :func:`~repops_cupy.elementwise.gelu_grad`
compute float32(gelu(x)) and float32(g * gelu'(x)) from float32 operands by one fixed
float64 sequence of correctly rounded operations (erf and exp the project's own
polynomials, no fused multiply-add): the same bits on every machine and backend, so their
sites (``own_gelu:out0``, ``own_gelu:grad0``) are exact and never logged; 0.8 and 1.3 ms
for those 262,144 values on one core.

Only for a batch-dependent input: its values and the gradients that reach it are float32
values (every op output and batch gradient is rounded), the operators' domain. A GELU of
tensors computed from the parameters alone gets float64 partial gradient sums per
micro-batch, which must not be rounded before they are summed: it stays torch's (``gelu``
sites, logged as before).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import elementwise

OWN_GELU = "own_gelu"  # the op's name in site keys (an exact op, see thresholds.EXACT_OPS)


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float32)  # exact: float32 values


def _f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.astype(np.float64))


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, approximate: str) -> torch.Tensor:
        ctx.x32, ctx.approximate = _f32(x), approximate
        return _f64(elementwise.gelu(ctx.x32, approximate))

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return _f64(elementwise.gelu_grad(_f32(g), ctx.x32, ctx.approximate)), None


def gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:  # noqa: A002 - F.gelu's signature
    """F.gelu by the project's operators (float32-valued float64 in and out)."""
    return _Gelu.apply(input, approximate)
