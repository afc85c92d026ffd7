"""Speed of the compiled CPU kernels against the array code and plain float32 libraries.

    python scripts/bench_cpu_kernels.py [--threads N] [--repeat R] [--quick]

For each case, in one process and interleaved round by round: the reproducible op on
the array path (REPOPS_CPU_KERNELS=0), the same op on the compiled path, and the
plain float32 equivalent from NumPy (torch where NumPy has none: erf, GELU), which is neither
reproducible nor, for the transcendentals, correctly rounded. Times are medians;
with --threads 1 (the default) they are CPU times of one thread, which other
processes on a shared machine disturb less than wall time. Ratios are to the plain
float32 time. Every compiled result is checked against the array result first.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _median_times(fns, repeat: int, clock) -> list[float]:
    times = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = clock()
            fn()
            times[i].append(clock() - start)
    return [float(np.median(t)) for t in times]


def _with_kernels(flag: str, fn):
    def run():
        before = os.environ.get("REPOPS_CPU_KERNELS")
        os.environ["REPOPS_CPU_KERNELS"] = flag
        try:
            return fn()
        finally:
            if before is None:
                del os.environ["REPOPS_CPU_KERNELS"]
            else:
                os.environ["REPOPS_CPU_KERNELS"] = before

    return run


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    uint = f"u{a.dtype.itemsize}"
    return bool(np.array_equal(nan_a, nan_b)
                and np.array_equal(np.where(nan_a, 0, a).view(uint), np.where(nan_b, 0, b).view(uint)))


def _cases(quick: bool):
    import torch

    from repops_cupy import elementwise, nn, reduce, transcendental  # noqa: F401 - fills the registry
    from repops_cupy.registry import run

    rng = np.random.default_rng(0)
    sizes = (10**6,) if quick else (10**6, 10**7)
    plain = {
        "exp": np.exp,
        "log": np.log,
        "tanh": np.tanh,
        "erf": lambda v: torch.special.erf(torch.from_numpy(v)).numpy(),
        "sigmoid": lambda v: np.float32(1.0) / (np.float32(1.0) + np.exp(-v)),
    }
    plain_name = {"erf": "torch.special.erf, NumPy has none", "sigmoid": "NumPy 1/(1+exp(-x))"}
    for n in sizes:
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        for op, fn in plain.items():
            arg = np.abs(x) if op == "log" else x
            yield (f"{op} {n:.0e}", lambda op=op, arg=arg: run(op, (arg,)),
                   lambda fn=fn, arg=arg: fn(arg), plain_name.get(op, f"np.{op}"))
    big = rng.standard_normal(10**7).astype(np.float32)
    yield ("sum all 1e7", lambda: run("sum", (big,)), lambda: np.sum(big), "np.sum")
    grid = big.reshape(10**4, 10**3)
    yield ("sum rows (1e4, 1e3) axis 1", lambda: run("sum", (grid,), {"axis": (1,)}),
           lambda: np.sum(grid, axis=1), "np.sum")
    yield ("sum cols (1e4, 1e3) axis 0", lambda: run("sum", (grid,), {"axis": (0,)}),
           lambda: np.sum(grid, axis=0), "np.sum")
    act = (rng.standard_normal((8192, 768)) * 3).astype(np.float32)
    gamma = rng.standard_normal(768).astype(np.float32)
    beta = rng.standard_normal(768).astype(np.float32)

    def np_softmax():
        e = np.exp(act - act.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def np_layer_norm():
        mean = act.mean(axis=-1, keepdims=True)
        var = act.var(axis=-1, keepdims=True)
        return (act - mean) / np.sqrt(var + np.float32(1e-5)) * gamma + beta

    hidden = rng.standard_normal((2048, 3072)).astype(np.float32)
    grad = rng.standard_normal((2048, 3072)).astype(np.float32)
    th, tg = torch.from_numpy(hidden), torch.from_numpy(grad)
    for form in ("tanh", "none"):
        yield (f"gelu {form} (2048, 3072)", lambda form=form: run("gelu", (hidden,), {"approximate": form}),
               lambda form=form: torch.nn.functional.gelu(th, approximate=form).numpy(), "torch f32")
        yield (f"gelu_grad {form} (2048, 3072)",
               lambda form=form: run("gelu_grad", (grad, hidden), {"approximate": form}),
               lambda form=form: torch.ops.aten.gelu_backward(tg, th, approximate=form).numpy(), "torch f32")
    yield ("softmax (8192, 768)", lambda: run("softmax", (act,), {"axis": -1}), np_softmax, "NumPy f32")
    yield ("layer_norm (8192, 768)", lambda: run("layer_norm", (act, gamma, beta)), np_layer_norm, "NumPy f32")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="numba and torch threads (1: CPU time of one thread)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1e6 elements only")
    args = parser.parse_args(argv)

    import numba
    import torch

    numba.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.threads == 1 else time.perf_counter
    print(f"threads={args.threads}, median of {args.repeat}, {'CPU' if args.threads == 1 else 'wall'} time")
    print("| case | array path | compiled | plain float32 | array/plain | compiled/plain | array/compiled |")
    print("|---|---|---|---|---|---|---|")
    for label, reproducible, plain, plain_label in _cases(args.quick):
        array_run, kernel_run = _with_kernels("0", reproducible), _with_kernels("1", reproducible)
        if not _same_bits(array_run(), kernel_run()):
            raise SystemExit(f"{label}: the compiled path gave different bits")
        plain()
        t_array, t_kernel, t_plain = _median_times((array_run, kernel_run, plain), args.repeat, clock)
        print(f"| {label} | {t_array * 1e3:.1f} ms | {t_kernel * 1e3:.2f} ms | {t_plain * 1e3:.2f} ms ({plain_label}) "
              f"| {t_array / t_plain:.1f}x | {t_kernel / t_plain:.2f}x | {t_array / t_kernel:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
