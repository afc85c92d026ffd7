"""Bit-for-bit comparison helpers shared by the operator tests."""
import os

import numpy as np
import pytest


def f32(value: float) -> np.float32:
    with np.errstate(over="ignore"):
        return np.float32(value)


def assert_same_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan_a, nan_e = np.isnan(actual), np.isnan(expected)
    assert np.array_equal(nan_a, nan_e), "NaN positions differ"
    uint = f"u{actual.dtype.itemsize}"
    diff = np.where(nan_a, 0, actual).view(uint) != np.where(nan_e, 0, expected).view(uint)
    assert not diff.any(), f"{int(diff.sum())} element(s) differ, first at {np.argwhere(diff)[0]}"


@pytest.fixture(scope="module", autouse=True, params=["compiled", "array"])
def cpu_path(request):
    """Imported into a test module: every test there runs on the compiled CPU kernels and on
    the NumPy array code (the specification, and the CuPy path)."""
    before = os.environ.get("REPOPS_CPU_KERNELS")
    os.environ["REPOPS_CPU_KERNELS"] = "1" if request.param == "compiled" else "0"
    yield request.param
    if before is None:
        del os.environ["REPOPS_CPU_KERNELS"]
    else:
        os.environ["REPOPS_CPU_KERNELS"] = before
