"""Compiled GELU: the float64 sequences of `elementwise.gelu` and `gelu_grad`, per element.

The erf form is 0.5x * erfc(-x/sqrt(2)), the tanh form 0.5x * (1 + tanh(...)), and
the slopes as `elementwise._gelu_slope_f64` writes them, on the compiled primitives of
`transcendentals`; the erf form redoes its tail lanes per block as `erfc_span` does.
The constants are `repops_cupy.constants`, compiled in. `maps` runs the spans.
"""
from __future__ import annotations

import math

import numpy as np

from .. import constants as C
from .compiler import function, scalar
from .transcendentals import LANES, all_lanes, erfc_scalar, exp_scalar, gather, scatter, store, tail_lanes, tanh_scalar


@scalar
def _tanh_inner(x, square):
    # tanh(sqrt(2/pi) * (x + k * x^3)), x^3 as (x * x) * x, square = x * x
    return tanh_scalar((x + (square * x) * C.GELU_TANH_K) * C.SQRT_2_OVER_PI)


@scalar
def _slope_limits(x, slope):
    # gelu'(inf) = 1, gelu'(-inf) = 0
    if x == math.inf:
        slope = 1.0
    if x == -math.inf:
        slope = 0.0
    return slope


@scalar
def gelu_tanh_scalar(x):
    y = (x * 0.5) * (_tanh_inner(x, x * x) + 1.0)
    if x == -math.inf:
        y = -0.0
    return y


@scalar
def gelu_erf_scalar(x, full):
    y = (x * 0.5) * erfc_scalar(x * -C.INV_SQRT2, full)
    if x == -math.inf:
        y = -0.0
    return y


@scalar
def gelu_tanh_slope(x):
    square = x * x
    t = _tanh_inner(x, square)
    left = (t + 1.0) * 0.5
    sech2 = 1.0 - t * t
    inner_slope = (square * C.GELU_TANH_3K + 1.0) * C.SQRT_2_OVER_PI
    return _slope_limits(x, left + (x * 0.5) * (sech2 * inner_slope))


@scalar
def gelu_erf_slope(x, full):
    cdf = erfc_scalar(x * -C.INV_SQRT2, full) * 0.5
    pdf = exp_scalar((x * x) * -0.5) * C.INV_SQRT_2PI
    return _slope_limits(x, cdf + x * pdf)


@function
def gelu_tanh_span(x, out, start, stop):
    src = x[start:stop]
    dst = out[start:stop]
    for i in range(src.shape[0]):
        dst[i] = gelu_tanh_scalar(np.float64(src[i]))


@function
def _gelu_erf_full(values, count):
    for j in range(count):
        values[j] = gelu_erf_scalar(values[j], True)


@function
def _gelu_erf_slope_full(values, count):
    for j in range(count):
        values[j] = gelu_erf_slope(values[j], True)


@function
def gelu_erf_span(x, out, start, stop):
    # as transcendentals.erfc_span: the lanes whose erfc argument lies in the tail are done again in full
    src = x[start:stop]
    dst = out[start:stop]
    lanes = np.empty(LANES, np.int64)
    values = np.empty(LANES, np.float64)
    for b in range(0, src.shape[0], LANES):
        part = src[b:b + LANES]
        into = dst[b:b + LANES]
        count = tail_lanes(part, -C.INV_SQRT2, C.ERFC_BIG, lanes)
        if 4 * count > part.shape[0]:
            all_lanes(part, values)
            _gelu_erf_full(values, part.shape[0])
            store(values, into)
            continue
        for i in range(part.shape[0]):
            into[i] = gelu_erf_scalar(np.float64(part[i]), False)
        gather(part, lanes, count, values)
        _gelu_erf_full(values, count)
        scatter(values, lanes, count, into)


@function
def gelu_grad_tanh_span(g, x, out, start, stop):
    grad = g[start:stop]
    src = x[start:stop]
    dst = out[start:stop]
    for i in range(src.shape[0]):
        dst[i] = np.float64(grad[i]) * gelu_tanh_slope(np.float64(src[i]))


@function
def gelu_grad_erf_span(g, x, out, start, stop):
    # as gelu_erf_span; the slope is multiplied by g after
    grad = g[start:stop]
    src = x[start:stop]
    dst = out[start:stop]
    lanes = np.empty(LANES, np.int64)
    values = np.empty(LANES, np.float64)
    for b in range(0, src.shape[0], LANES):
        part = src[b:b + LANES]
        part_g = grad[b:b + LANES]
        into = dst[b:b + LANES]
        count = tail_lanes(part, -C.INV_SQRT2, C.ERFC_BIG, lanes)
        if 4 * count > part.shape[0]:
            all_lanes(part, values)
            _gelu_erf_slope_full(values, part.shape[0])
            for i in range(part.shape[0]):
                into[i] = np.float64(part_g[i]) * values[i]
            continue
        for i in range(part.shape[0]):
            into[i] = np.float64(part_g[i]) * gelu_erf_slope(np.float64(part[i]), False)
        gather(part, lanes, count, values)
        _gelu_erf_slope_full(values, count)
        for j in range(count):
            into[lanes[j]] = np.float64(part_g[lanes[j]]) * values[j]
