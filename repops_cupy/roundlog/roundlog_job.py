"""Rounding-log jobs: a TOML spec in, checkpoints + per-step logs + trace.json out.

Spec (the tables of the project's job files; ``[model] kind = "torch-roundlog"``)::

    [job]        name, seed, steps, batch_size, checkpoint_interval
    [model]      kind = "torch-roundlog", module = "pkg.mod:Class", optional source = "file.py"
                 (the class is then loaded from that file, not imported: a job bundle
                 carries the model's code this way)
    [model.args] constructor keyword arguments
    [data]       kind = "synthetic-images" | "synthetic-tokens", and its fields; or the client's own data,
                 with a graph-mode job's fields (`repops_cupy.jobspec`): "text" (char, BPE or a
                 tokenizer.json), "tokens" (a raw token file), "npy" (1-D tokens, or features and
                 labels), "images" ((N, C, H, W) uint8 or float32 .npy and labels, optional mean, std)
    [optimizer]  kind = "sgd" | "adamw", lr, momentum | beta1, beta2, eps, weight_decay,
                 optional clip_grad_norm (max global gradient norm, as torch's clip_grad_norm_)
    [roundlog]   optional: thresholds = { key = beta, ... } overriding the measured table

The model is built after ``torch.manual_seed(job.seed)``. Outputs in ``out_dir``::

    checkpoints/step_000000.safetensors ...   every checkpoint_interval steps, and the last
    logs/step_000001.rlog ...                  every step's rounding log
    logs/step_000001.sites ...                 optional: 16-byte digest per rounding site
    trace.json                                 state hash per checkpoint, the trace root,
                                               and per step: state hash, log bytes, entries, loss
"""
from __future__ import annotations

import importlib
import json
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Mapping

import torch

from .batches import DatasetBatches, SyntheticImages, SyntheticTokens
from .state import write_trace
from .thresholds import Thresholds
from .trainer import Auditor, RoundLogTrainer, RunConfig

# torch's default generator is one per process: two models built at once in two threads (a
# node's jobs, or a provider and an auditor in one process) would interleave their draws.
_BUILD_LOCK = threading.Lock()

MODEL_KIND = "torch-roundlog"
# data kinds read from the client's files by the graph-mode jobs' rules (`repops_cupy.jobspec`)
FILE_DATA = ("text", "tokens", "npy", "images")


class RoundLogJobError(ValueError):
    """An invalid rounding-log job spec; the message names the field."""


def load_spec(spec: str | Path | Mapping) -> dict:
    if isinstance(spec, Mapping):
        return dict(spec)
    path = Path(spec)
    raw = tomllib.loads(path.read_text())
    raw.setdefault("_base_dir", str(path.resolve().parent))
    return raw


def _need(table: Mapping, prefix: str, key: str) -> Any:
    if key not in table:
        raise RoundLogJobError(f"{prefix}.{key}: is required")
    return table[key]


