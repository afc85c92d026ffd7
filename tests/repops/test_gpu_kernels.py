"""The fused GPU kernels (issue 15), bit for bit against the NumPy path.

Here (no GPU) the kernels' one source is compiled as plain C by gcc, without
contraction or fast math, and run on one "thread" through ctypes: the kernel code is
checked, only NVRTC and the launches are not. On a GPU the same comparisons run on
CuPy (marked gpu; scripts/gpu_check.sh).
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from repops_cupy import gpu_kernels, nn, optim
from repops_cupy.reduce import tree_sum_f64

from .bits import assert_same_bits

F32, I64, F64, I32 = ctypes.c_float, ctypes.c_longlong, ctypes.c_double, ctypes.c_int


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the kernel source is checked on a GPU only")
    folder = tmp_path_factory.mktemp("gpu_kernels")
    (folder / "k.c").write_text(gpu_kernels.SOURCE)
    subprocess.run(["gcc", "-std=c99", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math",
                    "-o", str(folder / "k.so"), str(folder / "k.c"), "-lm"], check=True)
    return ctypes.CDLL(str(folder / "k.so"))


def ptr(a: np.ndarray):
    assert a.flags.c_contiguous
    return a.ctypes.data_as(ctypes.c_void_p)


def rows_with_edges(rng, rows: int, n: int, scale: float) -> np.ndarray:
    x = (rng.standard_normal((rows, n)) * scale).astype(np.float32)
    x[0, :] = np.float32(0.0)
    x[1, ::2] = np.float32(-0.0)
    x[2, 3] = np.float32(np.inf)
    x[3, 1] = np.float32(np.nan)
    x[4, :] = np.float32(-np.inf)
    x[5, 7] = np.float32(3e38)
    x[6, :] = np.float32(1e-45) * np.arange(n, dtype=np.float32)
    return x


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 6, 7, 8, 9, 31, 64, 65, 1000, 4099, 70001])
def test_streamed_tree_is_the_fixed_tree(lib, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((7, n)) * 10.0 ** rng.integers(-12, 12, (7, n))  # heavy cancellation: order shows
    if n:
        x[0, 0] = -0.0
    out = np.empty(7)
    lib.tree_sum_rows(ptr(x), ptr(out), I64(7), I64(n))
    assert_same_bits(out, tree_sum_f64(x, -1))
    if n > 8:  # a sum in another order differs on this data
        assert not np.array_equal(out, np.cumsum(x, axis=1)[:, -1])


def c_softmax(lib, x):
    out = np.empty_like(x)
    lib.softmax_rows(ptr(x), ptr(out), I64(x.shape[0]), I64(x.shape[1]))
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 64, 65, 100, 1000, 4099])
def test_softmax_kernel_gives_the_numpy_bits(lib, monkeypatch, n):
    monkeypatch.setenv("REPOPS_CPU_KERNELS", "0")  # the array code: the specification
    x = rows_with_edges(np.random.default_rng(n), 9, max(n, 8), 6.0)[:, :n].copy()
    assert_same_bits(c_softmax(lib, x), nn.softmax(x, axis=-1))


@pytest.mark.parametrize("n", [1, 3, 64, 127, 768])
def test_layer_norm_kernel_gives_the_numpy_bits(lib, monkeypatch, n):
    monkeypatch.setenv("REPOPS_CPU_KERNELS", "0")
    rng = np.random.default_rng(n)
    x = rows_with_edges(rng, 9, max(n, 8), 3.0)[:, :n].copy()
    gamma, beta = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    for eps in (1e-5, 0.0):
        out = np.empty_like(x)
        lib.layer_norm_rows(ptr(x), ptr(gamma), ptr(beta), F64(eps), ptr(out), I64(x.shape[0]), I64(n))
        assert_same_bits(out, nn.layer_norm(x, gamma, beta, eps=eps))


def optimizer_inputs(rng, n=1000):
    arrays = [(rng.standard_normal(n) * 10.0 ** rng.integers(-8, 3, n)).astype(np.float32) for _ in range(3)]
    for a in arrays:
        a[:4] = np.float32([0.0, -0.0, 1e-45, 3e38])
    v = np.abs(arrays[2])
    v[5] = np.float32(0.0)
    return arrays[0], arrays[1], v


def test_optimizer_kernels_give_the_numpy_bits(lib):
    rng = np.random.default_rng(3)
    param, m, v = optimizer_inputs(rng)
    n = I64(param.size)
    for step in (1, 2, 1000):
        b1p, b2p = np.float32(0.9) ** np.float32(step), np.float32(0.99) ** np.float32(step)
        b1p, b2p = np.asarray(b1p, np.float32), np.asarray(b2p, np.float32)
        for lr, eps, wd in ((3e-3, 1e-8, 0.01), (1.0, 0.0, 0.0)):
            out = np.empty_like(param)
            lib.adamw_update(ptr(param), ptr(m), ptr(v), ptr(b1p), ptr(b2p), F32(lr), F32(eps),
                             F32(optim._f32(1.0 - lr * wd)), ptr(out), n)
            assert_same_bits(out, optim.adamw_update(param, m, v, b1p, b2p, lr=lr, eps=eps, weight_decay=wd))
    for beta in (0.9, 0.999):
        for square, op in ((0, optim.adam_moment1), (1, optim.adam_moment2)):
            out = np.empty_like(param)
            lib.adam_moment(ptr(m), ptr(param), F32(beta), F32(optim._f32(1.0 - beta)), I32(square), ptr(out), n)
            assert_same_bits(out, op(m, param, beta=beta))
    for momentum, wd in ((0.9, 0.0), (0.9, 5e-4)):
        out = np.empty_like(param)
        lib.sgd_momentum(ptr(m), ptr(param), ptr(v), F32(momentum), F32(wd), I32(wd != 0.0), ptr(out), n)
        assert_same_bits(out, optim.sgd_momentum(m, param, v, momentum=momentum, weight_decay=wd))
    out = np.empty_like(param)
    lib.sgd_update(ptr(param), ptr(m), F32(0.1), ptr(out), n)
    assert_same_bits(out, optim.sgd_update(param, m, lr=0.1))


def test_source_names_every_kernel_and_no_device_math_but_its_own():
    for name in gpu_kernels.KERNELS:
        assert f" {name}(" in gpu_kernels.SOURCE
    for forbidden in ("expf(", " exp(", "tanhf(", "__expf", "__fmul", "fma("):
        assert forbidden not in gpu_kernels.SOURCE, forbidden
    assert "--fmad=false" in gpu_kernels.OPTIONS
    assert not gpu_kernels.enabled(np)


# --- on a GPU (scripts/gpu_check.sh) ---------------------------------------------------------


@pytest.mark.gpu
def test_fused_kernels_on_cupy_give_the_numpy_bits():
    import cupy

    assert gpu_kernels.enabled(cupy)
    rng = np.random.default_rng(11)
    for n in (1, 7, 64, 1000, 4099):
        x = rows_with_edges(rng, 9, max(n, 8), 6.0)[:, :n].copy()
        assert_same_bits(cupy.asnumpy(nn.softmax(cupy.asarray(x), axis=-1)), nn.softmax(x, axis=-1))
        gamma, beta = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        got = nn.layer_norm(cupy.asarray(x), cupy.asarray(gamma), cupy.asarray(beta), eps=1e-5)
        assert_same_bits(cupy.asnumpy(got), nn.layer_norm(x, gamma, beta, eps=1e-5))
    param, m, v = optimizer_inputs(rng)
    b1p, b2p = np.asarray(0.9 ** 3, np.float32), np.asarray(0.99 ** 3, np.float32)
    on = [cupy.asarray(a) for a in (param, m, v, b1p, b2p)]
    assert_same_bits(cupy.asnumpy(optim.adamw_update(*on, lr=3e-3, eps=1e-8, weight_decay=0.01)),
                     optim.adamw_update(param, m, v, b1p, b2p, lr=3e-3, eps=1e-8, weight_decay=0.01))
    assert_same_bits(cupy.asnumpy(optim.adam_moment1(on[1], on[0], beta=0.9)), optim.adam_moment1(m, param, beta=0.9))
    assert_same_bits(cupy.asnumpy(optim.adam_moment2(on[2], on[0], beta=0.99)), optim.adam_moment2(v, param, beta=0.99))
    assert_same_bits(cupy.asnumpy(optim.sgd_momentum(on[1], on[0], on[2], momentum=0.9, weight_decay=5e-4)),
                     optim.sgd_momentum(m, param, v, momentum=0.9, weight_decay=5e-4))
    assert_same_bits(cupy.asnumpy(optim.sgd_update(on[0], on[1], lr=0.1)), optim.sgd_update(param, m, lr=0.1))
