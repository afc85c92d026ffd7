"""Element programs of log_softmax, var, max and their gradients (protocol/step_rows.py) against the
registry operators, on rows that hold the cases their specs single out: ties, zeros of both signs,
infinities, NaN, a zero denominator, reductions over several and unsorted axes."""
from __future__ import annotations

import numpy as np
import pytest

from protocol.errors import LocalProtocolError
from protocol.step_programs import trace_element
from repops_cupy import ops
from repops_cupy.hashing import canonical_array
from tests.protocol.test_step_programs import values

NAN, INF = np.float32(np.nan), np.float32(np.inf)


def assert_elements_match(op: str, inputs, attrs, elements=None) -> None:
    """Each sampled element's trace ends in the registry operator's bits, under one program."""
    out = canonical_array(np.asarray(ops.run(op, inputs, attrs))).reshape(-1)
    bits = out.view(np.uint32 if out.dtype.itemsize == 4 else np.uint64)
    program = None
    for e in range(bits.size) if elements is None else elements:
        trace = trace_element(op, attrs, inputs, e)
        program = program or trace.spec.program
        assert trace.spec.program == program, (op, e)
        assert trace.output == int(bits[e]), (op, attrs, e, hex(trace.output), hex(int(bits[e])))


def special_rows() -> np.ndarray:
    """(8, 4) float32 rows: ties, both zeros, all -0, infinities, a NaN, huge and subnormal values."""
    return np.array([[1.5, -2.0, 1.5, 0.25], [0.0, -0.0, -1.0, -0.0], [-0.0, -0.0, -0.0, -0.0],
                     [-np.inf, -np.inf, -np.inf, -np.inf], [np.inf, 1.0, np.inf, -3.0], [2.0, np.nan, 5.0, 1.0],
                     [3.4e38, -3.4e38, 3.4e38, 1e-45], [-1e-40, -2e-45, -1e-40, -7.0]], dtype=np.float32)


@pytest.mark.parametrize("axis", (-1, 0))
def test_log_softmax_and_its_gradient_along_either_axis(axis):
    rng = np.random.default_rng(1)
    x = np.concatenate([special_rows(), values(rng, 16, edges=False).reshape(4, 4)])
    assert_elements_match("log_softmax", [x], {"axis": axis})
    out = np.asarray(ops.run("log_softmax", [x], {"axis": axis}))
    g = values(rng, x.size).reshape(x.shape)
    assert_elements_match("log_softmax_grad", [g, out], {"axis": axis})
    assert_elements_match("log_softmax_grad", [values(rng, x.size, edges=False).reshape(x.shape), x], {"axis": axis})


@pytest.mark.parametrize("axis, keepdims", [((), False), ((2, 0), True), ((-1,), False), ((1,), True)])
def test_max_and_max_grad_over_any_axes(axis, keepdims):
    rng = np.random.default_rng(2)
    rows = special_rows().reshape(2, 4, 4)
    x = np.concatenate([rows, np.round(values(rng, 32, edges=False) * 2).reshape(2, 4, 4) / 2])  # ties
    attrs = {"axis": axis, "keepdims": keepdims}
    assert_elements_match("max", [x], attrs)
    out = np.asarray(ops.run("max", [x], attrs))
    g = values(rng, out.size).reshape(out.shape)
    assert_elements_match("max_grad", [g, x, out], attrs)
    # an out that matches nothing in most reductions: count 0 becomes 1, every share is +0
    assert_elements_match("max_grad", [g, x, np.flip(out).copy()], attrs)


def test_max_picks_plus_zero_over_minus_zero_in_either_order():
    x = np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -1.0], [-0.0, -0.0, -1.0], [-1.0, -2.0, -0.0]], dtype=np.float32)
    assert_elements_match("max", [x], {"axis": (1,), "keepdims": False})
    assert list(np.signbit(np.asarray(ops.run("max", [x], {"axis": (1,)})))) == [False, False, True, True]


@pytest.mark.parametrize("correction", (0, 1, 4, 6))
def test_var_and_var_grad_with_every_correction(correction):
    """correction 4 of 4 elements: 0/0 and x/0 as IEEE gives them; 6: the denominator is max(., 0)."""
    rng = np.random.default_rng(3)
    x = np.concatenate([special_rows(), values(rng, 16, edges=False).reshape(4, 4) * np.float32(1e3)])
    for axis in ((1,), (0, 1)):
        attrs = {"axis": axis, "keepdims": False, "correction": correction}
        assert_elements_match("var", [x], attrs)
        g = values(rng, int(np.prod(ops.run("var", [x], attrs).shape))).reshape(ops.run("var", [x], attrs).shape)
        assert_elements_match("var_grad", [g, x], attrs)


def test_the_reduction_order_is_the_specs_whatever_order_the_axes_are_named_in():
    """C order over the sorted axes: a huge pair cancels first, as in the spec, only in that order."""
    x = np.zeros((3, 2, 4), dtype=np.float32)
    x[0, 0, 0], x[0, 0, 1], x[1, 0, 0] = 1e20, 1.0, -1e20
    for axis in ((2, 0), (0, 2), (-1, 0)):
        assert_elements_match("var", [x], {"axis": axis, "keepdims": True, "correction": 0})


def test_one_program_serves_every_input_draw_and_bad_attributes_are_refused():
    rng = np.random.default_rng(4)
    a, b = (values(rng, 24).reshape(2, 3, 4) for _ in range(2))
    for op, attrs in (("var", {"axis": (0, 2)}), ("max", {"axis": (1,)}), ("log_softmax", {"axis": 1})):
        assert trace_element(op, attrs, [a], 1).spec.root == trace_element(op, attrs, [b], 1).spec.root
    with pytest.raises(LocalProtocolError):
        trace_element("max", {"axis": (3,)}, [a], 0)
    with pytest.raises(LocalProtocolError):
        trace_element("var", {"axis": (0,), "correction": -1}, [a], 0)
