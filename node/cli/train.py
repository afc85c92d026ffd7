"""`gavel train` and `gavel replay`: run a training job, and recheck one checkpoint interval.

    gavel train JOB.toml --out DIR [--steps N] [--resume] [--device cpu|gpu] [--workers N]
    gavel replay JOB.toml --from DIR --checkpoint C [--device cpu|gpu]

`train` shows a progress bar (on stderr) and prints the trace root in hex as the last
line of its standard output. `replay` exits 0 only if checkpoint C+1 recomputed from
checkpoint C hashes to the state hash stored in the trace.

An error is one line on stderr. Exit status 2: bad usage (a job file that is missing or
wrong, an --out that is a file or already holds a run, a --from that is no directory, a
--checkpoint out of range); 1: a run that cannot go on or a replay that does not match
(a damaged checkpoint or trace, another job's run); 130: `train` interrupted (Ctrl-C),
after saying how to resume. Checkpoints and the trace are written to a temporary file
and renamed, so an interrupted run leaves none half-written.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from repops_cupy.checkpoint import CheckpointError
from repops_cupy.data import DataError
from repops_cupy.jobspec import JobSpecError, load_job
from repops_cupy.memory import describe as describe_bytes
from repops_cupy.memory import peak_bytes
from repops_cupy.models import count_params
from repops_cupy.parallel import SplitError, shares
from repops_cupy.parallel_comm import WorkerError
from repops_cupy.parallel_train import env_rank, serve_from_env
from repops_cupy.train import TRACE_FILE, Trace, TrainingError, TrainingProgram, replay, train

from ..threads import kernel_threads, limit_kernel_threads
from . import roundlog
from .common import EXIT_INTERRUPTED, describe_os_error

EXIT_MISMATCH = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the command line: said in one line, exit status 2."""


def _fail(prog: str, message: object, code: int) -> int:
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    return code


def load_training(job: str, steps: int | None = None) -> TrainingProgram:
    """The job file made executable, its step graph traced; `UsageError` when the file will not do."""
    try:
        spec = load_job(job)
        if steps is not None:
            spec = spec.with_steps(steps)
        program = TrainingProgram(spec)
        program.graph
    except (JobSpecError, DataError, TrainingError) as exc:
        raise UsageError(exc) from None
    except UnicodeDecodeError:
        raise UsageError(f"{job}: not a text (UTF-8) file") from None
    except OSError as exc:
        raise UsageError(describe_os_error(exc)) from None
    return program


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory")


def _make_out(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the directory ({exc.strerror or exc})") from None


def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel train", description="Train a job with reproducible operators.",
                                usage="gavel train JOB.toml --out DIR [options] (see --help)")
    p.add_argument("job", help="job file (TOML)")
    p.add_argument("--out", required=True, help="directory for checkpoints and trace.json")
    p.add_argument("--steps", type=int, help="number of steps (overrides job.steps)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--workers", type=_positive_int, default=1,
                   help="processes that share each batch (gloo on 127.0.0.1); any number gives the same bits")
    p.add_argument("--torchrun", action="store_true",
                   help="one of the workers torchrun started (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), on one "
                        "host or several: rank 0 writes --out, the others follow")
    _add_thread_options(p)
    return p


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_thread_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=_positive_int,
                   help="threads for the compiled kernels (numba, torch): default every core but one, so that "
                        "a busy machine does not stall them (any number gives the same bits); for rounding-log "
                        "jobs, torch's threads (default: torch's own)")
    _add_roundlog_options(p)


def _add_roundlog_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("rounding-log jobs (model.kind = \"torch-roundlog\")")
    group.add_argument("--matmul-backend", choices=("torch", "numpy"), default="torch",
                       help="float64 matrix products by torch (MKL) or NumPy (OpenBLAS)")
    group.add_argument("--micro-batch", type=int, help="split each batch into micro-batches of this size")