class Job:
    """A parsed spec: everything needed to build identical runs on any machine."""

    def __init__(self, spec: str | Path | Mapping):
        raw = load_spec(spec)
        self.raw = raw
        job, model, data, opt = (raw.get(t) for t in ("job", "model", "data", "optimizer"))
        for name, table in (("job", job), ("model", model), ("data", data), ("optimizer", opt)):
            if not isinstance(table, Mapping):
                raise RoundLogJobError(f"{name}: table is required")
        if model.get("kind") != MODEL_KIND:
            raise RoundLogJobError(f"model.kind: must be {MODEL_KIND!r} for a rounding-log job")
        self.name = job.get("name", "job")
        self.seed = int(_need(job, "job", "seed"))
        self.steps = int(_need(job, "job", "steps"))
        self.batch_size = int(_need(job, "job", "batch_size"))
        self.checkpoint_interval = int(_need(job, "job", "checkpoint_interval"))
        self.module = str(_need(model, "model", "module"))
        source = model.get("source")
        if source is not None and (not isinstance(source, str) or not source):
            raise RoundLogJobError(f"model.source: must be a file name, got {source!r}")
        self.source = Path(raw.get("_base_dir", ".")) / source if source else None
        self.model_args = dict(model.get("args", {}))
        self.data_spec = None  # the DataSpec of file data (None: synthetic data)
        self.data = self._data(dict(data), raw.get("_base_dir", "."))
        if "vocab" in self.model_args and getattr(self.data, "vocab", None) not in (None, self.model_args["vocab"]):
            raise RoundLogJobError(f"model.args.vocab: {self.model_args['vocab']} but the data has {self.data.vocab} tokens")
        self.optimizer = self._optimizer(dict(opt))
        overrides = dict(raw.get("roundlog", {}).get("thresholds", {}))
        self.thresholds = Thresholds.measured(overrides)

    def _data(self, d: dict, base_dir: str):
        kind = d.get("kind")
        if kind in FILE_DATA:
            return self._file_data(d, base_dir)
        d.pop("kind", None)
        if kind == "synthetic-images":
            return SyntheticImages(self.batch_size, seed=self.seed, **d)
        if kind == "synthetic-tokens":
            return SyntheticTokens(self.batch_size, seed=self.seed, **d)
        kinds = ", ".join(repr(k) for k in ("synthetic-images", "synthetic-tokens", *FILE_DATA))
        raise RoundLogJobError(f"data.kind: must be one of {kinds}, got {kind!r}")

    def _file_data(self, d: dict, base_dir: str) -> DatasetBatches:
        """The client's own data, read by the graph-mode jobs' rules (`jobspec.parse_data`,
        `data.load_dataset`): the same fields, files and content root."""
        from ..data import DataError, load_dataset
        from ..jobspec import JobSpecError, parse_data

        try:
            self.data_spec = parse_data(d)
            dataset = load_dataset(self.data_spec, self.seed, base_dir)
            batches = DatasetBatches(dataset, self.batch_size, seed=self.seed, context=self.data_spec.context)
        except JobSpecError as exc:
            raise RoundLogJobError(str(exc)) from None
        except DataError as exc:
            message = str(exc)
            raise RoundLogJobError(message if message.startswith("data.") else f"data: {message}") from None
        classes = self.model_args.get("num_classes")
        if batches.num_classes is not None and isinstance(classes, int) and batches.num_classes > classes:
            raise RoundLogJobError(f"model.args.num_classes: {classes} but the labels reach class "
                                   f"{batches.num_classes - 1}")
        return batches

    @staticmethod
    def _optimizer(o: dict) -> dict:
        kind = o.pop("kind", None)
        if kind == "sgd":
            out = {"name": "sgd", "lr": float(_need(o, "optimizer", "lr")), "momentum": float(o.get("momentum", 0.9)),
                   "weight_decay": float(o.get("weight_decay", 0.0))}
        elif kind == "adamw":
            out = {"name": "adamw", "lr": float(_need(o, "optimizer", "lr")),
                   "betas": (float(o.get("beta1", 0.9)), float(o.get("beta2", 0.999))),
                   "eps": float(o.get("eps", 1e-8)), "weight_decay": float(o.get("weight_decay", 0.01))}
        else:
            raise RoundLogJobError(f"optimizer.kind: must be 'sgd' or 'adamw', got {kind!r}")
        if "clip_grad_norm" in o:
            clip = o["clip_grad_norm"]
            if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0 < clip < float("inf"):
                raise RoundLogJobError(f"optimizer.clip_grad_norm: must be a positive number, got {clip!r}")
            out["clip_grad_norm"] = float(clip)
        return out

    def model_factory(self):
        mod_name, _, cls_name = self.module.partition(":")
        try:
            module = importlib.import_module(mod_name) if self.source is None else _load_source(self.source)
            cls = getattr(module, cls_name)
        except Exception as exc:  # noqa: BLE001 - a model file may fail in any way while it loads
            where = f" from {self.source.name}" if self.source is not None else ""
            raise RoundLogJobError(f"model.module: cannot load {self.module!r}{where}: {exc}") from None
        seed, args = self.seed, self.model_args

        def build() -> torch.nn.Module:
            with _BUILD_LOCK:
                torch.manual_seed(seed)
                return cls(**args)

        return build

    def config(self, **execution) -> RunConfig:
        return RunConfig(thresholds=self.thresholds, **execution)

    def checkpoint_steps(self) -> list[int]:
        steps = list(range(0, self.steps + 1, self.checkpoint_interval))
        return steps if steps[-1] == self.steps else steps + [self.steps]


def _load_source(path: Path):
    """The module of a model source file, under a name derived from its bytes (two jobs'
    files of the same name never share a module)."""
    import hashlib
    import importlib.util
    import sys

    code = path.read_bytes()
    name = f"gavel_roundlog_model_{hashlib.sha256(code).hexdigest()[:16]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: dataclasses and pickling look their module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _ckpt(out: Path, step: int) -> Path:
    return out / "checkpoints" / f"step_{step:06d}.safetensors"


