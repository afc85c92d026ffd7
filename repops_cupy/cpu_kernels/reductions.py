"""Compiled fixed tree sums: the tree of `reduce` over rows, long rows and columns.

A length n = 2^b1 + 2^b2 + ... (b1 > b2 > ...) splits into complete subtrees of
2^b1, 2^b2, ... consecutive elements, and the tree of reduce.py is
C1 + (C2 + (... + Cj)), each C a complete pairwise tree: the levels give that shape
(a node at level L covers [i 2^L, min((i+1) 2^L, n))). A row's tree does not depend
on how rows are shared among threads. `tree_row` is also the sum inside the row ops
of `row_ops`.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from .compiler import function, kernel, scalar

# Layout of the tree's work (never its shape). Rows are summed in blocks of BLOCK
# elements (complete subtrees: a power of two starting at a multiple of itself), and
# a row longer than PIECE is cut into pieces summed in parallel, each a complete
# subtree too; their sums continue the same tree (see reduce.py).
BLOCK = 256
PIECE = 1 << 16
COL_TILE = 128  # columns summed together by the tree over the first axis
STACK = 64  # one partial sum per bit of a length


@scalar
def _complete_block(src, start, buf, size):
    # the complete subtree of src[start:start+size], size a power of two known when
    # compiling (the kernels pass literals): no odd carries, trip counts LLVM can
    # unroll and vectorize; in place (level[i] is written after 2i and 2i+1 are read)
    part = src[start:start + size]
    level = buf[0]
    for i in range(size // 2):
        level[i] = np.float64(part[2 * i]) + np.float64(part[2 * i + 1])
    n = size // 2
    while n > 1:
        n //= 2
        for i in range(n):
            level[i] = level[2 * i] + level[2 * i + 1]
    return level[0]


@scalar
def _padded_tree(row, start, n, buf):
    # the tree of row[start:start+n], 1 <= n <= BLOCK, as the complete subtree of
    # 16, 64 or BLOCK slots with -0.0 after the elements: x + (-0.0) is x for
    # every x (also +-0, inf, NaN), so a pad adds exactly what a carry keeps
    pad = buf[1]
    src = row[start:start + n]
    for i in range(n):
        pad[i] = np.float64(src[i])
    if n <= 16:
        pad[n:16] = -0.0
        return _complete_block(pad, 0, buf, 16)
    if n <= 64:
        pad[n:64] = -0.0
        return _complete_block(pad, 0, buf, 64)
    pad[n:BLOCK] = -0.0
    return _complete_block(pad, 0, buf, BLOCK)


@function
def tree_row(row, start, n, buf, stack):
    """The tree of row[start:start+n] in float64 (buf: (2, BLOCK) float64 scratch).

    Complete blocks of BLOCK elements join by a binary counter: after j blocks,
    stack[L] holds the complete subtree of 2^L blocks for each bit L set in j, and
    a new block merges with them (left + right) while the bits are set; the rest
    of the row is one more subtree, and the stack folds onto it from the right.
    """
    if n == 0:
        return 0.0
    blocks = n // BLOCK
    for j in range(blocks):
        s = _complete_block(row, start + j * BLOCK, buf, BLOCK)
        level = 0
        done = j
        while done & 1:
            s = stack[level] + s
            done >>= 1
            level += 1
        stack[level] = s
    rest = n - blocks * BLOCK
    have = rest > 0
    acc = 0.0
    if have:
        acc = _padded_tree(row, start + blocks * BLOCK, rest, buf)
    level = 0
    while blocks:
        if blocks & 1:
            acc = stack[level] + acc if have else stack[level]
            have = True
        blocks >>= 1
        level += 1
    return acc


@function
def _tree_rows_span(a, out, first, stop):
    n = a.shape[1]
    buf = np.empty((2, BLOCK), np.float64)
    stack = np.empty(STACK, np.float64)
    for r in range(first, stop):
        out[r] = tree_row(a[r], 0, n, buf, stack)


@kernel
def tree_rows(a, chunks, out):
    """out[r] = the tree of a[r, :] for a (rows, n) C-contiguous float32/float64 array."""
    rows = a.shape[0]
    for c in prange(chunks):
        _tree_rows_span(a, out, c * rows // chunks, (c + 1) * rows // chunks)


@kernel
def tree_pieces(a, pieces):
    """pieces[r, p] = the tree of a[r, p*PIECE:(p+1)*PIECE] (the last piece may be shorter)."""
    rows, n = a.shape
    count = pieces.shape[1]
    for q in prange(rows * count):
        r = q // count
        p = q % count
        buf = np.empty((2, BLOCK), np.float64)
        stack = np.empty(STACK, np.float64)
        start = p * PIECE
        pieces[r, p] = tree_row(a[r], start, min(PIECE, n - start), buf, stack)


@function
def _tree_cols_tile(a, out, c0, width):
    # Rows enter a binary counter: after j rows, stack[L] holds the complete subtree
    # of 2^L consecutive rows for each bit L set in j; a new row merges with them
    # from level 0 up (left + right) while the bits are set. At the end the
    # subtrees of the bits of n fold from the right.
    n = a.shape[0]
    stack = np.empty((STACK, width), np.float64)
    s = np.empty(width, np.float64)
    for j in range(n):
        row = a[j, c0:c0 + width]
        if j & 1 == 0:
            bottom = stack[0]
            for w in range(width):
                bottom[w] = np.float64(row[w])
            continue
        left = stack[0]
        for w in range(width):
            s[w] = left[w] + np.float64(row[w])
        level = 1
        done = j >> 1
        while done & 1:
            left = stack[level]
            for w in range(width):
                s[w] = left[w] + s[w]
            done >>= 1
            level += 1
        dst = stack[level]
        for w in range(width):
            dst[w] = s[w]
    have = False
    level = 0
    while n >> level:
        if (n >> level) & 1:
            part = stack[level]
            for w in range(width):
                s[w] = part[w] + s[w] if have else part[w]
            have = True
        level += 1
    for w in range(width):
        out[c0 + w] = s[w]


@kernel
def tree_cols(a, out):
    """out[c] = the tree of a[:, c] for a (n, cols) C-contiguous float32/float64 array, n >= 1."""
    cols = a.shape[1]
    tiles = (cols + COL_TILE - 1) // COL_TILE
    for tile in prange(tiles):
        c0 = tile * COL_TILE
        _tree_cols_tile(a, out, c0, min(COL_TILE, cols - c0))
