"""The step log's byte format: round trips, the choice of position encoding, corrupt input."""
import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from repops_cupy.roundlog.codec import (METHOD_BITMAP, METHOD_RICE, METHOD_VARINT, LogFormatError, StepLog,
                                        _read_varint, _write_varint, best_rice_k, decode_varints, encode_positions,
                                        encode_varints, rice_bits)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_varints_round_trip(values):
    arr = np.array(values, dtype=np.uint64)
    buf = encode_varints(arr)
    back, end = decode_varints(buf, 0, len(values))
    assert end == len(buf)
    assert back.tolist() == values


@given(st.integers(0, 2**64 - 1))
def test_one_varint_is_written_and_read_as_the_array_code_does(n):
    out = io.BytesIO()
    _write_varint(out, n)
    assert out.getvalue() == encode_varints(np.array([n], dtype=np.uint64))
    assert _read_varint(b"\x01" + out.getvalue() + b"\x05", 1) == (n, 1 + len(out.getvalue()))


@settings(max_examples=200)
@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=60))
def test_rice_parameter_is_the_first_with_the_fewest_bits(gaps):
    g = np.array(gaps, dtype=np.uint64)
    assert best_rice_k(g) == min(range(40), key=lambda k: rice_bits(g, k))


def test_varint_lengths():
    assert encode_varints(np.array([0, 127, 128, 16383, 16384], dtype=np.uint64)) == bytes(
        [0, 127, 0x80, 1, 0xFF, 0x7F, 0x80, 0x80, 1])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_step_log_round_trip(data):
    length = data.draw(st.integers(1, 5000))
    nbit = data.draw(st.integers(0, min(length, 400)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    pos = np.sort(rng.choice(length, size=nbit, replace=False)).astype(np.uint64)
    rest = np.setdiff1d(np.arange(length), pos)
    nval = data.draw(st.integers(0, min(rest.size, 20)))
    vpos = np.sort(rng.choice(rest, size=nval, replace=False)).astype(np.uint64)
    log = StepLog(step=data.draw(st.integers(0, 10**9)), stream_length=length, bit_pos=pos,
                  bit_up=rng.random(nbit) < 0.5, value_pos=vpos,
                  value=rng.standard_normal(nval).astype(np.float32))
    back = StepLog.decode(log.encode())
    assert back.step == log.step and back.stream_length == length
    assert np.array_equal(back.bit_pos, log.bit_pos) and np.array_equal(back.bit_up, log.bit_up)
    assert np.array_equal(back.value_pos, log.value_pos)
    assert back.value.tobytes() == log.value.tobytes()


def test_position_method_is_the_smallest():
    rng = np.random.default_rng(1)
    sparse = np.sort(rng.choice(10**6, 300, replace=False)).astype(np.uint64)
    dense = np.sort(rng.choice(4000, 2000, replace=False)).astype(np.uint64)
    clustered = np.arange(100, 160, dtype=np.uint64)
    assert encode_positions(sparse, 10**6)[0] == METHOD_RICE
    assert encode_positions(dense, 4000)[0] == METHOD_BITMAP
    assert encode_positions(clustered, 10**6)[0] in (METHOD_VARINT, METHOD_RICE)
    # Rice-coded sparse gaps cost about log2(mean gap) + 2 bits, below a 3-byte varint
    assert len(encode_positions(sparse, 10**6)) * 8 / sparse.size < 14


def test_corrupt_logs_are_rejected():
    rng = np.random.default_rng(2)
    pos = np.sort(rng.choice(10**5, 50, replace=False)).astype(np.uint64)
    good = StepLog(3, 10**5, pos, rng.random(50) < 0.5, np.array([7], dtype=np.uint64),
                   np.array([1.5], dtype=np.float32)).encode()
    with pytest.raises(LogFormatError):
        StepLog.decode(b"XXXX" + good[4:])
    with pytest.raises(LogFormatError):
        StepLog.decode(good + b"\0")
    for cut in (5, len(good) // 2, len(good) - 1):
        with pytest.raises(LogFormatError):
            StepLog.decode(good[:cut])
