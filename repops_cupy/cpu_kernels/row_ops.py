"""Compiled row ops of `nn`: softmax, log-softmax, layer norm, cross-entropy, one row at a time.

Each span is the sequence of nn.py for a row, its sums the fixed tree
(`reductions.tree_row`) and its exp and log the compiled primitives; a row's result
does not depend on how rows are shared among threads. Inputs are (rows, n)
C-contiguous float32 arrays.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .compiler import function, kernel, scalar
from .reductions import BLOCK, STACK, tree_row
from .transcendentals import exp_scalar, log_scalar


@scalar
def _shift_of(row, n):
    # float64(max(row) + 0f): NaN if any element is NaN, the zero maximum as +0.
    # The maximum is taken over integer keys that order like the float32 values
    # (negative patterns with their magnitude bits flipped): an exact integer max
    # that vectorizes, where a float max with NaN checks would not.
    bits = row[:n].view(np.int32)
    top = np.int64(-(1 << 31))
    nan = False
    for i in range(n):
        b = np.int64(bits[i])
        top = max(top, b ^ ((b >> 31) & 0x7FFFFFFF))
        nan |= (b & 0x7FFFFFFF) > 0x7F800000
    if nan:
        return np.nan
    value = np.int32(top ^ ((top >> 31) & 0x7FFFFFFF)).view(np.float32)
    return np.float64(value + np.float32(0.0))


# The first step of a row, shared by the spans below: inlined (`scalar`), so each span
# compiles as if it were written out (a call per row measured slower for layer norm).


@scalar
def _exp_shifted(row, n, e, buf, stack):
    # e = exp(x - max) for a row, the max (the shift) and tree(e): softmax, log-softmax, cross-entropy
    top = _shift_of(row, n)
    for i in range(n):
        e[i] = exp_scalar(np.float64(row[i]) - top)
    return top, tree_row(e, 0, n, buf, stack)


@scalar
def _centre_row(row, n, eps, d, sq, buf, stack):
    # d = x - mean and sq = d * d for a row, and rstd = 1 / sqrt(tree(sq) / n + eps): layer norm, its gradients
    mean = tree_row(row, 0, n, buf, stack) / n
    for i in range(n):
        v = np.float64(row[i]) - mean
        d[i] = v
        sq[i] = v * v
    return 1.0 / math.sqrt(tree_row(sq, 0, n, buf, stack) / n + eps)


@function
def _softmax_span(x, out, first, stop):
    n = x.shape[1]
    e = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        row = x[r]
        top, total = _exp_shifted(row, n, e, buf, stack)
        dst = out[r]
        for i in range(n):
            dst[i] = e[i] / total


@kernel
def softmax_rows(x, chunks, out):
    """out = e / tree(e), e = exp(x - max), per row of a (rows, n) float32 array."""
    rows = x.shape[0]
    for c in prange(chunks):
        _softmax_span(x, out, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _log_softmax_span(x, out, first, stop):
    n = x.shape[1]
    e = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        row = x[r]
        top, total = _exp_shifted(row, n, e, buf, stack)
        log_total = log_scalar(total)
        dst = out[r]
        for i in range(n):
            dst[i] = (np.float64(row[i]) - top) - log_total


@kernel
def log_softmax_rows(x, chunks, out):
    """out = (x - max) - log(tree(exp(x - max))), per row of a (rows, n) float32 array."""
    rows = x.shape[0]
    for c in prange(chunks):
        _log_softmax_span(x, out, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _softmax_grad_span(g, y, out, first, stop):
    n = g.shape[1]
    prod = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        gr = g[r]
        yr = y[r]
        for i in range(n):
            prod[i] = np.float64(gr[i]) * np.float64(yr[i])
        dot = tree_row(prod, 0, n, buf, stack)
        dst = out[r]
        for i in range(n):
            dst[i] = np.float64(yr[i]) * (np.float64(gr[i]) - dot)


@kernel
def softmax_grad_rows(g, y, chunks, out):
    """out = y * (g - tree(g * y)), per row; g, y (rows, n) float32."""
    rows = g.shape[0]
    for c in prange(chunks):
        _softmax_grad_span(g, y, out, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _log_softmax_grad_span(g, y, out, first, stop):
    n = g.shape[1]
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        gr = g[r]
        yr = y[r]
        total = tree_row(gr, 0, n, buf, stack)
        dst = out[r]
        for i in range(n):
            dst[i] = np.float64(gr[i]) - exp_scalar(np.float64(yr[i])) * total


@kernel
def log_softmax_grad_rows(g, y, chunks, out):
    """out = g - exp(y) * tree(g), per row; g, y (rows, n) float32."""
    rows = g.shape[0]
    for c in prange(chunks):
        _log_softmax_grad_span(g, y, out, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _layer_norm_span(x, gamma, beta, eps, out, first, stop):
    n = x.shape[1]
    d = np.empty(n, np.float64)
    sq = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        row = x[r]
        rstd = _centre_row(row, n, eps, d, sq, buf, stack)
        dst = out[r]
        for i in range(n):
            dst[i] = ((d[i] * rstd) * np.float64(gamma[i])) + np.float64(beta[i])


@kernel
def layer_norm_rows(x, gamma, beta, eps, chunks, out):
    """out = ((x - mean) * rstd) * gamma + beta per row of a (rows, n) float32 array."""
    rows = x.shape[0]
    for c in prange(chunks):
        _layer_norm_span(x, gamma, beta, eps, out, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _layer_norm_grad_x_span(g, x, gamma, eps, out, first, stop):
    n = x.shape[1]
    xhat = np.empty(n, np.float64)
    gg = np.empty(n, np.float64)
    tmp = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        row = x[r]
        rstd = _centre_row(row, n, eps, xhat, tmp, buf, stack)
        gr = g[r]
        for i in range(n):
            xhat[i] = xhat[i] * rstd
            gg[i] = np.float64(gr[i]) * np.float64(gamma[i])
            tmp[i] = gg[i] * xhat[i]
        mean_gg = tree_row(gg, 0, n, buf, stack) / n
        mean_gg_xhat = tree_row(tmp, 0, n, buf, stack) / n
        dst = out[r]
        for i in range(n):
            dst[i] = ((gg[i] - mean_gg) - xhat[i] * mean_gg_xhat) * rstd


@kernel
def layer_norm_grad_x_rows(g, x, gamma, eps, chunks, out):
    """out = rstd * ((gg - tree(gg)/n) - xhat * (tree(gg * xhat)/n)), gg = g * gamma, per row."""
    rows = x.shape[0]
    for c in prange(chunks):
        _layer_norm_grad_x_span(g, x, gamma, eps, out, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _layer_norm_xhat_g_span(g, x, eps, out, first, stop):
    n = x.shape[1]
    sq = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        row = x[r]
        dst = out[r]
        rstd = _centre_row(row, n, eps, dst, sq, buf, stack)
        gr = g[r]
        for i in range(n):
            dst[i] = (dst[i] * rstd) * np.float64(gr[i])


@kernel
def layer_norm_xhat_g_rows(g, x, eps, chunks, out):
    """out (float64) = xhat * g per row: the addends of layer_norm_grad_gamma."""
    rows = x.shape[0]
    for c in prange(chunks):
        _layer_norm_xhat_g_span(g, x, eps, out, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _cross_entropy_span(x, targets, picked, first, stop):
    n = x.shape[1]
    e = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        row = x[r]
        top, total = _exp_shifted(row, n, e, buf, stack)
        log_total = log_scalar(total)
        picked[r] = (np.float64(row[targets[r]]) - top) - log_total


@kernel
def cross_entropy_rows(x, targets, chunks, picked):
    """picked[r] = (x[r, t] - max) - log(tree(exp(x[r] - max))), t = targets[r] (float64)."""
    rows = x.shape[0]
    for c in prange(chunks):
        _cross_entropy_span(x, targets, picked, c * rows // chunks, (c + 1) * rows // chunks)


@function
def _cross_entropy_grad_span(x, targets, scale, out, first, stop):
    n = x.shape[1]
    e = np.empty(n, np.float64)
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        row = x[r]
        top, total = _exp_shifted(row, n, e, buf, stack)
        t = targets[r]
        dst = out[r]
        for i in range(n):
            p = e[i] / total
            if i == t:
                p = p - 1.0
            dst[i] = p * scale


@kernel
def cross_entropy_grad_rows(x, targets, scale, chunks, out):
    """out = (e / tree(e) - onehot(t)) * scale per row, e = exp(x - max)."""
    rows = x.shape[0]
    for c in prange(chunks):
        _cross_entropy_grad_span(x, targets, scale, out, c * rows // chunks, (c + 1) * rows // chunks)
