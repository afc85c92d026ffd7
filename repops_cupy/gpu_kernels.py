"""Fused GPU kernels for the row-wise and element-wise chains (issue 15).

The CuPy path of softmax, layer norm and the optimizer updates runs as many small
array operations; these kernels do a row's (or an element's) whole chain at once. The
NumPy array code stays the specification: every kernel performs the same correctly
rounded IEEE operations in the same order (float64 inside where the spec widens,
exp by the project's fdlibm-style `exp_f64` written out below, never CUDA's exp), and
is compiled with `--fmad=false` so no multiply-add is contracted.

The fixed tree sum of `reduce.tree_sum_f64` is computed streaming, one row per
thread: level L of the tree adds the aligned blocks [i 2^L, (i + 1) 2^L) of the row
(an odd last element carried up is the block cut short by the row's end), so keeping
a stack of finished aligned blocks and folding what is left from the smallest block
up gives the same tree, in registers.

One source compiles two ways: NVRTC for CuPy (`SOURCE`, options `OPTIONS`), and plain
C for the CPU tests (`tests/repops/test_gpu_kernels.py` builds it with gcc, without
contraction, and compares bits with the NumPy path), so the only lines those tests
cannot run are the launches below. CuPy is used only when `enabled(xp)`.
"""
from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

import numpy as np

from .constants import EXP_P1, EXP_P2, EXP_P3, EXP_P4, EXP_P5, INVLN2, LN2_HI, LN2_LO, O_THRESHOLD, U_THRESHOLD

ENV = "REPOPS_GPU_KERNELS"  # "0": the CuPy path runs the array code instead (to compare)
OPTIONS = ("--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false")
THREADS = 128

_CONSTANTS = {"LN2_HI": LN2_HI, "LN2_LO": LN2_LO, "INVLN2": INVLN2, "O_THRESHOLD": O_THRESHOLD,
              "U_THRESHOLD": U_THRESHOLD, "EXP_P1": EXP_P1, "EXP_P2": EXP_P2, "EXP_P3": EXP_P3,
              "EXP_P4": EXP_P4, "EXP_P5": EXP_P5}

_BODY = r"""
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KERNEL extern "C" __global__
#define DEVICE __device__ static
#define FIRST ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define STRIDE ((long long)gridDim.x * blockDim.x)
#define INF_F64 __longlong_as_double(0x7ff0000000000000LL)
#else
#include <math.h>
#define KERNEL
#define DEVICE static
#define FIRST 0LL
#define STRIDE 1LL
#define INF_F64 INFINITY
#endif

/* transcendental.exp_f64, operation for operation */
DEVICE double exp_f64(double x) {
    if (x != x) return x;
    if (x > O_THRESHOLD) return INF_F64;
    if (x < U_THRESHOLD) return 0.0;
    double k = trunc(x * INVLN2 + (x < 0.0 ? -0.5 : 0.5));
    double hi = x - k * LN2_HI;
    double lo = k * LN2_LO;
    double r = hi - lo;
    double t = r * r;
    double c = r - t * (EXP_P1 + t * (EXP_P2 + t * (EXP_P3 + t * (EXP_P4 + t * EXP_P5))));
    double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    return ldexp(y, (int)k);
}

/* the fixed tree (reduce.tree_sum_f64), streamed: a stack of finished aligned blocks */
typedef struct { double sum[64]; long long count; int top; } Tree;

DEVICE void tree_start(Tree *t) { t->count = 0; t->top = 0; }

DEVICE void tree_add(Tree *t, double v) {
    t->sum[t->top++] = v;
    t->count += 1;
    for (long long c = t->count; (c & 1) == 0; c >>= 1) {  /* a block completed: merge pairs */
        t->top -= 1;
        t->sum[t->top - 1] = t->sum[t->top - 1] + t->sum[t->top];
    }
}

DEVICE double tree_end(Tree *t) {
    if (t->top == 0) return 0.0;
    double acc = t->sum[t->top - 1];
    for (int j = t->top - 2; j >= 0; j--) acc = t->sum[j] + acc;
    return acc;
}

/* reduce.tree_sum_f64 over the last axis of (rows, n) float64 */
KERNEL void tree_sum_rows(const double *x, double *out, long long rows, long long n) {
    for (long long r = FIRST; r < rows; r += STRIDE) {
        Tree t;
        tree_start(&t);
        for (long long i = 0; i < n; i++) tree_add(&t, x[r * n + i]);
        out[r] = tree_end(&t);
    }
}

/* nn.softmax over the last axis of (rows, n) */
KERNEL void softmax_rows(const float *x, float *out, long long rows, long long n) {
    for (long long r = FIRST; r < rows; r += STRIDE) {
        const float *row = x + r * n;
        float top = row[0];
        for (long long i = 1; i < n && top == top; i++) {
            float v = row[i];
            if (v != v || v > top) top = v;
        }
        top = top + 0.0f;  /* -0 -> +0 */
        Tree t;
        tree_start(&t);
        for (long long i = 0; i < n; i++) tree_add(&t, exp_f64((double)row[i] - (double)top));
        double total = tree_end(&t);
        for (long long i = 0; i < n; i++) out[r * n + i] = (float)(exp_f64((double)row[i] - (double)top) / total);
    }
}

/* nn.layer_norm over the last axis of (rows, n) */
KERNEL void layer_norm_rows(const float *x, const float *gamma, const float *beta, double eps, float *out,
                            long long rows, long long n) {
    for (long long r = FIRST; r < rows; r += STRIDE) {
        const float *row = x + r * n;
        Tree t;
        tree_start(&t);
        for (long long i = 0; i < n; i++) tree_add(&t, (double)row[i]);
        double mean = tree_end(&t) / (double)n;
        tree_start(&t);
        for (long long i = 0; i < n; i++) {
            double c = (double)row[i] - mean;
            tree_add(&t, c * c);
        }
        double var = tree_end(&t) / (double)n;
        double rstd = 1.0 / sqrt(var + eps);
        for (long long i = 0; i < n; i++) {
            double y = ((double)row[i] - mean) * rstd;
            y = y * (double)gamma[i];
            out[r * n + i] = (float)(y + (double)beta[i]);
        }
    }
}

/* optim.adamw_update; the beta powers are 0-d float32 arrays */
KERNEL void adamw_update(const float *param, const float *m, const float *v, const float *beta1_power,
                         const float *beta2_power, float lr, float eps, float decay, float *out, long long n) {
    float bc1 = 1.0f - beta1_power[0];
    float bc2 = 1.0f - beta2_power[0];
    float root_bc2 = sqrtf(bc2);
    float step = lr / bc1;
    for (long long i = FIRST; i < n; i += STRIDE) {
        float denom = sqrtf(v[i]) / root_bc2 + eps;
        out[i] = param[i] * decay - (m[i] / denom) * step;
    }
}

/* optim.adam_moment1 (square = 0) and adam_moment2 (square = 1) */
KERNEL void adam_moment(const float *moment, const float *grad, float beta, float rest, int square, float *out,
                        long long n) {
    for (long long i = FIRST; i < n; i += STRIDE) {
        float g = square ? grad[i] * grad[i] : grad[i];
        out[i] = moment[i] * beta + g * rest;
    }
}

/* optim.sgd_momentum (with_decay: d = grad + param * decay) */
KERNEL void sgd_momentum(const float *buf, const float *grad, const float *param, float momentum, float decay,
                         int with_decay, float *out, long long n) {
    for (long long i = FIRST; i < n; i += STRIDE) {
        float d = with_decay ? grad[i] + param[i] * decay : grad[i];
        out[i] = buf[i] * momentum + d;
    }
}

/* optim.sgd_update */
KERNEL void sgd_update(const float *param, const float *buf, float lr, float *out, long long n) {
    for (long long i = FIRST; i < n; i += STRIDE) out[i] = param[i] - buf[i] * lr;
}
"""

