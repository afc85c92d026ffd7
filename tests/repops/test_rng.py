"""Philox4x32-10 known answers, the derived samplers' specified bits, and reproducibility."""
import math

import numpy as np
import pytest

from repops_cupy import scalar_reference as ref
from repops_cupy import rng
from repops_cupy._backend import cupy_module
from repops_cupy.errors import OpError

# Random123 tests/kat_vectors, the philox4x32 lines: rounds, counter, key, expected
KAT = [
    (10, (0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (10, (0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (10, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    (7, (0, 0, 0, 0), (0, 0), (0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48)),
    (7, (0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662)),
    (7, (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A)),
]


@pytest.mark.parametrize("rounds, counter, key, expected", KAT)
def test_philox_known_answers(rounds, counter, key, expected):
    got = rng.philox4x32(np.array(counter, dtype=np.uint32), key, rounds)
    assert [int(v) for v in got] == list(expected)
    assert ref.philox4x32(counter, key, rounds) == list(expected)


def test_vectorised_philox_matches_scalar_reference_on_many_counters():
    gen = np.random.default_rng(71)
    ctr = gen.integers(0, 1 << 32, size=(300, 4), dtype=np.uint64).astype(np.uint32)
    key = (0x12345678, 0x9ABCDEF0)
    got = rng.philox4x32(ctr, key)
    expected = [ref.philox4x32([int(v) for v in c], key) for c in ctr]
    assert got.tolist() == expected


def test_blocks_follow_the_keying_spec():
    seed, stream, counter = (7 << 32) | 3, (11 << 32) | 5, (1 << 32) - 2  # counter crosses a 32-bit carry
    blocks = rng.philox_blocks(seed, stream, counter, 4)
    for i in range(4):
        b = counter + i
        ctr = (b & 0xFFFFFFFF, b >> 32, stream & 0xFFFFFFFF, stream >> 32)
        assert blocks[i].tolist() == ref.philox4x32(ctr, (seed & 0xFFFFFFFF, seed >> 32))


def test_chunked_requests_equal_one_request():
    whole = rng.random_uint32(5, 9, (40,), counter=3)
    parts = np.concatenate([rng.random_uint32(5, 9, (16,), counter=3), rng.random_uint32(5, 9, (24,), counter=7)])
    assert np.array_equal(whole, parts)
    assert np.array_equal(rng.normal_f32(5, 9, (10,), counter=2),
                          np.concatenate([rng.normal_f32(5, 9, (4,), counter=2), rng.normal_f32(5, 9, (6,), counter=4)]))


def test_streams_and_seeds_differ():
    a = rng.random_uint32(1, 0, (64,))
    assert not np.array_equal(a, rng.random_uint32(1, 1, (64,)))
    assert not np.array_equal(a, rng.random_uint32(2, 0, (64,)))
    assert np.array_equal(a, rng.random_uint32(1, 0, (64,)))


def test_uniform_is_24_bits_in_unit_interval_exactly():
    words = rng.random_uint32(3, 4, (1000,))
    u = rng.uniform_f32(3, 4, (1000,))
    assert u.dtype == np.float32 and (u >= 0).all() and (u < 1).all()
    assert np.array_equal(u.astype(np.float64) * 2**24, (words >> 8).astype(np.float64))


def test_bernoulli_threshold():
    words = rng.random_uint32(3, 4, (2000,))
    mask = rng.bernoulli(3, 4, (2000,), 0.25)
    assert np.array_equal(mask, words < (1 << 30))
    assert rng.bernoulli(3, 4, (50,), 0.0).sum() == 0 and rng.bernoulli(3, 4, (50,), 1.0).all()


def test_randint_is_the_exact_high_part_of_a_product():
    blocks = rng.philox_blocks(8, 1, 0, 50)
    values = rng.randint(8, 1, (100,), 1000003)
    for j, v in enumerate(values):
        w = blocks[j // 2]
        u = (int(w[2 * (j % 2)]) << 32) | int(w[2 * (j % 2) + 1])
        assert v == (u * 1000003) >> 64
    assert rng.randint(8, 1, (500,), 1 << 32).max() < 1 << 32
    assert (rng.randint(8, 1, (50,), 1) == 0).all()


def test_permutation_is_a_permutation_and_reproducible():
    p = rng.permutation(12, 3, 1000)
    assert sorted(p.tolist()) == list(range(1000))
    assert np.array_equal(p, rng.permutation(12, 3, 1000))
    assert not np.array_equal(p, rng.permutation(12, 4, 1000))
    assert rng.permutation(1, 1, 0).shape == (0,) and rng.permutation(1, 1, 1).tolist() == [0]


def test_permutation_is_the_argsort_of_the_specified_keys():
    n = 37
    _, u = rng._u64_pairs(4, 5, (n,), 0, np)
    s = (n - 1).bit_length()
    keys = [((int(v) >> s) << s) | i for i, v in enumerate(u)]
    assert rng.permutation(4, 5, n).tolist() == sorted(range(n), key=lambda i: keys[i])


def _ref_cos_sin_2pi(u: float) -> tuple[float, float]:
    v = u * 4.0
    q = math.floor(v)
    f = v - q
    swap = f > 0.5
    t = (1.0 - f if swap else f) * rng.PIO2
    z = t * t
    s1, s2, s3, s4, s5, s6 = rng.SIN_S
    st = t + (z * t) * (s1 + z * (s2 + z * (s3 + z * (s4 + z * (s5 + z * s6)))))
    c1, c2, c3, c4, c5, c6 = rng.COS_C
    r = z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * c6)))))
    hz = 0.5 * z
    w = 1.0 - hz
    ct = w + (((1.0 - w) - hz) + z * r)
    sin_phi, cos_phi = (ct, st) if swap else (st, ct)
    return [(cos_phi, sin_phi), (-sin_phi, cos_phi), (-cos_phi, -sin_phi), (sin_phi, -cos_phi)][q]


def test_normal_follows_the_box_muller_spec():
    n = 200
    blocks = rng.philox_blocks(21, 2, 5, n // 2)
    z = rng.normal_f32(21, 2, (n,), counter=5)
    for j in range(n):
        w = [int(v) for v in blocks[j // 2]]
        u1 = (((w[0] >> 11) << 32) | w[1]) + 1
        u2 = ((w[2] >> 11) << 32) | w[3]
        r = math.sqrt(-2.0 * ref.log(u1 * 2.0**-53))
        c, s = _ref_cos_sin_2pi(u2 * 2.0**-53)
        expected = np.float32(r * (c if j % 2 == 0 else s))
        assert z[j].view(np.uint32) == expected.view(np.uint32), j


def test_cos_sin_are_accurate():
    u = np.arange(4096, dtype=np.float64) / 4096 + 2.0**-20
    c, s = rng.cos_sin_2pi(u)
    assert np.abs(c - np.cos(2 * np.pi * u)).max() < 2e-15
    assert np.abs(s - np.sin(2 * np.pi * u)).max() < 2e-15


def test_normal_moments_are_plausible():
    z = rng.normal_f32(99, 0, (200000,)).astype(np.float64)
    mean = math.fsum(z) / z.size
    var = math.fsum((z - mean) ** 2) / z.size
    assert abs(mean) < 0.01 and abs(var - 1) < 0.015
    assert abs(math.fsum(z**3) / z.size) < 0.03 and abs(math.fsum(z**4) / z.size - 3) < 0.06
    assert np.isfinite(z).all() and np.abs(z).max() < 8.6  # 53-bit u1 bounds |z| by sqrt(106 ln 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda: rng.random_uint32(-1, 0, (3,)),
        lambda: rng.random_uint32(0, 1 << 64, (3,)),
        lambda: rng.random_uint32(0, 0, (5,), counter=(1 << 64) - 1),  # needs two blocks, one past the end
        lambda: rng.random_uint32(0, 0, (-1,)),
        lambda: rng.randint(0, 0, (3,), 0),
        lambda: rng.randint(0, 0, (3,), (1 << 32) + 1),
        lambda: rng.bernoulli(0, 0, (3,), 1.5),
        lambda: rng.philox4x32(np.zeros(4, np.int64), (0, 0)),
    ],
)
def test_invalid_arguments(call):
    with pytest.raises(OpError):
        call()


@pytest.mark.gpu
def test_cupy_gives_the_same_bits():
    cp = cupy_module()
    for fn, args in [(rng.random_uint32, ()), (rng.uniform_f32, ()), (rng.normal_f32, ())]:
        cpu = fn(3, 4, (1001,), 7)
        gpu = cp.asnumpy(fn(3, 4, (1001,), 7, xp=cp))
        assert np.array_equal(cpu.view(np.uint32), gpu.view(np.uint32)), fn.__name__
    assert np.array_equal(rng.permutation(3, 4, 5000), cp.asnumpy(rng.permutation(3, 4, 5000, xp=cp)))
    assert np.array_equal(rng.randint(3, 4, (999,), 77), cp.asnumpy(rng.randint(3, 4, (999,), 77, xp=cp)))
