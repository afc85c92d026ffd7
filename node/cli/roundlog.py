"""`gavel train` / `gavel replay` for rounding-log jobs (``model.kind = "torch-roundlog"``).

Such a job trains an ordinary torch module in float64, rounding every intermediate
result to float32 and logging the rounding decisions an auditor on other hardware
could get wrong (`repops_cupy.roundlog`). Its spec has its own tables ([model.args],
[roundlog]), so the CLI routes it here before the reproducible-operator spec parser
sees it.
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

MODEL_KIND = "torch-roundlog"


def _fail(prog: str, message: object, code: int) -> int:
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    return code


def is_roundlog_job(path: str) -> bool:
    """True when the job file asks for the rounding-log mode (a missing or bad file is not)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    model = raw.get("model")
    return isinstance(model, dict) and model.get("kind") == MODEL_KIND


def train(job_path: str, out_dir: str, *, steps: int | None, resume: bool, threads: int | None,
          backend: str, micro_batch: int | None) -> int:
    from repops_cupy.roundlog.roundlog_job import RoundLogJobError, load_spec, train_job

    from .common import describe_os_error

    if resume:
        return _fail("gavel train", "--resume is not supported for rounding-log jobs yet; train again from step 0", 2)
    try:
        spec = load_spec(job_path)
        if steps is not None:
            spec.setdefault("job", {})["steps"] = steps
        trace = train_job(spec, out_dir, threads=threads, backend=backend, micro_batch=micro_batch)
    except RoundLogJobError as exc:
        return _fail("gavel train", exc, 2)
    except OSError as exc:
        return _fail("gavel train", describe_os_error(exc), 1)
    steps_done = trace["steps"]
    log_bytes = sum(s["log_bytes"] for s in steps_done)
    if steps_done:
        print(f"loss: first {steps_done[0]['loss']:.4f}, last {steps_done[-1]['loss']:.4f}")
    print(f"{len(trace['checkpoints'])} checkpoints, rounding log {log_bytes:,} bytes "
          f"({log_bytes / max(len(steps_done), 1):,.0f} per step), trace in {out_dir}/trace.json")
    print(trace["trace_root"])
    return 0


def replay(job_path: str, run_dir: str, checkpoint: int, *, threads: int | None, backend: str,
           micro_batch: int | None) -> int:
    import json

    from repops_cupy.roundlog.roundlog_job import RoundLogJobError, replay_job

    from .common import describe_os_error

    try:
        trace = json.loads((Path(run_dir) / "trace.json").read_text())
        steps = [c["step"] for c in trace["checkpoints"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _fail("gavel replay", f"cannot read the trace in {run_dir}: {exc}", 1)
    if not 0 <= checkpoint < len(steps) - 1:
        return _fail("gavel replay", f"--checkpoint must lie in [0, {len(steps) - 2}] for this trace, got {checkpoint}", 2)
    try:
        result = replay_job(job_path, run_dir, start=steps[checkpoint], end=steps[checkpoint + 1],
                            threads=threads, backend=backend, micro_batch=micro_batch)
    except RoundLogJobError as exc:
        return _fail("gavel replay", exc, 2)
    except OSError as exc:
        return _fail("gavel replay", describe_os_error(exc), 1)
    corrections = sum(s.get("corrections", 0) for s in result["steps"])
    span = f"checkpoint {checkpoint} -> {checkpoint + 1} (steps {steps[checkpoint]}..{steps[checkpoint + 1]})"
    if result["first_mismatch"] is None:
        print(f"{span}: match, {corrections:,} logged rounding decisions applied")
        return 0
    print(f"{span}: MISMATCH at step {result['first_mismatch']}")
    return 1
