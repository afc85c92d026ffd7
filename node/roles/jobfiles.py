"""A job as it travels and as it lies on disk: the bundle, the job directory, the terms check.

Bundle: one blob, msgpack ``{"format": "gavel-job/1", "toml": spec, "files": {name: blob id}}``.
The spec is the client's job file rewritten so that its data paths name files of the
bundle (``data.<ext>``, ``labels.npy``, ``tokenizer.json``, and the initial weights
``init.safetensors``); built-in and synthetic data need no file. A rounding-log job
(`roundlog_jobs`, `prepare_roundlog_bundle`) keeps its own tables and ships its model's code
as ``model.py``, and the client's data files under a graph-mode job's names (`data_files`).
Each file is its own blob, fetched and verified chunk by chunk like any other.

Job directory (``<data dir>/jobs/<job id hex>/``): ``job.toml``, the data files, and
``run/`` with the training run's checkpoints and ``trace.json`` (``repops_cupy.train``).

`check_terms` is what makes a provider or auditor trust that the signed terms describe
this bundle: it rebuilds the terms' commitments (configuration hash, step program, data
root, initial state, schedule) from the bundle and compares every one.
"""
from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from ..errors import BadMessage
from ..framing import pack, unpack

BUNDLE_FORMAT = "gavel-job/1"
JOB_FILE = "job.toml"
RUN_DIR = "run"
MAX_BUNDLE = 1 << 20
_FILE_NAME = re.compile(r"^((data|labels)(\.[a-z0-9]{1,8})?|tokenizer\.json|init\.safetensors|model\.py)$")
TOKENIZER_FILE, INIT_FILE = "tokenizer.json", "init.safetensors"


class BundleError(ValueError):
    """A bundle or job file that cannot be used: malformed, or terms that do not match it."""


def job_dir(root: Path, job_id: bytes) -> Path:
    return Path(root) / "jobs" / job_id.hex()


# -- the spec as TOML ------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A TOML value (the bundles' TOML: a graph-mode spec's and a rounding-log job's tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise BundleError(f"cannot write {value!r} to TOML")


def spec_toml(spec: Any, *, data_path: str = "", labels_path: str = "", tokenizer_path: str = "",
              init_path: str = "") -> str:
    """A job file for ``spec`` (a `JobSpec`) whose data paths are replaced as given."""
    job = {"name": spec.name, "seed": spec.seed, "steps": spec.steps, "batch_size": spec.batch_size,
           "checkpoint_interval": spec.checkpoint_interval}
    d = spec.data
    if d.kind == "synthetic":
        data = {"kind": d.kind, "n_samples": d.n_samples, "n_features": d.n_features, "n_classes": d.n_classes}
    elif d.kind == "synthetic-images":
        data = {"kind": d.kind, "n_samples": d.n_samples, "channels": d.channels, "size": d.size,
                "n_classes": d.n_classes}
    elif d.kind == "images":
        data = {"kind": d.kind, "path": data_path, "labels": labels_path}
        if d.mean:
            data.update(mean=list(d.mean), std=list(d.std))
    elif d.kind == "text":
        data = {"kind": d.kind, "path": data_path or d.path, "context": d.context}
        if d.tokenizer != "char":
            data.update(tokenizer=tokenizer_path or d.tokenizer, vocab_size=d.vocab_size)
    elif d.kind == "tokens":
        data = {"kind": d.kind, "path": data_path, "context": d.context, "dtype": d.dtype, "vocab_size": d.vocab_size}
    elif d.labels:
        data = {"kind": d.kind, "path": data_path, "labels": labels_path}
    else:
        data = {"kind": d.kind, "path": data_path, "context": d.context, "vocab_size": d.vocab_size}
    m = spec.model
    if m.kind == "gpt":
        model = {"kind": m.kind, "d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads, "d_ff": m.d_ff,
                 "gelu": m.gelu, "dropout": m.dropout}
        if m.tie_head:
            model["tie_head"] = True
        if m.n_positions:
            model["n_positions"] = m.n_positions
    elif m.kind == "cnn":
        model = {"kind": m.kind, "channels": list(m.channels), "kernel": m.kernel, "downsample": m.downsample,
                 "dropout": m.dropout}
    else:
        model = {"kind": m.kind, "hidden": list(m.hidden), "activation": m.activation, "dropout": m.dropout}
    if m.init:
        model["init"] = init_path or m.init
    o = spec.optimizer
    if o.kind == "adamw":
        optimizer = {"kind": o.kind, "lr": o.lr, "beta1": o.beta1, "beta2": o.beta2, "eps": o.eps,
                     "weight_decay": o.weight_decay}
    else:
        optimizer = {"kind": o.kind, "lr": o.lr, "momentum": o.momentum, "weight_decay": o.weight_decay}
    lines = []
    for name, table in (("job", job), ("data", data), ("model", model), ("optimizer", optimizer)):
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


