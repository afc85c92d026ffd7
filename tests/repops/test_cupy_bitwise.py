"""CuPy path against the NumPy path, bit for bit, for every operator (needs a GPU)."""
import pytest

from repops_cupy import ops  # noqa: F401
from repops_cupy.selfcheck import run_cases

pytestmark = pytest.mark.gpu


def test_every_operator_gives_identical_bits_on_cupy_and_numpy():
    cpu = run_cases(device="cpu")
    gpu = run_cases(device="gpu")
    differing = sorted(k for k in cpu if cpu[k] != gpu.get(k))
    assert not differing, differing


def test_fortran_order_on_cupy_gives_the_same_bits():
    assert run_cases(order="F", device="gpu") == run_cases(device="cpu")
