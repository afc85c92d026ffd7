"""Counter-based random numbers: Philox4x32-10 in integer arithmetic, and what is built on it.

Specification
-------------
Generator. Philox4x32-10 (Salmon et al., SC'11; Random123): a 128-bit counter
(c0, c1, c2, c3) and a 64-bit key (k0, k1) give four uint32 words. One round:
  p0 = 0xD2511F53 * c0, p1 = 0xCD9E8D57 * c2 (exact 64-bit products),
  (c0, c1, c2, c3) <- (hi(p1) ^ c1 ^ k0, lo(p1), hi(p0) ^ c3 ^ k1, lo(p0));
ten rounds, the key bumped by (0x9E3779B9, 0xBB67AE85) mod 2^32 between rounds.
The 32x32->64-bit products are exact in uint64 on NumPy and CuPy alike; nothing here
touches floating point until the final, exact conversions.

Keying. seed (a 64-bit integer) is the key: k0 = low 32 bits, k1 = high 32 bits.
stream (64-bit) is the upper counter half: c2 = low 32 bits, c3 = high 32 bits.
The lower counter half is the block index b = counter + i (c0 = low, c1 = high),
for i = 0, 1, ...; `counter` is the first block index of a request. Each block gives
four words, lanes 0..3. Seed, stream, counter are integers in [0, 2^64), and a request
may not run past block 2^64 - 1.

Derived values (element j of a C-ordered output, block = counter + j // per_block):
- random_uint32: 4 per block, word lane j % 4.
- uniform_f32: 4 per block, (word >> 8) * 2^-24: 24 random bits, exactly in [0, 1).
- bernoulli: 4 per block, True where word < floor(p * 2^32).
- randint(high): 2 per block, u = 2^32*w[2l] + w[2l+1] (l = j % 2), 64 bits;
  value = floor(u * high / 2^64), exact in integers; 1 <= high <= 2^32.
- normal_f32: 2 per block (Box-Muller, all float64, rounded once to float32):
  u1 = (2^32*(w0 >> 11) + w1 + 1) * 2^-53 in (0, 1], u2 = (2^32*(w2 >> 11) + w3) * 2^-53
  in [0, 1), r = sqrt(-2 * log_f64(u1)); lane 0 gives r*cos(2 pi u2), lane 1 r*sin(2 pi u2).
  cos and sin of 2 pi u2: q = floor(4 u2), f = 4 u2 - q (both exact), h = f or 1 - f
  (whichever is <= 0.5, exact), t = h * PIO2, and fdlibm's kernel polynomials for
  sin(t) and cos(t) on [0, pi/4]; the quadrant q and the swap pick signs and order.
- permutation(n): keys k_i = ((u_i >> s) << s) | i, s = bit length of n-1, u_i the
  64-bit value of element i as in randint; the permutation is the argsort of the keys.
  Keys are distinct, so every correct sort gives the same order.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._backend import array_module
from .errors import OpError
from .transcendental import log_f64

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
_MASK32 = 0xFFFFFFFF
_LIMIT64 = 1 << 64

PIO2 = 1.5707963267948966  # pi/2, nearest double
# fdlibm __kernel_sin / __kernel_cos coefficients on [-pi/4, pi/4]
SIN_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
         2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
COS_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
         -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


def philox4x32(counter: Any, key: tuple[int, int], rounds: int = PHILOX_ROUNDS) -> Any:
    """Philox4x32 with `rounds` rounds: uint32 counters of shape (..., 4), key (k0, k1) -> uint32 (..., 4)."""
    xp = array_module(counter)
    if getattr(counter, "dtype", None) != np.uint32 or counter.shape[-1:] != (4,):
        raise OpError("philox4x32: counter must be a uint32 array of shape (..., 4)")
    k0, k1 = (int(k) for k in key)
    if not (0 <= k0 <= _MASK32 and 0 <= k1 <= _MASK32):
        raise OpError(f"philox4x32: key words must be uint32, got {key!r}")
    c = counter.astype(np.uint64)
    c0, c1, c2, c3 = c[..., 0], c[..., 1], c[..., 2], c[..., 3]
    m0, m1, low, shift = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1), np.uint64(_MASK32), np.uint64(32)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + PHILOX_W0) & _MASK32, (k1 + PHILOX_W1) & _MASK32
        p0 = c0 * m0  # < 2^64: exact
        p1 = c2 * m1
        c0, c1, c2, c3 = (p1 >> shift) ^ c1 ^ np.uint64(k0), p1 & low, (p0 >> shift) ^ c3 ^ np.uint64(k1), p0 & low
    return xp.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _check_u64(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < _LIMIT64:
        raise OpError(f"rng: {name} must be an integer in [0, 2^64), got {value!r}")
    return int(value)


def _shape(shape: Any) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise OpError(f"rng: shape must be non-negative ints, got {shape!r}")
    return tuple(int(d) for d in shape)


def philox_blocks(seed: int, stream: int, counter: int, n_blocks: int, xp: Any = np) -> Any:
    """Blocks counter .. counter+n_blocks-1 of (seed, stream): uint32 array (n_blocks, 4)."""
    seed, stream, counter = _check_u64("seed", seed), _check_u64("stream", stream), _check_u64("counter", counter)
    if counter + n_blocks > _LIMIT64:
        raise OpError("rng: the request runs past the last block of the stream")
    index = xp.arange(n_blocks, dtype=np.uint64) + np.uint64(counter)
    ctr = xp.empty((n_blocks, 4), dtype=np.uint32)
    ctr[:, 0] = (index & np.uint64(_MASK32)).astype(np.uint32)
    ctr[:, 1] = (index >> np.uint64(32)).astype(np.uint32)
    ctr[:, 2] = stream & _MASK32
    ctr[:, 3] = stream >> 32
    return philox4x32(ctr, (seed & _MASK32, seed >> 32))


def _lanes(seed: int, stream: int, shape: Any, counter: int, per_block: int, xp: Any) -> tuple[tuple[int, ...], Any]:
    """Blocks for a C-ordered output of `shape`, `per_block` elements per block: (shape, (n_blocks, 4))."""
    shape = _shape(shape)
    size = math.prod(shape)
    return shape, philox_blocks(seed, stream, counter, -(-size // per_block), xp)


def random_uint32(seed: int, stream: int, shape: Any, counter: int = 0, xp: Any = np) -> Any:
    """Uniform uint32 words, four per block."""
    shape, blocks = _lanes(seed, stream, shape, counter, 4, xp)
    return blocks.reshape(-1)[: math.prod(shape)].reshape(shape)


def uniform_f32(seed: int, stream: int, shape: Any, counter: int = 0, xp: Any = np) -> Any:
    """float32 in [0, 1) with 24 random bits each: (word >> 8) * 2^-24, exact."""
    words = random_uint32(seed, stream, shape, counter, xp)
    return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)


def bernoulli(seed: int, stream: int, shape: Any, p: float, counter: int = 0, xp: Any = np) -> Any:
    """Booleans, True with probability floor(p * 2^32) / 2^32 (word < that threshold)."""
    if not 0.0 <= p <= 1.0:
        raise OpError(f"rng: p must be in [0, 1], got {p!r}")
    threshold = math.floor(p * 2.0**32)  # exact: p * 2^32 scales by a power of two
    words = random_uint32(seed, stream, shape, counter, xp)
    return words.astype(np.uint64) < np.uint64(threshold)


def _u64_pairs(seed: int, stream: int, shape: Any, counter: int, xp: Any) -> tuple[tuple[int, ...], Any]:
    """64-bit values, two per block: 2^32 * w[2l] + w[2l+1]."""
    shape, blocks = _lanes(seed, stream, shape, counter, 2, xp)
    b = blocks.astype(np.uint64)
    pairs = xp.stack([(b[:, 0] << np.uint64(32)) | b[:, 1], (b[:, 2] << np.uint64(32)) | b[:, 3]], axis=1)
    return shape, pairs.reshape(-1)[: math.prod(shape)]


def randint(seed: int, stream: int, shape: Any, high: int, counter: int = 0, xp: Any = np) -> Any:
    """int64 in [0, high): floor(u * high / 2^64) of a 64-bit u, exact; 1 <= high <= 2^32."""
    if isinstance(high, bool) or not isinstance(high, (int, np.integer)) or not 1 <= high <= 1 << 32:
        raise OpError(f"rng: high must be an integer in [1, 2^32], got {high!r}")
    shape, u = _u64_pairs(seed, stream, shape, counter, xp)
    h = np.uint64(high)
    # u*high = (uh*high) * 2^32 + ul*high; each product < 2^64 and the sum below cannot wrap
    top = (u >> np.uint64(32)) * h + (((u & np.uint64(_MASK32)) * h) >> np.uint64(32))
    return (top >> np.uint64(32)).astype(np.int64).reshape(shape)


def permutation(seed: int, stream: int, n: int, counter: int = 0, xp: Any = np) -> Any:
    """A random permutation of range(n) as int64, from distinct 64-bit sort keys."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise OpError(f"rng: n must be a non-negative integer, got {n!r}")
    _, u = _u64_pairs(seed, stream, (n,), counter, xp)
    s = np.uint64(max(int(n) - 1, 0).bit_length())
    keys = ((u >> s) << s) | xp.arange(n, dtype=np.uint64)
    return xp.argsort(keys).astype(np.int64)  # distinct keys: every sort algorithm agrees


