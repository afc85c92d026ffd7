"""Selfcheck: every operator gives the same bits under every machine configuration.

The parent process starts one child per configuration -- BLAS thread count, BLAS
kernel family, NumPy's SIMD level, memory order of the inputs, float64 GEMM engine
-- and each child hashes every operator's output on the fixed example inputs of
`op_examples`. One line per operator says its hash and whether all agreed; with a
CUDA GPU a CuPy column is added. Exit status 0 only if every operator agreed
everywhere and every registered operator has example inputs. While the children run,
a line on stderr says when each configuration starts and ends ("config 3/9: ...");
a configuration whose child fails is reported there and counts as disagreeing.

    python -m repops_cupy.selfcheck            (or: gavel selfcheck)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

# NumPy accepts these names here; together they take away AVX-512 and AVX2 dispatch.
NO_AVX = "AVX512_ICL AVX512_SPR X86_V4 X86_V3"
GEMM_ENGINE_ENV = "REPOPS_GEMM_ENGINE"


@dataclass(frozen=True)
class Config:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    order: str = "C"  # memory order the child gives the inputs
    needs: str = ""  # a package the configuration cannot run without (left out, and said so, where absent)
    cpu: str = ""  # a CPU feature it cannot run without (NumPy's name; left out, and said so, where absent)


def cpu_has(feature: str) -> bool:
    """Whether this CPU has ``feature`` as NumPy names it ("AVX512F"): OpenBLAS forced to a core type
    the CPU lacks dies of SIGILL."""
    from numpy._core._multiarray_umath import __cpu_features__

    return bool(__cpu_features__.get(feature))



def _lacking(c: Config) -> str | None:
    """What this machine lacks to run configuration ``c`` (None: nothing)."""
    if c.needs and importlib.util.find_spec(c.needs) is None:
        return f"{c.needs}, which is not installed"
    if c.cpu and not cpu_has(c.cpu):
        return f"{c.cpu}, which this CPU lacks"
    return None


CONFIGS = (
    Config("base", {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}),
    Config("threads=2", {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}),
    Config("Haswell", {"OPENBLAS_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "Haswell"}),
    Config("SkylakeX", {"OPENBLAS_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "SkylakeX"}, cpu="AVX512F"),
    Config("no-AVX2/512", {"OPENBLAS_NUM_THREADS": "1", "NPY_DISABLE_CPU_FEATURES": NO_AVX}),
    Config("Fortran", {"OPENBLAS_NUM_THREADS": "1"}, order="F"),
    Config("numpy-f64-gemm", {"OPENBLAS_NUM_THREADS": "2", GEMM_ENGINE_ENV: "float64"}),
    Config("torch-f64-gemm", {"OMP_NUM_THREADS": "2", GEMM_ENGINE_ENV: "torch"}, needs="torch"),
    # the array code is the specification; the compiled CPU kernels must match it
    Config("array-code", {"OPENBLAS_NUM_THREADS": "1", "REPOPS_CPU_KERNELS": "0"}),
)


def _cases():
    """(label, op, inputs, attrs) for every registered op, plus larger stress shapes."""
    from . import ops  # noqa: F401 - fills the registry
    from .op_examples import EXAMPLES, ExampleRandom, example
    from .registry import names

    for name in names():
        if name not in EXAMPLES:
            continue  # reported by main() as missing, never silently passed
        inputs, attrs = example(name)
        yield name, name, inputs, attrs
    r = ExampleRandom(12345)
    # shapes that reach several K chunks and long reduction trees
    yield "matmul[64x3000x48]", "matmul", (r.normal(64, 3000), r.normal(3000, 48)), {}
    yield "matmul[batched,T]", "matmul", (r.normal(3, 40, 70), r.normal(3, 50, 70)), {"transpose_b": True}
    yield "sum[200003]", "sum", (r.normal(200003),), {"axis": ()}
    yield "softmax[8x4099]", "softmax", (r.normal(8, 4099, scale=6.0),), {"axis": -1}


def _relayout(x: np.ndarray, order: str) -> np.ndarray:
    # copy(order=...) keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)
    return x.copy(order=order)


def run_cases(order: str = "C", device: str = "cpu") -> dict[str, str]:
    """Hash of every case's output, computed in this process."""
    from .hashing import hash_tensor
    from .registry import run

    xp = np
    if device == "gpu":
        from ._backend import cupy_module

        xp = cupy_module()
    hashes = {}
    for label, op, inputs, attrs in _cases():
        arrays = tuple(_relayout(x, order) for x in inputs)
        if xp is not np:
            arrays = tuple(xp.asarray(x) for x in arrays)
        try:
            out = run(op, arrays, attrs)
            hashes[label] = hash_tensor(out).hex()
        except Exception as exc:  # reported as a disagreement, never hidden
            hashes[label] = f"error: {type(exc).__name__}: {exc}"
    return hashes


