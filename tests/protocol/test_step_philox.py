"""Element programs of dropout and dropout_at_step (protocol/step_philox.py) against the registry
operators, on the cases the spec singles out: p = 0 and p = 1 (an infinity times the scale 0 is
dropped, not NaN), a word whose top 24 bits equal the threshold (kept) or fall one short
(dropped), block indices carrying into the counter's high word and wrapping seeds and streams at
2^64 - 1, sizes that are not a multiple of four, a 0-d input, the first and the last step."""
from __future__ import annotations

import numpy as np
import pytest

from protocol.errors import LocalProtocolError
from protocol.step_philox import philox_block
from protocol.step_programs import trace_element
from protocol.step_trace import Tracer
from repops_cupy import rng as philox
from repops_cupy import scalar_reference as ref
from tests.protocol.test_step_programs import values
from tests.protocol.test_step_rows import assert_elements_match

U64_MAX = (1 << 64) - 1


@pytest.mark.parametrize("counter, key", [
    ((0, 0, 0, 0), (0, 0)), ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF)), ((1, 0, 0, 0), (0, 0)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)),  # Random123's known answer
])
def test_the_traced_block_is_philox4x32_10(counter, key):
    t = Tracer("philox", [], (), (), 0)
    words = [w.bits for w in philox_block(t, [t.const(c) for c in counter], key)]
    assert words == ref.philox4x32(counter, key)
    assert words == [int(w) for w in philox.philox4x32(np.array([counter], np.uint32), key)[0]]
    assert len(t.program) == 12 * philox.PHILOX_ROUNDS
    if counter[0] == 0x243F6A88:
        assert words == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_dropout_at_every_p_from_keep_all_to_drop_all(p):
    rng = np.random.default_rng(int(p * 10))
    x = values(rng, 45).reshape(3, 15)  # infinities, NaN, both zeros among them
    attrs = {"p": p, "seed": 0x0123456789ABCDEF, "stream": 5, "counter": 0}
    assert_elements_match("dropout", [x], attrs)


def test_a_word_at_the_threshold_is_kept_and_one_below_is_dropped():
    attrs = {"seed": 11, "stream": 2, "counter": 40}
    x = np.ones(8, np.float32)
    top = int(philox.random_uint32(11, 2, (8,), 40)[5]) >> 8  # element 5's top 24 bits
    for p, kept in ((top / 2.0**24, True), ((top + 0.5) / 2.0**24, False)):
        out = trace_element("dropout", {**attrs, "p": p}, [x], 5).output
        assert (out != 0) == kept, (p, hex(out))
        assert_elements_match("dropout", [x], {**attrs, "p": p})


@pytest.mark.parametrize("seed, stream, counter", [
    ((1 << 32) - 1, 7, (1 << 32) - 3),  # the block index carries into the counter's high word
    (U64_MAX, U64_MAX, U64_MAX - 5),  # the last blocks of the last stream, all-ones keys
    (0, 0, 0),
])
def test_dropout_over_counter_and_key_edges(seed, stream, counter):
    x = values(np.random.default_rng(3), 21).reshape(7, 3)  # 21 elements: the last block half used
    assert_elements_match("dropout", [x], {"p": 0.3, "seed": seed, "stream": stream, "counter": counter})


def test_dropout_of_a_0d_input_and_a_4d_input():
    rng = np.random.default_rng(4)
    assert_elements_match("dropout", [np.float32(2.5).reshape(())], {"p": 0.5, "seed": 1, "stream": 0, "counter": 3})
    assert_elements_match("dropout", [values(rng, 2 * 3 * 2 * 5).reshape(2, 3, 2, 5)],
                          {"p": 0.2, "seed": 9, "stream": 1, "counter": 77})


@pytest.mark.parametrize("step", [0, 1, 1000, (1 << 32) - 1])
def test_dropout_at_step_reads_its_counter_from_the_step(step):
    x = values(np.random.default_rng(step % 97), 24).reshape(4, 6)
    assert_elements_match("dropout_at_step", [x, np.array(step, np.int64)], {"p": 0.4, "seed": 5, "site": 7})


def test_the_program_depends_on_the_shape_and_attributes_only():
    rng = np.random.default_rng(6)
    attrs = {"p": 0.25, "seed": 3, "site": 1}
    a, b = values(rng, 24).reshape(4, 6), values(rng, 24).reshape(4, 6)
    roots = {trace_element("dropout_at_step", attrs, [x, np.array(s, np.int64)], e).spec.root
             for x in (a, b) for s in (0, 9) for e in (0, 13, 23)}
    assert len(roots) == 1
    assert trace_element("dropout_at_step", {**attrs, "site": 2}, [a, np.array(0, np.int64)], 0).spec.root not in roots


def test_attributes_out_of_range_are_refused():
    x = np.zeros(4, np.float32)
    with pytest.raises(LocalProtocolError):
        trace_element("dropout", {"p": 1.5, "seed": 0, "stream": 0, "counter": 0}, [x], 0)
    with pytest.raises(LocalProtocolError):
        trace_element("dropout", {"p": 0.5, "seed": 1 << 64, "stream": 0, "counter": 0}, [x], 0)
    with pytest.raises(LocalProtocolError):
        trace_element("dropout_at_step", {"p": 0.5, "seed": 0, "site": 1 << 31}, [x, np.array(0, np.int64)], 0)
    with pytest.raises(LocalProtocolError):
        trace_element("dropout_at_step", {"p": 0.5, "seed": 0, "site": 0}, [x, np.zeros(1, np.int64)], 0)
