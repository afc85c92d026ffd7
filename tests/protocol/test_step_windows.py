"""Element programs of unfold2d and unfold2d_grad (protocol/step_windows.py) against the registry
operators over geometries with padding, strides larger and smaller than the kernel and 1 x 1
windows; the program is a function of the geometry alone."""
from __future__ import annotations

import numpy as np
import pytest

from protocol.errors import LocalProtocolError
from protocol.step_programs import trace_element
from repops_cupy import ops
from tests.protocol.test_step_programs import values
from tests.protocol.test_step_rows import assert_elements_match

GEOMETRIES = [  # (H, W), kernel, stride, padding
    ((5, 6), (3, 2), (2, 1), (1, 2)), ((4, 4), (2, 2), (2, 2), (0, 0)), ((7, 5), (2, 3), (3, 2), (2, 1)),
    ((3, 3), (1, 1), (1, 1), (0, 0)), ((6, 7), (3, 3), (1, 1), (1, 1)), ((2, 9), (2, 4), (1, 4), (0, 3)),
]


@pytest.mark.parametrize("hw, kernel, stride, padding", GEOMETRIES)
def test_unfold2d_and_its_gradient_copy_the_specs_elements(hw, kernel, stride, padding):
    rng = np.random.default_rng(sum(hw) + sum(kernel))
    x = values(rng, 2 * 3 * hw[0] * hw[1]).reshape(2, 3, *hw)
    attrs = {"kernel": kernel, "stride": stride, "padding": padding}
    out = np.asarray(ops.run("unfold2d", [x], attrs))
    every = max(1, out.size // 300)  # a sample of the larger outputs, every window entry among them
    assert_elements_match("unfold2d", [x], attrs, elements=range(0, out.size, every))
    g = values(rng, out.size).reshape(out.shape)
    grad_attrs = {**attrs, "input_hw": hw}
    assert_elements_match("unfold2d_grad", [g], grad_attrs, elements=range(0, x.size * out.shape[-1], every))


def test_the_program_depends_on_the_geometry_only():
    rng = np.random.default_rng(9)
    attrs = {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 2), "input_hw": (5, 6)}
    g_shape = (2, 3, 3, 9, 6)
    a, b = (values(rng, int(np.prod(g_shape))).reshape(g_shape) for _ in range(2))
    roots = {trace_element("unfold2d_grad", attrs, [g], e).spec.root for g in (a, b) for e in (0, 17, 179)}
    assert len(roots) == 1
    other = trace_element("unfold2d_grad", {**attrs, "stride": (1, 1)}, [np.zeros((2, 3, 5, 9, 6), np.float32)], 0)
    assert other.spec.root not in roots


def test_shapes_that_do_not_fit_the_geometry_are_refused():
    with pytest.raises(LocalProtocolError):
        trace_element("unfold2d_grad", {"kernel": (2, 2), "input_hw": (4, 4)}, [np.zeros((1, 1, 2, 3, 4), np.float32)], 0)
    with pytest.raises(LocalProtocolError):
        trace_element("unfold2d", {"kernel": (5, 1)}, [np.zeros((1, 1, 3, 3), np.float32)], 0)
    with pytest.raises(LocalProtocolError):
        trace_element("unfold2d", {"kernel": (1, 1)}, [np.zeros((3, 3), np.float32)], 0)
