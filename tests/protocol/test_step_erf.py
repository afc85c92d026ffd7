"""Element programs of erf, erf_grad and GELU's erf form (protocol/step_erf.py) against the registry
operators, and the float64 erf and erfc programs against transcendental.erf_f64 / erfc_f64 on both
sides of every interval boundary of fdlibm's s_erf.c (float32 inputs cannot reach some of them)."""
from __future__ import annotations

import numpy as np
import pytest

from protocol.errors import LocalProtocolError
from protocol.step_erf import erf_f64, erfc_f64
from protocol.step_programs import trace_element
from protocol.step_trace import Tracer, View
from repops_cupy import constants as C
from repops_cupy.transcendental import erf_f64 as spec_erf, erfc_f64 as spec_erfc
from tests.protocol.test_step_programs import values
from tests.protocol.test_step_rows import assert_elements_match

BOUNDARIES = (0.0, C.ERFC_TINY, C.ERF_SUBNORMAL, C.ERF_TINY, C.ERFC_QUARTER, C.ERF_SMALL, 1.0, C.ERF_MID,
              C.ERFC_SPLIT, C.ERF_SPLIT, C.ERF_BIG, C.ERFC_BIG, 5e-324, 1.7e308, np.inf)


def float64_edges() -> np.ndarray:
    """Each boundary, its neighbours and their negatives, NaN, and values spread over every interval."""
    b = np.array(BOUNDARIES, dtype=np.float64)
    near = np.concatenate([b, np.nextafter(b, 0.0), np.nextafter(b, np.inf)])
    spread = np.random.default_rng(5).uniform(0.0, 30.0, 40)
    both = np.concatenate([near, spread, 10.0 ** np.arange(-320.0, 0.0, 20.0)])
    return np.concatenate([both, -both, [np.nan]])


def float32_inputs(rng: np.random.Generator) -> np.ndarray:
    exact = [b for b in BOUNDARIES if b == np.inf or (b < 3e38 and np.float32(b) == b)]
    edges = np.array(exact + [26.5, 40.0, 3.4e38], dtype=np.float32)
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf))])
    wide = (rng.standard_normal(60) * 4).astype(np.float32)
    return np.concatenate([edges, -edges, values(rng, 40), wide])


@pytest.mark.parametrize("name, program, spec", [("erf", erf_f64, spec_erf), ("erfc", erfc_f64, spec_erfc)])
def test_the_float64_programs_give_the_specs_bits(name, program, spec):
    x = float64_edges()
    want = spec(x).view(np.uint64)
    for e in range(x.size):
        t = Tracer(name, [x], x.shape, (View(0, (1,)),), e)
        got = program(t, t.input(0)).bits
        assert got == int(want[e]), (name, float(x[e]), hex(got), hex(int(want[e])))


def test_erf_and_erf_grad_end_in_the_operators_bits():
    rng = np.random.default_rng(6)
    x = float32_inputs(rng)
    assert_elements_match("erf", [x], {})
    assert_elements_match("erf_grad", [values(rng, x.size), x], {}, elements=range(0, x.size, 3))


def test_gelu_and_gelu_grad_in_the_erf_form_end_in_the_operators_bits():
    rng = np.random.default_rng(7)
    x = float32_inputs(rng)
    assert_elements_match("gelu", [x], {"approximate": "none"}, elements=range(0, x.size, 2))
    assert_elements_match("gelu_grad", [values(rng, x.size), x], {"approximate": "none"},
                          elements=range(1, x.size, 2))


def test_the_attribute_picks_the_form_and_an_unknown_form_is_refused():
    x = values(np.random.default_rng(8), 6)
    erf_form, tanh_form = (trace_element("gelu", {"approximate": a}, [x], 2).spec for a in ("none", "tanh"))
    assert erf_form.root != tanh_form.root
    assert trace_element("gelu", {}, [x], 2).spec.root == erf_form.root  # the registry's default is "none"
    with pytest.raises(LocalProtocolError):
        trace_element("gelu_grad", {"approximate": "sigmoid"}, [x, x], 0)