def _sin_kernel(t: Any) -> Any:
    z = t * t
    v = z * t
    s1, s2, s3, s4, s5, s6 = SIN_S
    r = s2 + z * (s3 + z * (s4 + z * (s5 + z * s6)))
    return t + v * (s1 + z * r)


def _cos_kernel(t: Any) -> Any:
    z = t * t
    c1, c2, c3, c4, c5, c6 = COS_C
    r = z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * c6)))))
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + z * r)


def cos_sin_2pi(u: Any) -> tuple[Any, Any]:
    """(cos(2 pi u), sin(2 pi u)) for float64 u in [0, 1), reduced exactly by quadrant."""
    xp = array_module(u)
    v = u * 4.0
    q = xp.floor(v)
    f = v - q
    swap = f > 0.5
    t = xp.where(swap, 1.0 - f, f) * PIO2
    st, ct = _sin_kernel(t), _cos_kernel(t)
    sin_phi = xp.where(swap, ct, st)  # phi = f * pi/2
    cos_phi = xp.where(swap, st, ct)
    cos_a = xp.where(q == 0, cos_phi, xp.where(q == 1, -sin_phi, xp.where(q == 2, -cos_phi, sin_phi)))
    sin_a = xp.where(q == 0, sin_phi, xp.where(q == 1, cos_phi, xp.where(q == 2, -sin_phi, -cos_phi)))
    return cos_a, sin_a


def normal_f32(seed: int, stream: int, shape: Any, counter: int = 0, xp: Any = np) -> Any:
    """Standard normal float32 samples by Box-Muller in float64, two per block."""
    shape, blocks = _lanes(seed, stream, shape, counter, 2, xp)
    b = blocks.astype(np.uint64)
    eleven, two32 = np.uint64(11), np.uint64(32)
    u1 = (((b[:, 0] >> eleven) << two32) | b[:, 1]) + np.uint64(1)  # 1 .. 2^53
    u2 = ((b[:, 2] >> eleven) << two32) | b[:, 3]  # 0 .. 2^53 - 1
    u1 = u1.astype(np.float64) * 2.0**-53  # exact: integers up to 2^53, power-of-two scale
    u2 = u2.astype(np.float64) * 2.0**-53
    r = xp.sqrt(-2.0 * log_f64(u1))
    cos_a, sin_a = cos_sin_2pi(u2)
    z = xp.stack([r * cos_a, r * sin_a], axis=1).reshape(-1)[: math.prod(shape)]
    return z.astype(np.float32).reshape(shape)