SOURCE = "".join(f"#define {name} {value.hex()}\n" for name, value in _CONSTANTS.items()) + _BODY
KERNELS = ("tree_sum_rows", "softmax_rows", "layer_norm_rows", "adamw_update", "adam_moment", "sgd_momentum", "sgd_update")


def enabled(xp: ModuleType) -> bool:
    """Whether the fused kernels serve arrays of module xp now (CuPy only)."""
    return xp is not np and os.environ.get(ENV, "1") != "0"


@functools.cache
def _module(cp: ModuleType) -> Any:
    return cp.RawModule(code=SOURCE, options=OPTIONS)  # GPU only: compiled by NVRTC


def _launch(cp: ModuleType, name: str, count: int, args: tuple) -> None:
    blocks = max(1, min(-(-count // THREADS), 65535))
    _module(cp).get_function(name)((blocks,), (THREADS,), args)  # GPU only


def _i64(x: int) -> np.int64:
    return np.int64(x)


def softmax(cp: ModuleType, x: Any) -> Any:
    """nn.softmax over the last axis of a float32 CuPy array with a non-empty last axis."""
    x = cp.ascontiguousarray(x)
    out = cp.empty_like(x)
    n = x.shape[-1]
    _launch(cp, "softmax_rows", x.size // n, (x, out, _i64(x.size // n), _i64(n)))
    return out


def layer_norm(cp: ModuleType, x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    """nn.layer_norm over the last axis (float32 CuPy arrays, checked by the caller)."""
    x = cp.ascontiguousarray(x)
    out = cp.empty_like(x)
    n = x.shape[-1]
    args = (x, cp.ascontiguousarray(gamma), cp.ascontiguousarray(beta), np.float64(eps), out, _i64(x.size // n), _i64(n))
    _launch(cp, "layer_norm_rows", x.size // n, args)
    return out


def elementwise(cp: ModuleType, name: str, arrays: tuple, scalars: tuple) -> Any:
    """One of the optimizer kernels over same-shaped float32 CuPy arrays: (arrays..., scalars..., out, n)."""
    arrays = tuple(cp.ascontiguousarray(a) for a in arrays)
    out = cp.empty(arrays[0].shape, np.float32)
    _launch(cp, name, out.size, arrays + scalars + (out, _i64(out.size)))
    return out