def _logfile(out: Path, step: int) -> Path:
    return out / "logs" / f"step_{step:06d}.rlog"


def _sitefile(out: Path, step: int) -> Path:
    return out / "logs" / f"step_{step:06d}.sites"


def train_job(spec: str | Path | Mapping, out_dir: str | Path, *, threads: int | None = None,
              backend: str = "torch", micro_batch: int | None = None, site_digests: bool = False,
              after_step=None) -> dict:
    """Train a ``torch-roundlog`` job; returns the trace document also written to trace.json.

    ``site_digests`` also writes ``logs/step_N.sites`` (16 bytes per rounding site), with
    which a replay names the first site whose values differ. ``after_step(step, trainer)``
    runs after each step, before the state is hashed and saved (tests use it to play a
    dishonest trainer).
    """
    job = Job(spec)
    out = Path(out_dir)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    trainer = RoundLogTrainer(job.model_factory(), job.optimizer, job.data,
                              job.config(threads=threads, backend=backend, micro_batch=micro_batch,
                                         site_digests=site_digests), seed=job.seed)
    ckpts = set(job.checkpoint_steps())
    checkpoints = [(0, trainer.save_checkpoint(_ckpt(out, 0)))]
    steps = []
    t0 = time.perf_counter()
    for i in range(1, job.steps + 1):
        digest, log = trainer.step(i)
        if after_step is not None:
            after_step(i, trainer)
            digest = trainer.state_hash()
        _logfile(out, i).write_bytes(log)
        if site_digests:
            _sitefile(out, i).write_bytes(trainer.site_digests())
        steps.append({"step": i, "state_hash": digest.hex(), "log_bytes": len(log),
                      "entries": trainer.last.total("entries"), "rounded": trainer.last.total("rounded"),
                      "loss": trainer.last_loss})
        if i in ckpts:
            checkpoints.append((i, trainer.save_checkpoint(_ckpt(out, i))))
    extra = {"job": job.name, "kind": MODEL_KIND, "steps": steps, "seconds": time.perf_counter() - t0,
             "thresholds": job.thresholds.to_dict(),
             "execution": {"threads": threads, "backend": backend, "micro_batch": micro_batch}}
    write_trace(out / "trace.json", checkpoints, extra)
    return json.loads((out / "trace.json").read_text())


def replay_job(spec: str | Path | Mapping, run_dir: str | Path, *, start: int = 0, end: int | None = None,
               threads: int | None = None, backend: str = "torch", micro_batch: int | None = None,
               apply_log: bool = True) -> dict:
    """Replay steps ``start+1 .. end`` of a trained run from its checkpoint at ``start``.

    Compares each replayed state hash with the run's trace.json. Returns the first
    step whose hash differs (None if all match), per step the tallies (corrections
    applied, implausible entries, margin breaches, and where the run has site digests
    the first site whose rounded values differ), and the recomputed hashes of the
    checkpoints reached.
    """
    job = Job(spec)
    run = Path(run_dir)
    trace = json.loads((run / "trace.json").read_text())
    claimed = {s["step"]: s["state_hash"] for s in trace["steps"]}
    claimed.update({c["step"]: c["state_hash"] for c in trace["checkpoints"]})
    end = job.steps if end is None else end
    has_sites = _sitefile(run, start + 1).exists()
    auditor = Auditor(job.model_factory(), job.optimizer, job.data,
                      job.config(threads=threads, backend=backend, micro_batch=micro_batch, site_digests=has_sites),
                      seed=job.seed)
    start_hash = auditor.load_checkpoint(_ckpt(run, start))
    first_mismatch = None if start_hash.hex() == claimed.get(start) else start
    per_step = []
    checkpoints = {}
    for i in range(start + 1, end + 1):
        sites = _sitefile(run, i).read_bytes() if has_sites else None
        digest = auditor.replay_step(i, _logfile(run, i).read_bytes(), apply_log=apply_log, site_digests=sites)
        ok = digest.hex() == claimed.get(i)
        if not ok and first_mismatch is None:
            first_mismatch = i
        per_step.append({"step": i, "match": ok, **auditor.report()})
        if i in set(job.checkpoint_steps()):
            checkpoints[i] = digest.hex()
    return {"start": start, "end": end, "first_mismatch": first_mismatch, "steps": per_step,
            "checkpoints": checkpoints}
