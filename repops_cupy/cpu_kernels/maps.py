"""The parallel drivers of the elementwise maps: one for every unary span, one for the binary.

Elementwise results do not depend on how elements are shared among threads, so a
driver cuts a flat array into `chunks` spans and runs them under numba's `prange`.
Which span runs is an argument (its index in `UNARY` or `BINARY`), so each driver is
compiled once per dtype pair for every map, instead of one copied driver per map.
"""
from __future__ import annotations

from numba import prange

from .compiler import function, kernel
from .gelu import gelu_erf_span, gelu_grad_erf_span, gelu_grad_tanh_span, gelu_tanh_span
from .transcendentals import erf_span, erfc_span, exp_span, expm1_span, log_span, sigmoid_span, tanh_span

# x -> out, in the order of `_unary_span`'s branches
UNARY = ("exp", "expm1", "log", "tanh", "erf", "erfc", "sigmoid", "gelu_tanh", "gelu_erf")
UNARY_SPANS = dict(zip(UNARY, (exp_span, expm1_span, log_span, tanh_span, erf_span, erfc_span, sigmoid_span,
                               gelu_tanh_span, gelu_erf_span)))
# (g, x) -> out, in the order of `_binary_span`'s branches
BINARY = ("gelu_grad_tanh", "gelu_grad_erf")


@function
def _unary_span(op, x, out, start, stop):
    if op == 0:
        exp_span(x, out, start, stop)
    elif op == 1:
        expm1_span(x, out, start, stop)
    elif op == 2:
        log_span(x, out, start, stop)
    elif op == 3:
        tanh_span(x, out, start, stop)
    elif op == 4:
        erf_span(x, out, start, stop)
    elif op == 5:
        erfc_span(x, out, start, stop)
    elif op == 6:
        sigmoid_span(x, out, start, stop)
    elif op == 7:
        gelu_tanh_span(x, out, start, stop)
    elif op == 8:
        gelu_erf_span(x, out, start, stop)


@function
def _binary_span(op, g, x, out, start, stop):
    if op == 0:
        gelu_grad_tanh_span(g, x, out, start, stop)
    elif op == 1:
        gelu_grad_erf_span(g, x, out, start, stop)


@kernel
def unary_map(op, x, out, chunks):
    """out[i] = UNARY[op](x[i]) for flat contiguous x and out, in `chunks` parallel spans."""
    n = x.shape[0]
    for c in prange(chunks):
        _unary_span(op, x, out, c * n // chunks, (c + 1) * n // chunks)


@kernel
def binary_map(op, g, x, out, chunks):
    """out[i] = BINARY[op](g[i], x[i]) for flat contiguous g, x and out, in `chunks` parallel spans."""
    n = x.shape[0]
    for c in prange(chunks):
        _binary_span(op, g, x, out, c * n // chunks, (c + 1) * n // chunks)


def run_unary(name: str, x, out, chunks: int) -> None:
    """The map `name` over flat x into out: serially for one chunk (not worth waking threads)."""
    op = UNARY.index(name)
    if chunks == 1:
        _unary_span(op, x, out, 0, x.shape[0])
    else:
        unary_map(op, x, out, chunks)


def run_binary(name: str, g, x, out, chunks: int) -> None:
    op = BINARY.index(name)
    if chunks == 1:
        _binary_span(op, g, x, out, 0, x.shape[0])
    else:
        binary_map(op, g, x, out, chunks)
