"""Element program of embedding_grad, a scatter-add (issue 18): row v of the gradient is the fixed
tree over the positions p holding id v, ascending p (repops_cupy/nn.py), whose length L follows
the data. It is still a straight-line program:

1. every position p gets the key (ids[p] != v) * 2^32 + p, so the positions of v come first, in
   ascending order, under any sort;
2. a bitonic sorting network (a fixed sequence of compare-exchanges, each an `i64_lt` and two
   `select`s) sorts the P keys;
3. slot k holds g[position of key k, d] where key k is one of v's, else -0.0; each slot's value
   is a GATHER at its key's position;
4. the tree over all P slots is the tree over the first L: adding -0.0 is the identity on every
   float64 (x + -0 = x, -0 + -0 = -0, NaN stays the NaN), and padding a level of the tree with
   -0.0 at its end pairs the real values exactly as the spec's tree carries an odd last one up;
5. an id that occurs nowhere (L = 0) gets +0, as the spec says.

The network has P/4 log2(P) (log2(P) + 1) compare-exchanges for P a power of two (keys padded up
to one); tiny-gpt's P = 512 positions give a program of 39 171 steps.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .errors import LocalProtocolError
from .step_math import out32, tree_sum
from .step_trace import Tracer, Val, View

__all__ = ["SCATTER_FAMILIES", "bitonic_sort"]

Shapes = Sequence[tuple[int, ...]]
Layout = tuple[tuple[int, ...], tuple[View, ...]]
_MISS = 1 << 32  # a key's bit saying "another id"; positions stay below it
_LOW = _MISS - 1


def bitonic_sort(t: Tracer, keys: Sequence[Val]) -> list[Val]:
    """The keys (distinct int64 values, a power of two of them) in ascending order, by Batcher's
    bitonic network: the same compare-exchanges whatever the values."""
    a = list(keys)
    n = len(a)
    if n & (n - 1):
        raise LocalProtocolError(f"a bitonic network sorts a power of two of keys, got {n}")
    size = 2
    while size <= n:
        half = size // 2
        while half:
            for i in range(n):
                partner = i ^ half
                if partner > i:
                    lo, hi = (i, partner) if i & size == 0 else (partner, i)
                    swap = t.i64_lt(a[hi], a[lo])
                    a[lo], a[hi] = t.select(swap, a[hi], a[lo]), t.select(swap, a[lo], a[hi])
            half //= 2
        size *= 2
    return a


def _embedding_grad_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    g, ids = (tuple(s) for s in shapes)
    if len(g) != len(ids) + 1 or g[:-1] != ids:
        raise LocalProtocolError(f"embedding_grad: g must have shape ids.shape + (D,), got {g} for ids {ids}")
    if math.prod(ids) >= _MISS:
        raise LocalProtocolError(f"embedding_grad: {math.prod(ids)} positions do not fit a key")
    return (int(attrs["num_embeddings"]), g[-1]), (View(1, (0, 0)), View(0, (0, 1)))


def _embedding_grad(t: Tracer, attrs, shapes) -> Val:
    """The tree over the positions of id v (view 0: the ids from the first; view 1: g at column d)."""
    positions, width = math.prod(shapes[1]), shapes[0][-1]
    v = t.coord(0)
    keys = [t.bit_or(t.select(t.i64_sub(t.input(0, p), v), t.const(_MISS), t.const(0)), t.const(p))
            for p in range(positions)]
    padded = 1 << max(0, (positions - 1).bit_length())
    keys += [t.const(_MISS | p) for p in range(positions, padded)]  # after every real key
    ordered = bitonic_sort(t, keys)[:positions]
    slots = []
    for key in ordered:
        at = t.i64_mul(t.bit_and(key, t.const(_LOW)), t.const(width))
        slots.append(t.select(t.i64_lt(key, t.const(_MISS)), t.f32_to_f64(t.gather(1, at)), t.c64(-0.0)))
    if not slots:
        return out32(t, t.c64(0.0))
    occurs = t.i64_lt(ordered[0], t.const(_MISS))
    return out32(t, t.select(occurs, tree_sum(t, slots), t.c64(0.0)))


SCATTER_FAMILIES = {"embedding_grad": (_embedding_grad_views, _embedding_grad)}