def _child_main(args: argparse.Namespace) -> int:
    json.dump(run_cases(args.order), sys.stdout)
    return 0


def _run_child(config: Config) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", GEMM_ENGINE_ENV)}
    env.update(config.env)
    proc = subprocess.run(
        [sys.executable, "-m", "repops_cupy.selfcheck", "--child", "--order", config.order],
        env=env, capture_output=True, text=True, timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"configuration {config.name} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


_say_lock = threading.Lock()


def _say(line: str) -> None:
    """A progress line on stderr (children run in threads: one whole line at a time)."""
    with _say_lock:
        print(f"selfcheck: {line}", file=sys.stderr, flush=True)


def _run_configs(configs: tuple[Config, ...], jobs: int) -> dict[str, dict[str, str]]:
    """Every configuration's hashes, `jobs` children at a time, saying as each starts and ends."""
    total, finished = len(configs), []

    def run(numbered: tuple[int, Config]) -> dict[str, str]:
        i, config = numbered
        _say(f"config {i}/{total}: {config.name} started")
        started = time.perf_counter()
        try:
            hashes = _run_child(config)
        except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as exc:
            finished.append(config.name)
            last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            _say(f"config {i}/{total}: {config.name} FAILED ({last[0]}); {len(finished)}/{total} done")
            return {}  # every operator then reads as differing in this configuration
        finished.append(config.name)
        _say(f"config {i}/{total}: {config.name} done in {time.perf_counter() - started:.1f} s, "
             f"{len(hashes)} cases; {len(finished)}/{total} done")
        return hashes

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(zip([c.name for c in configs], pool.map(run, enumerate(configs, 1))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gavel selfcheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--jobs", type=int, default=2, help="child processes at once")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--order", default="C", choices=("C", "F"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args)

    from . import ops  # noqa: F401
    from ._backend import gpu_available
    from .op_examples import missing_examples
    from .registry import names

    missing = missing_examples(names())
    lacking = {c.name: _lacking(c) for c in CONFIGS}
    configs = tuple(c for c in CONFIGS if lacking[c.name] is None)
    for name, what in lacking.items():
        if what is not None:
            _say(f"{name} left out: it needs {what}")
    _say(f"{len(configs)} configurations, {max(1, args.jobs)} at a time, each in its own process")
    results = _run_configs(configs, args.jobs)
    if gpu_available():
        _say("cupy: the GPU, in this process")
        results["cupy"] = run_cases(device="gpu")

    columns = list(results)
    labels = list(dict.fromkeys(label for col in columns for label in results[col]))  # a failed child has none
    report = {}
    all_agree = not missing and all(results.values())
    for label in labels:
        values = {col: results[col].get(label, "missing") for col in columns}
        agree = len(set(values.values())) == 1 and not values[columns[0]].startswith("error")
        all_agree &= agree
        report[label] = {"hash": values[columns[0]], "agree": agree,
                         "differs": [c for c in columns if values[c] != values[columns[0]]]}
    if args.json:
        print(json.dumps({"configs": columns, "ops": report, "missing_examples": missing, "ok": all_agree}))
        return 0 if all_agree else 1

    print(f"configurations: {', '.join(columns)}")
    width = max((len(l) for l in labels), default=12)
    for label, row in report.items():
        mark = "agree" if row["agree"] else "DIFFER: " + ", ".join(row["differs"])
        print(f"{label:<{width}}  {row['hash'][:16]:<16}  {mark}")
        if row["hash"].startswith("error"):
            print(f"{'':<{width}}  {row['hash']}")
    for name in missing:
        print(f"{name:<{width}}  no example inputs (add one to repops_cupy/op_examples.py)")
    for col in columns:
        if not results[col]:
            print(f"configuration {col}: its child process failed (said on stderr above)")
    print("selfcheck: " + ("all operators agree in every configuration" if all_agree else "FAILED"))
    return 0 if all_agree else 1


if __name__ == "__main__":
    sys.exit(main())
