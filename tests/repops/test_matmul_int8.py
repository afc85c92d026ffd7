"""The int8 engine's device seam (issue 15): the CUDA engine's code, run here on NumPy.

On a GPU the int8 engine hands CuPy digit arrays to torch._int_mm through DLPack and
pads every call to CUDA's shape rules. Only those two hand-offs need the GPU: here the
same code runs with NumPy arrays, torch.from_numpy and the CPU _int_mm, wrapped in a
check of CUDA's rules, and must give the float64 engine's bits.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

from repops_cupy import _matmul_engines as engines
from repops_cupy import matmul as mm
from repops_cupy.errors import OpError
from repops_cupy.matmul import matmul

from .bits import assert_same_bits

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not engines.int8_available(), reason="torch._int_mm is not exact on this CPU")

SHAPES = [
    ((5, 7), (7, 3)),  # every size under CUDA's minimum
    ((33, 70), (70, 62)),  # narrow output, K not a multiple of 8
    ((8, 40), (40, 300)),  # few rows
    ((6, 40, 24), (6, 24, 40)),  # attention heads
    ((2, 1, 20, 30), (4, 30, 11)),  # broadcast batch
    ((3, 16384 + 37), (16384 + 37, 9)),  # two K chunks
]


def cuda_rules_int_mm(log: list):
    """The CPU _int_mm, refusing what CUDA's _int_mm refuses (M > 16, K and N multiples of 8)."""

    def int_mm(a, b, out):
        m, k = a.shape
        assert m > 16 and k % 8 == 0 and b.shape[1] % 8 == 0, (tuple(a.shape), tuple(b.shape))
        assert out.is_contiguous() and tuple(out.shape) == (m, b.shape[1])
        log.append((m, k, b.shape[1]))
        torch._int_mm(a, b, out=out)

    return int_mm


def as_on_cuda(log: list) -> engines.Int8Calls:
    return engines.Int8Calls(np, torch.from_numpy, cuda_rules_int_mm(log), engines.CUDA_PAD, batch_all_pairs=True)


def operands(a_shape, b_shape):
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    a *= np.float32(2.0) ** rng.integers(-20, 20, a_shape[:-1] + (1,)).astype(np.float32)
    a.reshape(-1)[::97] = np.float32(0.0)
    return a, rng.standard_normal(b_shape).astype(np.float32)


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
def test_the_cuda_engine_code_gives_the_float64_bits_under_cudas_shape_rules(monkeypatch, a_shape, b_shape):
    a, b = operands(a_shape, b_shape)
    want = matmul(a, b, engine="float64", kernels="array")
    log = []
    monkeypatch.setattr(mm, "calls_for", lambda xp: as_on_cuda(log))
    assert_same_bits(matmul(a, b, engine="int8", kernels="array"), want)
    assert log and all(m % 16 == 0 and k % 16 == 0 and n % 16 == 0 for m, k, n in log)


def test_a_batch_takes_one_call_per_product_on_cuda_and_one_per_diagonal_on_cpu(monkeypatch):
    a, b = operands((6, 40, 24), (6, 24, 40))
    want = matmul(a, b, engine="float64", kernels="array")
    log = []
    monkeypatch.setattr(mm, "calls_for", lambda xp: as_on_cuda(log))
    assert_same_bits(matmul(a, b, engine="int8", kernels="array"), want)
    assert log == [(5 * 48, 32, 5 * 48)] * 6  # padded M 40 -> 48, K 24 -> 32, N 40 -> 48
    cpu_log = []
    cpu = engines.Int8Calls(np, torch.from_numpy, lambda x, y, out: (cpu_log.append(1), torch._int_mm(x, y, out=out)))
    monkeypatch.setattr(mm, "calls_for", lambda xp: cpu)
    assert_same_bits(matmul(a, b, engine="int8", kernels="array"), want)
    assert len(cpu_log) == 6 * len(engines._BLOCKS)


def test_padded_sizes():
    cuda = as_on_cuda([])
    assert engines.padded_sizes(cuda, 1, 1, 1) == (32, 16, 16)
    assert engines.padded_sizes(cuda, 17, 24, 62) == (32, 32, 64)
    assert engines.padded_sizes(cuda, 64, 64, 64) == (64, 64, 64)
    cpu = engines.cpu_calls()
    assert engines.padded_sizes(cpu, 512, 64, 62) == (512, 64, 64)  # a narrow output padded to 16
    assert engines.padded_sizes(cpu, 512, 64, 130) == (512, 64, 130)
    assert engines.padded_sizes(cpu, 5, 7, 3) == (5, 7, 16)


def test_narrow_outputs_padded_on_cpu_give_the_same_bits():
    a, b = operands((40, 256), (256, 62))
    assert_same_bits(matmul(a, b, engine="int8"), matmul(a, b, engine="float64", kernels="array"))


def test_the_engine_is_chosen_by_the_array_module(monkeypatch):
    fake_cupy = types.ModuleType("cupy")
    monkeypatch.setattr(mm, "cuda_int8_available", lambda xp: True)
    assert mm._select_engine("auto", fake_cupy) == "int8"
    assert mm._select_engine("int8", fake_cupy) == "int8"
    with pytest.raises(OpError, match="CPU arrays only"):
        mm._select_engine("torch", fake_cupy)
    monkeypatch.setattr(mm, "cuda_int8_available", lambda xp: False)
    assert mm._select_engine("auto", fake_cupy) == "float64"
    with pytest.raises(OpError, match="CUDA build of torch"):
        mm._select_engine("int8", fake_cupy)
    assert mm._select_engine("auto", np) == ("int8" if engines.int8_pays_on_cpu() else "float64")
    assert mm._select_engine("int8", np) == "int8"  # exact here (the module's mark): taken when asked for
    assert engines.calls_for(np) is engines.cpu_calls()


@pytest.mark.slow
def test_the_probe_refuses_an_int_mm_that_saturates():
    assert engines.probe_int8(engines.cpu_calls())

    def saturating(a, b, out):
        torch._int_mm(a, b, out=out)
        out.clamp_(-(1 << 15), (1 << 15) - 1)

    assert not engines.probe_int8(engines.Int8Calls(np, torch.from_numpy, saturating))
    assert engines.probe_int8(engines.Int8Calls(np, torch.from_numpy, cuda_rules_int_mm([])))  # its shapes meet CUDA's rules


# --- on a GPU (scripts/gpu_check.sh) ---------------------------------------------------------


def _cuda_torch():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here: the GPU runs the float64 engine")


@pytest.mark.gpu
def test_int8_on_cuda_gives_the_float64_engine_and_numpy_bits():
    import cupy

    _cuda_torch()
    assert engines.cuda_int8_available(cupy)
    for a_shape, b_shape in SHAPES + [((1024, 1024), (1024, 1024))]:
        a, b = operands(a_shape, b_shape)
        a_gpu, b_gpu = cupy.asarray(a), cupy.asarray(b)
        got = cupy.asnumpy(matmul(a_gpu, b_gpu))  # auto: int8 on CUDA
        assert_same_bits(got, cupy.asnumpy(matmul(a_gpu, b_gpu, engine="float64")))
        assert_same_bits(got, matmul(a, b))


@pytest.mark.gpu
def test_dlpack_hand_off_shares_memory_with_cupy():
    import cupy

    _cuda_torch()
    x = cupy.zeros((32, 16), np.int32)
    t = torch.from_dlpack(x)
    t[0, 0] = 7
    assert int(x[0, 0]) == 7 and t.device.type == "cuda"
