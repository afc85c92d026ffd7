"""`gavel train` and `gavel replay`: run a training job, and recheck one checkpoint interval.

    gavel train JOB.toml --out DIR [--steps N] [--resume] [--device cpu|gpu]
    gavel replay JOB.toml --from DIR --checkpoint C [--device cpu|gpu]

`train` shows a progress bar (on stderr) and prints the trace root in hex as the last
line of its standard output. `replay` exits 0 only if checkpoint C+1 recomputed from
checkpoint C hashes to the state hash stored in the trace.
"""
from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from repops_cupy.checkpoint import CheckpointError
from repops_cupy.data import DataError
from repops_cupy.jobspec import JobSpecError, load_job
from repops_cupy.models import count_params
from repops_cupy.train import TRACE_FILE, TrainingError, TrainingProgram, replay, train

from . import roundlog_cli

EXIT_MISMATCH = 1
EXIT_USAGE = 2


def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel train", description="Train a job with reproducible operators.")
    p.add_argument("job", help="job file (TOML)")
    p.add_argument("--out", required=True, help="directory for checkpoints and trace.json")
    p.add_argument("--steps", type=int, help="number of steps (overrides job.steps)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    _add_roundlog_options(p)
    return p


def _add_roundlog_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("rounding-log jobs (model.kind = \"torch-roundlog\")")
    group.add_argument("--threads", type=int, help="torch threads")
    group.add_argument("--matmul-backend", choices=("torch", "numpy"), default="torch",
                       help="float64 matrix products by torch (MKL) or NumPy (OpenBLAS)")
    group.add_argument("--micro-batch", type=int, help="split each batch into micro-batches of this size")


def train_main(argv: list[str]) -> int:
    args = _train_parser().parse_args(argv)
    if roundlog_cli.is_roundlog_job(args.job):
        return roundlog_cli.train(args.job, args.out, steps=args.steps, resume=args.resume, threads=args.threads,
                                  backend=args.matmul_backend, micro_batch=args.micro_batch)
    err = Console(stderr=True)
    try:
        spec = load_job(args.job)
        if args.steps is not None:
            spec = spec.with_steps(args.steps)
        program = TrainingProgram(spec)
        graph = program.graph
    except (JobSpecError, DataError) as exc:
        err.print(f"gavel train: {exc}", markup=False)
        return EXIT_USAGE
    print(f"job {spec.name}: {spec.model.kind} with {count_params(program.net):,} parameters, "
          f"{len(graph)} nodes per step, {spec.steps} steps of {spec.batch_size}, "
          f"checkpoint every {spec.checkpoint_interval}")
    print(f"data root {program.dataset.root().hex()}")
    progress = Progress(
        TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[rate]} steps/s"), TimeRemainingColumn(), console=err, transient=False,
    )
    started = time.perf_counter()
    rate = {"t": started, "n": 0}
    with progress:
        task = progress.add_task("train", total=spec.steps, loss="-", rate="-")

        def on_step(step: int, loss: float) -> None:
            rate["n"] += 1
            elapsed = time.perf_counter() - started
            progress.update(task, completed=step, loss=f"{loss:.4f}", rate=f"{rate['n'] / max(elapsed, 1e-9):.2f}")

        try:
            trace = train(spec, args.out, resume=args.resume, device=args.device, on_step=on_step, program=program)
            progress.update(task, completed=spec.steps)
        except (TrainingError, CheckpointError) as exc:
            progress.stop()
            err.print(f"gavel train: {exc}", markup=False)
            return 1
    if trace.losses:
        print(f"loss: first {trace.losses[0]:.4f}, last {trace.losses[-1]:.4f}")
    print(f"{len(trace.checkpoints)} checkpoints, trace in {args.out}/{TRACE_FILE}")
    print(trace.root.hex())
    return 0


def _replay_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel replay",
                                description="Recompute checkpoint C+1 from checkpoint C and compare with the trace.")
    p.add_argument("job", help="job file (TOML)")
    p.add_argument("--from", dest="run_dir", required=True, help="directory written by gavel train")
    p.add_argument("--checkpoint", type=int, required=True, help="index C of the starting checkpoint")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    _add_roundlog_options(p)
    return p


def replay_main(argv: list[str]) -> int:
    args = _replay_parser().parse_args(argv)
    if roundlog_cli.is_roundlog_job(args.job):
        return roundlog_cli.replay(args.job, args.run_dir, args.checkpoint, threads=args.threads,
                                   backend=args.matmul_backend, micro_batch=args.micro_batch)
    err = Console(stderr=True)
    try:
        spec = load_job(args.job)
        result = replay(spec, args.run_dir, args.checkpoint, device=args.device)
    except (JobSpecError, DataError) as exc:
        err.print(f"gavel replay: {exc}", markup=False)
        return EXIT_USAGE
    except (TrainingError, CheckpointError) as exc:
        err.print(f"gavel replay: {exc}", markup=False)
        return EXIT_MISMATCH
    span = f"checkpoint {result.checkpoint} -> {result.checkpoint + 1} (steps {result.from_step}..{result.to_step})"
    if result.matches:
        print(f"{span}: match, state hash {result.got} ({result.seconds:.2f} s)")
        return 0
    print(f"{span}: MISMATCH\n  trace:      {result.expected}\n  recomputed: {result.got}")
    return EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(train_main(sys.argv[1:]))
