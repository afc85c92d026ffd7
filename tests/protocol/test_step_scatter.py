"""The element program of embedding_grad (protocol/step_scatter.py) against the registry operator:
ids that occur nowhere, once, everywhere; -0.0, infinities and NaN in g; sums whose value depends
on the tree's order; int32 and int64 ids; position counts that are not a power of two."""
from __future__ import annotations

import numpy as np
import pytest

from protocol.errors import LocalProtocolError
from protocol.step_programs import trace_element
from protocol.step_scatter import bitonic_sort
from protocol.step_trace import Tracer
from tests.protocol.test_step_programs import values
from tests.protocol.test_step_rows import assert_elements_match


@pytest.mark.parametrize("shape, vocab, width, dtype", [((2, 5), 6, 3, np.int64), ((3, 4), 4, 2, np.int32),
                                                       ((7,), 3, 4, np.int64), ((1,), 2, 2, np.int64)])
def test_every_row_is_the_tree_over_its_ids_positions(shape, vocab, width, dtype):
    rng = np.random.default_rng(vocab + width)
    ids = rng.integers(0, vocab - 1, shape).astype(dtype)  # the last id occurs nowhere: +0
    g = values(rng, ids.size * width).reshape(*shape, width)
    assert_elements_match("embedding_grad", [g, ids], {"num_embeddings": vocab})


def test_minus_zero_sums_and_order_sensitive_sums_come_out_as_the_spec_adds_them():
    """Id 0 holds -0 everywhere (its tree is -0: the -0 padding must not turn it into +0); id 1's
    values cancel only in the spec's pairing; id 2 holds one inf and one NaN column."""
    ids = np.array([0, 1, 1, 0, 1, 2, 1, 2, 1, 0, 2], dtype=np.int64)
    g = np.zeros((ids.size, 2), dtype=np.float32)
    g[ids == 0] = -0.0
    g[ids == 1] = np.array([[1e30, 1.0], [1.0, 3e-8], [-1e30, 1.0], [3.0, -1.0], [5e-8, 1e8]], dtype=np.float32)
    g[ids == 2] = np.array([[np.inf, 1.0], [2.0, np.nan], [-1.0, 4.0]], dtype=np.float32)
    assert_elements_match("embedding_grad", [g, ids], {"num_embeddings": 4})


def test_the_network_sorts_any_distinct_keys_and_wants_a_power_of_two():
    rng = np.random.default_rng(10)
    keys = [int(k) for k in rng.choice(1 << 40, 16, replace=False)]
    t = Tracer("sort", [], (), (), 0)
    assert [v.bits for v in bitonic_sort(t, [t.const(k) for k in keys])] == sorted(keys)
    with pytest.raises(LocalProtocolError):
        bitonic_sort(t, [t.const(k) for k in keys[:6]])


def test_one_program_per_shape_whatever_the_ids():
    rng = np.random.default_rng(11)
    g = values(rng, 24).reshape(8, 3)
    roots = {trace_element("embedding_grad", {"num_embeddings": 5}, [g, rng.integers(0, 5, 8)], e).spec.root
             for e in (0, 7, 14)}
    assert len(roots) == 1
    with pytest.raises(LocalProtocolError):
        trace_element("embedding_grad", {"num_embeddings": 5}, [g, np.zeros(7, np.int64)], 0)