def train_main(argv: list[str]) -> int:
    args = _train_parser().parse_args(argv)
    out = Path(args.out)
    try:
        _check_out(out)
        if roundlog.is_roundlog_job(args.job):
            return roundlog.train(args.job, args.out, steps=args.steps, resume=args.resume,
                                      threads=args.threads, backend=args.matmul_backend, micro_batch=args.micro_batch)
        program = load_training(args.job, args.steps)
        if args.torchrun and _torchrun_rank() > 0:
            return _follow(program, args)
        worker_shares = _worker_shares(program, int(os.environ.get("WORLD_SIZE", "1")) if args.torchrun
                                       else args.workers, args.device)
        if (out / TRACE_FILE).exists() and not args.resume:
            raise UsageError(f"{out} already holds a trace: pass --resume to continue it, or choose another --out")
        _make_out(out)
    except UsageError as exc:
        return _fail("gavel train", exc, EXIT_USAGE)
    spec, graph = program.spec, program.graph
    print(f"job {spec.name}: {spec.model.kind} with {count_params(program.net):,} parameters, "
          f"{len(graph)} nodes per step, {spec.steps} steps of {spec.batch_size}, "
          f"checkpoint every {spec.checkpoint_interval}", flush=True)
    print(f"data root {program.dataset.root().hex()}", flush=True)
    print(f"peak memory estimate {describe_bytes(peak_bytes(graph))} per step on one device", flush=True)
    if len(worker_shares) > 1:
        print(f"{len(worker_shares)} workers, examples per worker {list(worker_shares)}", flush=True)
    # the bar starts with the first step, so that an error before it is the only line on stderr
    progress = Progress(
        TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[rate]} steps/s"), TimeRemainingColumn(), console=Console(stderr=True),
        transient=False,
    )
    task = progress.add_task("train", total=spec.steps, loss="-", rate="-")
    started = time.perf_counter()
    done = {"steps": 0}

    def on_step(step: int, loss: float) -> None:
        if not done["steps"]:
            progress.start()
        done["steps"] += 1
        elapsed = time.perf_counter() - started
        progress.update(task, completed=step, loss=f"{loss:.4f}", rate=f"{done['steps'] / max(elapsed, 1e-9):.2f}")

    def stop() -> None:
        if done["steps"]:  # (stopping a bar never started still writes an empty line)
            progress.stop()

    try:
        threads = args.threads or max(1, kernel_threads() // args.workers)
        with limit_kernel_threads(threads):
            trace = train(spec, out, resume=args.resume, device=args.device, on_step=on_step, program=program,
                          workers=args.workers, threads=threads, torchrun=args.torchrun)
        progress.update(task, completed=spec.steps)
    except KeyboardInterrupt:
        stop()
        return _fail("gavel train", _interrupted(args, out), EXIT_INTERRUPTED)
    except (TrainingError, CheckpointError) as exc:
        stop()
        return _fail("gavel train", exc, 1)
    except OSError as exc:
        stop()
        return _fail("gavel train", describe_os_error(exc), 1)
    stop()
    if trace.losses:
        print(f"loss: first {trace.losses[0]:.4f}, last {trace.losses[-1]:.4f}")
    print(f"{len(trace.checkpoints)} checkpoints, trace in {out}/{TRACE_FILE}")
    print(trace.root.hex())
    return 0


def _torchrun_rank() -> int:
    try:
        return env_rank()
    except WorkerError as exc:
        raise UsageError(f"--torchrun: {exc}") from None


def _follow(program: TrainingProgram, args: argparse.Namespace) -> int:
    """A torchrun rank above 0: serve rank 0's steps until it stops the run."""
    try:
        serve_from_env(program, args.threads or kernel_threads())
    except (WorkerError, RuntimeError) as exc:
        return _fail("gavel train", f"torchrun rank {env_rank()}: {exc}", 1)
    return 0


def _worker_shares(program: TrainingProgram, workers: int, device: str) -> tuple[int, ...]:
    """Examples per worker; `UsageError` for a count the batch or the device cannot take."""
    if workers > 1 and device != "cpu":
        raise UsageError("--workers runs on CPU processes (gloo); --device gpu takes one worker")
    try:
        return shares(program.spec.batch_size, workers)
    except SplitError as exc:
        raise UsageError(f"--workers {workers}: {exc}") from None


def _interrupted(args: argparse.Namespace, out: Path) -> str:
    """One line: where the run stopped and the command that continues it."""
    try:
        steps = [c["step"] for c in json.loads((out / TRACE_FILE).read_text())["checkpoints"]]
        kept = f"checkpoints up to step {steps[-1]} are kept"
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        kept = "no checkpoint was saved yet"
    again = ["gavel", "train", args.job, "--out", str(out)]
    if args.steps is not None:
        again += ["--steps", str(args.steps)]
    if args.device != "cpu":
        again += ["--device", args.device]
    if args.workers != 1:
        again += ["--workers", str(args.workers)]
    return f"interrupted; {kept}; resume with: {shlex.join(again + ['--resume'])}"


def _replay_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel replay",
                                description="Recompute checkpoint C+1 from checkpoint C and compare with the trace.",
                                usage="gavel replay JOB.toml --from DIR --checkpoint C [options] (see --help)")
    p.add_argument("job", help="job file (TOML)")
    p.add_argument("--from", dest="run_dir", required=True, help="directory written by gavel train")
    p.add_argument("--checkpoint", type=int, required=True, help="index C of the starting checkpoint")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    _add_thread_options(p)
    return p


def replay_main(argv: list[str]) -> int:
    args = _replay_parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        return _fail("gavel replay", f"--from {run_dir}: {'not a directory' if run_dir.exists() else 'no such directory'}",
                     EXIT_USAGE)
    if roundlog.is_roundlog_job(args.job):
        return roundlog.replay(args.job, args.run_dir, args.checkpoint, threads=args.threads,
                                   backend=args.matmul_backend, micro_batch=args.micro_batch)
    try:
        spec = load_training(args.job).spec
    except UsageError as exc:
        return _fail("gavel replay", exc, EXIT_USAGE)
    try:
        trace = Trace.load(run_dir / TRACE_FILE)
        last = len(trace.checkpoints) - 2
        if not 0 <= args.checkpoint <= last:
            return _fail("gavel replay", f"--checkpoint must lie in [0, {last}] for this trace, got {args.checkpoint}",
                         EXIT_USAGE)
        with limit_kernel_threads(args.threads or kernel_threads()):
            result = replay(spec, run_dir, args.checkpoint, device=args.device)
    except (TrainingError, CheckpointError) as exc:
        return _fail("gavel replay", exc, EXIT_MISMATCH)
    except OSError as exc:
        return _fail("gavel replay", describe_os_error(exc), EXIT_MISMATCH)
    span = f"checkpoint {result.checkpoint} -> {result.checkpoint + 1} (steps {result.from_step}..{result.to_step})"
    if result.matches:
        print(f"{span}: match, state hash {result.got} ({result.seconds:.2f} s)")
        return 0
    print(f"{span}: MISMATCH\n  trace:      {result.expected}\n  recomputed: {result.got}")
    return EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(train_main(sys.argv[1:]))
