"""Step time and peak memory: reproducible training vs torch eager float32, same model, same CPU.

For each job (the shipped scripts/jobs/tiny-gpt.toml and mlp.toml, and gpt-10m: tiny-gpt's
data and optimizer with a ~10M-parameter model, d_model 384, 6 layers, 6 heads, d_ff 1536,
context 128) two child processes run the same model from the same initial weights on the same batches: one
with the step graph (`repops_cupy`), one with torch eager float32 and torch's own
optimizer. Each reports the median step time after warm-up steps and its peak
resident memory; the parent prints one table. Run from the repository root:

    python scripts/bench_train.py [--steps N] [--warmup W] [--threads T] [--jobs tiny-gpt,gpt-10m,mlp] [--workers 2]

Rows "gavel N workers" run the same step graph cut over N worker processes (gloo on
127.0.0.1, `repops_cupy.parallel`), each with T threads, and compare with the
one-device step of the same run.

Both sides get the same thread count (default 1: on a shared, oversubscribed machine
spinning thread pools make multi-threaded timings meaningless). Minimum and median
step times are printed; the ratio uses the medians. Beside them the median CPU time of
the step process and its ratio: with one thread that is the step's cost, less disturbed
by other processes on a shared machine than the wall clock (workers: wall clock only).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = {"tiny-gpt": ROOT / "scripts/jobs/tiny-gpt.toml", "mlp": ROOT / "scripts/jobs/mlp.toml"}
# job name -> (base job file, table overrides): a bigger model on the same data
DERIVED = {"gpt-10m": ("tiny-gpt", {"job": {"name": "gpt-10m"}, "data": {"context": 128},
                                    "model": {"d_model": 384, "n_layers": 6, "n_heads": 6, "d_ff": 1536}})}
TARGETS = {"tiny-gpt": 2.0, "gpt-10m": 1.5}  # issue 19: median step time / torch eager float32


def load_bench_job(job: str):
    """The JobSpec of a shipped job file, or of a DERIVED config built on one."""
    import tomllib

    from repops_cupy.jobspec import load_job, parse_job

    if job in JOBS:
        return load_job(JOBS[job])
    base, overrides = DERIVED[job]
    raw = tomllib.loads(JOBS[base].read_text())
    for table, values in overrides.items():
        raw[table] = {**raw[table], **values}
    return parse_job(raw, JOBS[base].parent)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _child(job: str, engine: str, steps: int, warmup: int) -> dict:
    import numpy as np

    from repops_cupy.train import TrainingProgram

    spec = load_bench_job(job)
    program = TrainingProgram(spec)
    batches = [program.batch(s) for s in range(warmup + steps)]
    times, cpu_times = [], []
    if engine == "repops":
        t0 = time.perf_counter()
        graph = program.graph
        trace_s = time.perf_counter() - t0
        state = program.initial_state()
        base_mb = _rss_mb()
        peak_bytes = 0
        from repops_cupy.graph import execute

        for s in range(warmup + steps):
            t, c = time.perf_counter(), time.process_time()
            run = execute(graph, {**state, **batches[s]})
            times.append(time.perf_counter() - t)
            cpu_times.append(time.process_time() - c)
            peak_bytes = max(peak_bytes, run.peak_bytes)
            state = {k: v for k, v in run.outputs.items() if k != "loss"}
        from repops_cupy.memory import peak_bytes as estimate

        extra = {"trace_s": trace_s, "nodes": len(graph), "graph_peak_mb": peak_bytes / 2**20,
                 "estimate_mb": estimate(graph) / 2**20}
    elif engine.startswith("workers"):
        from repops_cupy.parallel_train import worker_pool

        state = program.initial_state()
        base_mb = _rss_mb()
        with worker_pool(program, int(engine.removeprefix("workers")),
                         threads=int(os.environ["GAVEL_BENCH_THREADS"])) as pool:
            for _ in range(warmup + steps):
                t = time.perf_counter()
                state, _ = pool.run_step(state)
                times.append(time.perf_counter() - t)
                cpu_times.append(math.nan)  # the work is in the worker processes
        extra = {}
    else:
        import torch

        from repops_cupy.torch_bridge import load_into_module, to_torch

        torch.set_num_threads(int(os.environ["GAVEL_BENCH_THREADS"]))

        model = load_into_module(to_torch(program.net), program.initial_state())
        model.train()
        o = spec.optimizer
        if o.kind == "adamw":
            opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                                    weight_decay=o.weight_decay)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
        base_mb = _rss_mb()
        for s in range(warmup + steps):
            x, y = torch.from_numpy(batches[s]["batch/x"]), torch.from_numpy(batches[s]["batch/y"])
            t, c = time.perf_counter(), time.process_time()
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t)
            cpu_times.append(time.process_time() - c)
        extra = {"threads": torch.get_num_threads()}
    params = sum(v.size for k, v in program.initial_state().items() if k.startswith("params/"))
    return {"step_s": statistics.median(times[warmup:]), "min_s": min(times[warmup:]),
            "cpu_s": statistics.median(cpu_times[warmup:]), "base_mb": base_mb, "peak_mb": _rss_mb(), **extra,
            "steps": steps, "np": np.__version__, "params": int(params)}


def _run_child(job: str, engine: str, steps: int, warmup: int, threads: int) -> dict:
    t = str(threads)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GAVEL_BENCH_THREADS": t, "OMP_NUM_THREADS": t,
           "OPENBLAS_NUM_THREADS": t, "MKL_NUM_THREADS": t, "NUMBA_NUM_THREADS": t}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", job, engine, "--steps", str(steps), "--warmup", str(warmup)],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{job}/{engine} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per engine")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (JIT, caches)")
    parser.add_argument("--jobs", default="tiny-gpt,gpt-10m,mlp", help=f"of {sorted(JOBS) + sorted(DERIVED)}")
    parser.add_argument("--threads", type=int, default=1, help="threads for BLAS, numba and torch on both sides")
    parser.add_argument("--workers", default="2", help="worker counts to time besides one device, e.g. 2,3 ('' for none)")
    parser.add_argument("--child", nargs=2, metavar=("JOB", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.steps, args.warmup)))
        return 0
    print(f"CPU cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}; {args.threads} thread(s) each; "
          f"{args.steps} timed steps after {args.warmup} warm-up steps")
    print(f"{'job':<10} {'engine':<18} {'median ms':>10} {'min ms':>9} {'ratio':>7} {'CPU ms':>8} {'ratio':>6} "
          f"{'peak RSS MB':>12} {'after setup MB':>15}  notes")
    summary = []
    for job in args.jobs.split(","):
        ours = _run_child(job, "repops", args.steps, args.warmup, args.threads)
        ref = _run_child(job, "torch", args.steps, args.warmup, args.threads)
        ratio, cpu_ratio = ours["step_s"] / ref["step_s"], ours["cpu_s"] / ref["cpu_s"]
        summary.append(f"{job}: {ratio:.2f}x torch eager float32 (CPU time {cpu_ratio:.2f}x; "
                       f"{ours['params'] / 1e6:.2f}M parameters; "
                       f"peak RSS {ours['peak_mb']:.0f} MB vs {ref['peak_mb']:.0f} MB)"
                       + (f", target <= {TARGETS[job]}x: {'met' if ratio <= TARGETS[job] else 'NOT met'}"
                          if job in TARGETS else ""))
        print(f"{job:<10} {'torch eager f32':<18} {ref['step_s'] * 1e3:>10.2f} {ref['min_s'] * 1e3:>9.2f} {1.0:>7.2f} "
              f"{ref['cpu_s'] * 1e3:>8.1f} {1.0:>6.2f} {ref['peak_mb']:>12.0f} {ref['base_mb']:>15.0f}  {ref['threads']} torch thread(s)")
        print(f"{job:<10} {'gavel step graph':<18} {ours['step_s'] * 1e3:>10.2f} {ours['min_s'] * 1e3:>9.2f} {ratio:>7.2f} "
              f"{ours['cpu_s'] * 1e3:>8.1f} {cpu_ratio:>6.2f} {ours['peak_mb']:>12.0f} "
              f"{ours['base_mb']:>15.0f}  {ours['nodes']} nodes, graph values peak {ours['graph_peak_mb']:.1f} MB, "
              f"estimate {ours['estimate_mb']:.1f} MB, trace {ours['trace_s']:.1f} s")
        for n in [int(w) for w in args.workers.split(",") if w]:
            split = _run_child(job, f"workers{n}", args.steps, args.warmup, args.threads)
            print(f"{job:<10} {f'gavel {n} workers':<18} {split['step_s'] * 1e3:>10.2f} {split['min_s'] * 1e3:>9.2f} "
                  f"{split['step_s'] / ref['step_s']:>7.2f} {'':>8} {'':>6} {split['peak_mb']:>12.0f} {split['base_mb']:>15.0f}  "
                  f"{split['step_s'] / ours['step_s']:.2f} x the 1-worker step ({n} processes, same bits)")
    print("\n".join(["ratios (median step time, one run):", *summary]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
