"""Cost of the reproducible operators against plain NumPy float32, measured side by side.

For each thread count the script runs itself in a child process with the BLAS, OpenMP
(torch) and numba thread counts set in the environment, so every library starts with
that many threads. Within a child, the reproducible call and its NumPy counterpart
alternate; each printed ratio is median(reproducible) / median(NumPy) over the repeats,
followed by min/min (best of the repeats: on a shared, loaded machine the least
disturbed pair; multi-threaded BLAS suffers most from other processes).

    python scripts/bench_repops.py [--threads 1 2] [--repeats 7] [--quick] [--matmul-only]
    python scripts/bench_repops.py --gpu [--repeats 7] [--json]

`--gpu` times the reproducible product on CuPy against cuBLAS float32 SGEMM (TF32 off:
CUPY_TF32 is cleared before CuPy loads) on the same arrays, in this process, each call
followed by a device synchronize; beside it, as the pieces an int8 engine is built from,
float64 DGEMM and (where torch sees the GPU) one int8 product, torch._int_mm, of the same
size, each as a ratio to SGEMM; each row says which engine the product took ("int8" on
CUDA torch, else "float64") and times the float64 engine beside it. A last row times the
fused softmax against CuPy's plain (non-reproducible) exp / sum. `--json` ends the output with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MATMUL_SHAPES = ((256, 256, 256), (1024, 1024, 1024), (64, 4096, 4096))
GPU_SHAPES = ((1024, 1024, 1024), (4096, 4096, 4096))
HEAD_SHAPES = ((16, 64, 32, 64), (16, 64, 64, 32))  # batch x heads of tiny-gpt's attention: many small products
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def _paired_times(ours, theirs, repeats: int) -> dict:
    """Median and minimum seconds of each callable, calls interleaved so load changes hit both."""
    import numpy as np

    ours()
    theirs()
    t_ours, t_theirs = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        theirs()
        t_theirs.append(time.perf_counter() - start)
        start = time.perf_counter()
        ours()
        t_ours.append(time.perf_counter() - start)
    return {"ours": float(np.median(t_ours)), "numpy": float(np.median(t_theirs)),
            "ours_min": min(t_ours), "numpy_min": min(t_theirs)}


def _row(case: str, times: dict, **extra) -> dict:
    return {"case": case, "numpy_ms": 1e3 * times["numpy"], "ratio": times["ours"] / times["numpy"],
            "ratio_min": times["ours_min"] / times["numpy_min"], **extra}


def _matmul_rows(repeats: int) -> list[dict]:
    import numpy as np

    from repops_cupy.matmul import matmul, prepare_b

    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in MATMUL_SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        prepared = prepare_b(b)
        plain = _paired_times(lambda: matmul(a, b), lambda: a @ b, repeats)  # exact: baseline timing only
        reuse = _paired_times(lambda: matmul(a, prepared), lambda: a @ b, repeats)  # exact: baseline timing only
        rows.append(_row(f"matmul {m}x{k}x{n}", plain, ratio_prepared_b=reuse["ours"] / reuse["numpy"]))
    for nb, m, k, n in HEAD_SHAPES:
        a = rng.standard_normal((nb, m, k)).astype(np.float32)
        b = rng.standard_normal((nb, k, n)).astype(np.float32)
        heads = _paired_times(lambda: matmul(a, b), lambda: a @ b, repeats)  # exact: baseline timing only
        rows.append(_row(f"matmul {nb} heads x {m}x{k}x{n}", heads))
    return rows


def _elementwise_rows(repeats: int, quick: bool) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(1)
    sizes = (1_000_000,) if quick else (1_000_000, 10_000_000)
    rows = []

    def numpy_softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)  # exact: baseline timing only

    def numpy_layer_norm(x, gamma, beta):
        mu = x.mean(axis=-1, keepdims=True)  # exact: baseline timing only
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # exact: baseline timing only
        return (x - mu) / np.sqrt(var + np.float32(1e-5)) * gamma + beta

    cases = []
    try:
        from repops_cupy.transcendental import exp
    except Exception as err:  # another engineer's module: report, do not fail
        rows.append({"case": "exp", "missing": f"not available yet ({type(err).__name__})"})
    else:
        cases.append(("exp", lambda x: exp(x), lambda x: np.exp(x)))  # exact: baseline timing only
    try:
        from repops_cupy.nn import layer_norm, softmax
    except Exception as err:
        rows.append({"case": "softmax / layer_norm", "missing": f"not available yet ({type(err).__name__})"})
    else:
        cases.append(("softmax (rows of 1024)", lambda x: softmax(x), numpy_softmax))
        gamma = rng.standard_normal(1024).astype(np.float32)
        beta = rng.standard_normal(1024).astype(np.float32)
        cases.append(("layer_norm (rows of 1024)", lambda x: layer_norm(x, gamma, beta),
                      lambda x: numpy_layer_norm(x, gamma, beta)))
    for size in sizes:
        x = rng.standard_normal((size // 1024, 1024)).astype(np.float32)
        for name, ours_fn, numpy_fn in cases:
            try:
                times = _paired_times(lambda: ours_fn(x), lambda: numpy_fn(x), max(3, repeats // 2))
            except Exception as err:  # another engineer's operator, possibly mid-change
                rows.append({"case": f"{name} {x.size:.0e}", "missing": f"failed: {type(err).__name__}: {err}"[:54]})
                continue
            rows.append(_row(f"{name} {x.size:.0e}", times))
    return rows


def _gpu_rows(repeats: int) -> dict:
    """The GPU table: reproducible product, DGEMM and one int8 product, each over SGEMM."""
    import numpy as np

    from repops_cupy._backend import cupy_module
    from repops_cupy.matmul import matmul, prepare_b

    cp = cupy_module()
    if cp is None:
        raise SystemExit("bench_repops --gpu: no CUDA GPU with CuPy on this machine")
    try:
        import torch
        cuda_torch = torch if torch.cuda.is_available() else None
    except ImportError:
        cuda_torch = None

    def synced(fn):
        def run():
            fn()
            cp.cuda.Device().synchronize()
            if cuda_torch is not None:
                cuda_torch.cuda.synchronize()
        return run

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in GPU_SHAPES:
        a = cp.asarray(rng.standard_normal((m, k)).astype(np.float32))
        b = cp.asarray(rng.standard_normal((k, n)).astype(np.float32))
        sgemm = synced(lambda: a @ b)  # exact: baseline timing only (cuBLAS SGEMM, TF32 off)
        prepared = prepare_b(b)
        plain = _paired_times(synced(lambda: matmul(a, b)), sgemm, repeats)
        reuse = _paired_times(synced(lambda: matmul(a, prepared)), sgemm, repeats)
        row = _row(f"gpu matmul {m}x{k}x{n}", plain, ratio_prepared_b=reuse["ours"] / reuse["numpy"],
                   baseline="cuBLAS SGEMM, TF32 off")
        row["sgemm_ms"] = row.pop("numpy_ms")
        from repops_cupy.matmul import int8_ready

        row["engine"] = "int8" if int8_ready(cp) else "float64"
        f64_engine = _paired_times(synced(lambda: matmul(a, b, engine="float64")), sgemm, repeats)
        row["float64_engine_ratio"] = f64_engine["ours"] / f64_engine["numpy"]
        a64, b64 = a.astype(cp.float64), b.astype(cp.float64)
        dgemm = _paired_times(synced(lambda: a64 @ b64), sgemm, repeats)  # exact: baseline timing only
        row["dgemm_ratio"] = dgemm["ours"] / dgemm["numpy"]
        if cuda_torch is not None:
            ta = cuda_torch.randint(-128, 128, (m, k), dtype=cuda_torch.int8, device="cuda")
            tb = cuda_torch.randint(-128, 128, (k, n), dtype=cuda_torch.int8, device="cuda")
            int8 = _paired_times(synced(lambda: cuda_torch._int_mm(ta, tb)), sgemm, repeats)
            row["int8_ratio"] = int8["ours"] / int8["numpy"]
        rows.append(row)
    x = cp.asarray(rng.standard_normal((16 * 2 * 64, 64)).astype(np.float32))  # tiny-gpt's attention rows
    from repops_cupy import gpu_kernels, nn

    fused = _paired_times(synced(lambda: nn.softmax(x)), synced(lambda: cp.exp(x) / cp.exp(x).sum(-1, keepdims=True)), repeats)
    rows.append({"case": "gpu softmax 2048x64", "fused": gpu_kernels.enabled(cp), "ratio": fused["ours"] / fused["numpy"],
                 "ratio_min": fused["ours_min"] / fused["numpy_min"], "sgemm_ms": 1e3 * fused["numpy"],
                 "ratio_prepared_b": float("nan"), "dgemm_ratio": float("nan")})
    return {"parsed": True, "device": name, "cupy": cp.__version__, "repeats": repeats, "rows": rows}


def _print_gpu(result: dict) -> None:
    print(f"{result['device']}, CuPy {result['cupy']}: time ratio over cuBLAS SGEMM, TF32 off "
          f"(median of {result['repeats']}; lower is better)")
    for r in result["rows"]:
        int8 = f", one int8 product {r['int8_ratio']:5.2f}x" if "int8_ratio" in r else ""
        print(f"{r['case']:28s} | reproducible {r['ratio']:5.2f}x, min/min {r['ratio_min']:5.2f}x, "
              f"reused B {r['ratio_prepared_b']:5.2f}x (SGEMM {r['sgemm_ms']:7.3f} ms) | "
              f"DGEMM {r['dgemm_ratio']:5.2f}x{int8}")


def _child(args) -> None:
    rows = _matmul_rows(args.repeats)
    if not args.matmul_only:
        rows += _elementwise_rows(args.repeats, args.quick)
    print(json.dumps(rows))


def _run_child(threads: int, args) -> list[dict]:
    env = dict(os.environ)
    env.update({name: str(threads) for name in THREAD_ENV})
    cmd = [sys.executable, __file__, "--child", "--repeats", str(args.repeats)]
    cmd += ["--quick"] * args.quick + ["--matmul-only"] * args.matmul_only
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child with {threads} thread(s) failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="elementwise on 1e6 elements only")
    parser.add_argument("--matmul-only", action="store_true", help="skip exp / softmax / layer_norm")
    parser.add_argument("--gpu", action="store_true", help="time the CuPy path against cuBLAS SGEMM instead")
    parser.add_argument("--json", action="store_true", help="with --gpu: end with one JSON line")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gpu:
        os.environ.pop("CUPY_TF32", None)  # before CuPy loads: float32 products stay float32
        result = _gpu_rows(args.repeats)
        _print_gpu(result)
        if args.json:
            print(json.dumps(result))
        return
    if args.child:
        _child(args)
        return
    results = {t: _run_child(t, args) for t in args.threads}
    print(f"time ratio reproducible / NumPy float32 (median of {args.repeats}; lower is better)")
    header = f"{'case':32s}" + "".join(
        f" | {t} thread{'s' if t > 1 else ''}: median, min/min (numpy median ms){'':9s}" for t in args.threads)
    print(header)
    for i, row in enumerate(results[args.threads[0]]):
        line = f"{row['case']:32s}"
        for t in args.threads:
            r = results[t][i]
            if "missing" in r:
                line += f" | {r['missing']:54s}"
                continue
            extra = f", reused B {r['ratio_prepared_b']:5.2f}x" if "ratio_prepared_b" in r else " " * 18
            line += f" | {r['ratio']:5.2f}x, {r['ratio_min']:5.2f}x ({r['numpy_ms']:7.2f} ms){extra}"
        print(line)


if __name__ == "__main__":
    main()