def _local_data_files(spec: Any) -> dict[str, Path]:
    """Bundle name -> local file of the data and initial weights a spec reads."""
    files = data_files(spec.data, spec.base_dir)
    if spec.model.init:
        init = Path(spec.model.init).expanduser()
        files[INIT_FILE] = init if init.is_absolute() else Path(spec.base_dir) / init
    return files


def data_files(d: Any, base_dir: str | Path) -> dict[str, Path]:
    """Bundle name -> local file of the data a `DataSpec` reads (none for built-in or synthetic
    data); a rounding-log job's file data travels by this too."""
    base = Path(base_dir)

    def local(given: str) -> Path:
        path = Path(given).expanduser()
        return path if path.is_absolute() else base / path

    files = {TOKENIZER_FILE: local(d.tokenizer_file)} if d.tokenizer_file else {}
    if d.kind in ("synthetic", "synthetic-images") or (d.kind == "text" and d.path.startswith("builtin:")):
        return files
    path = local(d.path)
    files["data" + (path.suffix.lower() if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", path.suffix) else "")] = path
    if d.labels:
        files["labels.npy"] = local(d.labels)
    return files


def bundled_data_paths(files: dict[str, Path]) -> dict[str, str]:
    """The data fields of a bundle's spec: each names its file of the bundle ("" for none)."""
    return {"data_path": next((n for n in files if n.startswith("data")), ""),
            "labels_path": "labels.npy" if "labels.npy" in files else "",
            "tokenizer_path": TOKENIZER_FILE if TOKENIZER_FILE in files else ""}


def bundle_of_file(job_file: Path) -> tuple[str, dict[str, Path]]:
    """The bundle's TOML and local files of a job file (a rounding-log job ships its model
    code); raises BundleError on a job that cannot travel."""
    from repops_cupy.jobspec import JobSpecError, load_job

    from .roundlog_jobs import RoundLogBundleError, is_roundlog_file

    try:
        if is_roundlog_file(job_file):
            return prepare_roundlog_bundle(Path(job_file))
        return prepare_bundle(load_job(job_file))
    except (JobSpecError, RoundLogBundleError) as error:
        raise BundleError(str(error)) from None


def prepare_bundle(spec: Any) -> tuple[str, dict[str, Path]]:
    """The bundle's TOML and the local files to ship with it."""
    files = _local_data_files(spec)
    return spec_toml(spec, **bundled_data_paths(files), init_path=INIT_FILE if INIT_FILE in files else ""), files


def prepare_roundlog_bundle(job_file: Path) -> tuple[str, dict[str, Path]]:
    """A rounding-log job's bundle: its tables as the client wrote them, but ``model.source``
    naming ``model.py`` and the data fields naming the data's files of the bundle (the client's
    own data, by a graph-mode job's rules: `data_files`); and the local files to ship."""
    from repops_cupy.jobspec import parse_data
    from repops_cupy.roundlog.roundlog_job import FILE_DATA

    from .roundlog_jobs import MODEL_FILE, model_source_file

    base = job_file.resolve().parent
    raw = tomllib.loads(job_file.read_text())
    source = model_source_file(raw, base)
    if not source.is_file():
        raise BundleError(f"model.source: {source} is not a file")
    raw["model"]["source"] = MODEL_FILE
    files = {MODEL_FILE: source}
    data = raw.get("data")
    if isinstance(data, dict) and data.get("kind") in FILE_DATA:
        found = data_files(parse_data(data), base)
        named = bundled_data_paths(found)
        for field, name in (("path", named["data_path"]), ("labels", named["labels_path"]),
                            ("tokenizer", named["tokenizer_path"])):
            if name:
                if not found[name].is_file():
                    raise BundleError(f"data.{field}: {found[name]} is not a file (to ship as {name})")
                data[field] = name
        files.update(found)
    lines: list[str] = []
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise BundleError(f"{name}: a rounding-log job file has only tables at its top level")
        lines += _toml_tables(json.dumps(name), table)
    return "\n".join(lines), files


def _toml_tables(prefix: str, table: dict) -> list[str]:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    lines = [f"[{prefix}]"] + [f"{json.dumps(k)} = {toml_value(v)}" for k, v in scalars.items()] + [""]
    for key, sub in table.items():
        if isinstance(sub, dict):
            lines += _toml_tables(f"{prefix}.{json.dumps(key)}", sub)
    return lines


def encode_bundle(toml_text: str, file_ids: dict[str, bytes]) -> bytes:
    return pack({"format": BUNDLE_FORMAT, "toml": toml_text, "files": file_ids})


def decode_bundle(data: bytes) -> tuple[str, dict[str, bytes]]:
    """Raises BundleError on anything malformed."""
    if len(data) > MAX_BUNDLE:
        raise BundleError("job bundle too large")
    try:
        obj = unpack(data)
    except BadMessage:
        raise BundleError("job bundle does not decode") from None
    if not isinstance(obj, dict) or obj.get("format") != BUNDLE_FORMAT or not isinstance(obj.get("toml"), str) \
            or not isinstance(obj.get("files"), dict):
        raise BundleError(f"not a {BUNDLE_FORMAT} bundle")
    files = obj["files"]
    for name, blob_id in files.items():
        if not isinstance(name, str) or not _FILE_NAME.match(name) or not isinstance(blob_id, bytes) or len(blob_id) != 32:
            raise BundleError(f"bundle file {name!r}: bad name or blob id")
    return obj["toml"], files


def install_job(directory: Path, toml_text: str, files: dict[str, Path]) -> Path:
    """Write the job file and link (or copy) the data files into ``directory``; returns the job file."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        target = directory / name
        if not target.exists():
            tmp = directory / f".{name}.tmp"
            tmp.unlink(missing_ok=True)
            try:
                os.link(source, tmp)
            except OSError:
                tmp.write_bytes(Path(source).read_bytes())
            os.replace(tmp, target)
    job_file = directory / JOB_FILE
    tmp = directory / f".{JOB_FILE}.tmp"
    tmp.write_text(toml_text)
    os.replace(tmp, job_file)
    return job_file


def load_training(job_file: Path) -> Any:
    """The `TrainingProgram` of a job file, its step graph traced (seconds: run it in a thread)."""
    from repops_cupy.data import DataError
    from repops_cupy.jobspec import JobSpecError, load_job
    from repops_cupy.roundlog.roundlog_job import RoundLogJobError
    from repops_cupy.train import TrainingError, TrainingProgram

    from .roundlog_jobs import RoundLogBundleError, RoundLogProgram, is_roundlog_file

    if is_roundlog_file(job_file):
        try:
            return RoundLogProgram(job_file)
        except (RoundLogJobError, RoundLogBundleError, OSError) as error:
            raise BundleError(f"the job does not load: {error}") from None
    try:
        training = TrainingProgram(load_job(job_file))
        training.graph
    except (JobSpecError, DataError, TrainingError) as error:
        raise BundleError(f"the job does not load: {error}") from None
    return training


def verified_trace(training: Any, state_hashes: list[bytes], final_file: str) -> str:
    """A result's ``trace.json`` (``gavel-trace/1``), written by the client from what it
    checked: the checkpoints' state hashes under the signed root that stood on chain, the
    last one the delivered weights' (``final_file``). The provider's own trace file is never
    copied: its losses and file names are the provider's word, so the losses stay empty and
    no other checkpoint names a file."""
    from repops_cupy.train import Trace, checkpoint_steps

    spec = training.spec
    steps = checkpoint_steps(spec.steps, spec.checkpoint_interval)
    if len(steps) != len(state_hashes):
        raise BundleError(f"{len(state_hashes)} state hashes for the job's {len(steps)} checkpoints")
    last = len(steps) - 1
    checkpoints = [{"index": i, "step": step, "state_hash": digest.hex(), "file": final_file if i == last else None}
                   for i, (step, digest) in enumerate(zip(steps, state_hashes))]
    return Trace(spec.name, training.identity().hex(), spec.steps, spec.checkpoint_interval, checkpoints).to_json()


def check_terms(signed: Any, training: Any) -> Any:
    """The committed step program, once every commitment of the terms matches ``training``."""
    from repops_cupy.checkpoint import state_hash

    from ..training_oracle import protocol_program

    t = signed.terms
    program = protocol_program(training)
    expected = {
        "config_hash": training.identity(), "program_root": program.root, "program_size": program.size,
        "data_root": training.dataset.root(), "initial_state": state_hash(training.initial_state()),
        "steps": training.spec.steps, "checkpoint_every": training.spec.checkpoint_interval,
    }
    for name, value in expected.items():
        if getattr(t, name) != value:
            raise BundleError(f"the terms' {name} does not match the job bundle")
    return program

