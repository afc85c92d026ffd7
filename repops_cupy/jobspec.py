"""Training job specifications: a TOML file read into checked, frozen dataclasses.

A job file has four tables::

    [job]        seed, steps, batch_size, checkpoint_interval, name
    [data]       kind = "text" | "tokens" | "npy" | "synthetic" | "images" | "synthetic-images", and its fields
                 (text: tokenizer = "char" | "bpe" | "path/to/tokenizer.json", with vocab_size for BPE;
                 images: path of an (N, C, H, W) uint8 or float32 .npy, labels, optional mean and std per
                 channel; synthetic-images: n_samples, channels, size, n_classes)
    [model]      kind = "gpt" | "mlp" | "cnn", and its sizes (cnn: channels, kernel, downsample); init = "weights.safetensors" to start
                 from given weights (see `weights`); gpt: tie_head, n_positions
    [optimizer]  kind = "adamw" | "sgd", and its hyper-parameters

Every error names the field it is about ("optimizer.lr: must be a positive number"),
and a field the schema does not know is an error too, so a typo never passes silently.
Relative data paths are relative to the job file; ``builtin:NAME`` names a data set
shipped in `repops_cupy/datasets`.

`JobSpec.identity()` is the canonical JSON of everything that determines the bits
of the training run except the number of steps (a longer run of the same job passes
through the same checkpoints) and the data's location; the trainer adds the data's
content root. Initial weights enter it by the file's content hash (``model.init_hash``, its
blob id, computed when the job is parsed), not by their path.
"""
from __future__ import annotations

import json
import math
from functools import cache
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from .merkle import leaf_hash, merkle_root_of_hashes

DATA_KINDS = ("text", "tokens", "npy", "synthetic", "images", "synthetic-images")
IMAGE_KINDS = ("images", "synthetic-images")
TOKEN_DTYPES = ("uint8", "uint16", "int32", "int64")
MODEL_KINDS = ("gpt", "mlp", "cnn")
DOWNSAMPLES = ("maxpool", "stride")
OPTIMIZER_KINDS = ("adamw", "sgd")
ACTIVATIONS = ("relu", "gelu")
GELU_APPROXIMATIONS = ("none", "tanh")
MAX_SEED = (1 << 63) - 1
TOKENIZERS = ("char", "bpe")  # or the path of a tokenizer.json
# fields added after trace roots were published: left out of the identity at their defaults,
# so the identities of jobs that do not use them stay what they were
_NEW_DEFAULTS = {"data": {"tokenizer": "char", "channels": 0, "size": 0, "mean": (), "std": ()},
                 "model": {"tie_head": False, "n_positions": 0, "init_hash": "", "channels": (), "kernel": 0,
                           "downsample": ""}}


class JobSpecError(ValueError):
    """An invalid job specification; the message starts with the field's dotted name."""


@dataclass(frozen=True)
class DataSpec:
    kind: str
    path: str = ""
    labels: str = ""
    context: int = 0
    dtype: str = "uint16"
    vocab_size: int = 0
    n_samples: int = 0
    n_features: int = 0
    n_classes: int = 0
    tokenizer: str = "char"
    channels: int = 0  # synthetic-images
    size: int = 0  # synthetic-images: height and width
    mean: tuple[float, ...] = ()  # images: per channel, subtracted after uint8 / 255
    std: tuple[float, ...] = ()  # images: per channel, divided by after the mean

    @property
    def tokenizer_file(self) -> str:
        """The path of the tokenizer.json the job names ("" for "char" and "bpe")."""
        return "" if self.tokenizer in TOKENIZERS else self.tokenizer

    @property
    def is_language(self) -> bool:
        return self.kind in ("text", "tokens") or (self.kind == "npy" and not self.labels)


@dataclass(frozen=True)
class ModelSpec:
    kind: str
    d_model: int = 0
    n_layers: int = 0
    n_heads: int = 0
    d_ff: int = 0
    gelu: str = "tanh"
    hidden: tuple[int, ...] = ()
    activation: str = "relu"
    dropout: float = 0.0
    tie_head: bool = False  # gpt: the output head is the token embedding (GPT-2)
    n_positions: int = 0  # gpt: rows of the position table (0: the data's context)
    init: str = ""  # safetensors file of initial weights ("" : from the seed)
    init_hash: str = ""  # that file's content hash (`file_hash`), hex
    channels: tuple[int, ...] = ()  # cnn: output channels of each convolution
    kernel: int = 0  # cnn: odd kernel size (padding kernel // 2)
    downsample: str = ""  # cnn: "maxpool" (2 x 2) or "stride" (stride-2 convolutions)


@dataclass(frozen=True)
class OptimizerSpec:
    kind: str
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0


@dataclass(frozen=True)
class JobSpec:
    seed: int
    steps: int
    batch_size: int
    checkpoint_interval: int
    data: DataSpec
    model: ModelSpec
    optimizer: OptimizerSpec
    name: str = "job"
    base_dir: str = field(default=".", compare=False)

    def with_steps(self, steps: int) -> JobSpec:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise JobSpecError("job.steps: must be a positive integer")
        return replace(self, steps=steps)

    def identity(self) -> str:
        """Canonical JSON of what fixes the run's bits, without `steps`, paths or name."""
        d = asdict(self)
        for key in ("steps", "base_dir", "name"):
            d.pop(key)
        d["data"].pop("path")
        d["data"].pop("labels")
        d["model"].pop("init")
        if self.data.tokenizer_file:
            d["data"]["tokenizer"] = "file"  # its bytes are an array of the data set, under the data root
        for table, defaults in _NEW_DEFAULTS.items():
            for key, default in defaults.items():
                if d[table][key] == default:
                    d[table].pop(key)
        return json.dumps(d, sort_keys=True, separators=(",", ":"))


class _Table:
    """Reads one TOML table, naming `prefix.key` in every error, rejecting unknown keys."""

    def __init__(self, prefix: str, raw: Any) -> None:
        if not isinstance(raw, Mapping):
            raise JobSpecError(f"{prefix}: must be a table")
        self.prefix = prefix
        self.raw = dict(raw)
        self.used: set[str] = set()

    def _get(self, key: str, default: Any) -> Any:
        self.used.add(key)
        if key not in self.raw:
            if default is _REQUIRED:
                raise JobSpecError(f"{self.prefix}.{key}: is required")
            return default
        return self.raw[key]

    def fail(self, key: str, message: str) -> JobSpecError:
        return JobSpecError(f"{self.prefix}.{key}: {message}")

    def integer(self, key: str, default: Any = None, *, low: int = 0, high: int | None = None) -> int:
        v = self._get(key, _REQUIRED if default is None else default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"must be an integer, got {v!r}")
        if v < low or (high is not None and v > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            raise self.fail(key, "must be a positive integer" if (low == 1 and high is None) else f"must be {bound}")
        return v

    def number(self, key: str, default: Any = None, *, positive: bool = False, low: float | None = None,
               below: float | None = None) -> float:
        v = self._get(key, _REQUIRED if default is None else default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(key, "must be a positive number" if positive else f"must be a finite number, got {v!r}")
        v = float(v)
        if positive and v <= 0:
            raise self.fail(key, "must be a positive number")
        if low is not None and v < low:
            raise self.fail(key, f"must be at least {low}")
        if below is not None and v >= below:
            raise self.fail(key, f"must be below {below}")
        return v

    def string(self, key: str, default: Any = None) -> str:
        v = self._get(key, _REQUIRED if default is None else default)
        if not isinstance(v, str) or (default is None and not v):
            raise self.fail(key, f"must be a non-empty string, got {v!r}")
        return v

    def choice(self, key: str, options: tuple[str, ...], default: Any = None) -> str:
        v = self._get(key, _REQUIRED if default is None else default)
        if v not in options:
            raise self.fail(key, f"must be one of {', '.join(repr(o) for o in options)}, got {v!r}")
        return v

    def boolean(self, key: str, default: bool) -> bool:
        v = self._get(key, default)
        if not isinstance(v, bool):
            raise self.fail(key, f"must be true or false, got {v!r}")
        return v

    def int_list(self, key: str) -> tuple[int, ...]:
        v = self._get(key, _REQUIRED)
        if not isinstance(v, list) or not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
            raise self.fail(key, f"must be a non-empty list of positive integers, got {v!r}")
        return tuple(v)

    def float_list(self, key: str, *, positive: bool = False) -> tuple[float, ...]:
        v = self._get(key, [])
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                                          or (positive and x <= 0) for x in v):
            kind = "positive" if positive else "finite"
            raise self.fail(key, f"must be a list of {kind} numbers, got {v!r}")
        return tuple(float(x) for x in v)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.used)
        if unknown:
            raise self.fail(unknown[0], "unknown field")


_REQUIRED = object()


def _data(t: _Table) -> DataSpec:
    kind = t.choice("kind", DATA_KINDS)
    if kind == "text":
        path, context = t.string("path"), t.integer("context", low=1)
        tokenizer = t.string("tokenizer", "char") or "char"
        if tokenizer == "char":
            spec = DataSpec(kind, path=path, context=context)
        else:
            spec = DataSpec(kind, path=path, context=context, vocab_size=t.integer("vocab_size", low=2),
                            tokenizer=tokenizer)
    elif kind == "tokens":
        spec = DataSpec(kind, path=t.string("path"), context=t.integer("context", low=1),
                        dtype=t.choice("dtype", TOKEN_DTYPES, "uint16"), vocab_size=t.integer("vocab_size", low=2))
    elif kind == "npy":
        labels = t.string("labels", "")
        if labels:
            spec = DataSpec(kind, path=t.string("path"), labels=labels)
        else:
            spec = DataSpec(kind, path=t.string("path"), context=t.integer("context", low=1),
                            vocab_size=t.integer("vocab_size", low=2))
    elif kind == "images":
        spec = DataSpec(kind, path=t.string("path"), labels=t.string("labels"), mean=t.float_list("mean"),
                        std=t.float_list("std", positive=True))
        if len(spec.mean) != len(spec.std):
            raise t.fail("std", f"must have one value per channel, as data.mean ({len(spec.mean)})")
    elif kind == "synthetic-images":
        spec = DataSpec(kind, n_samples=t.integer("n_samples", low=1), channels=t.integer("channels", low=1),
                        size=t.integer("size", low=2), n_classes=t.integer("n_classes", low=2))
    else:
        spec = DataSpec(kind, n_samples=t.integer("n_samples", low=1), n_features=t.integer("n_features", low=1),
                        n_classes=t.integer("n_classes", low=2))
    t.done()
    return spec


def parse_data(raw: Mapping[str, Any]) -> DataSpec:
    """A checked DataSpec from a [data] table (a rounding-log job's file data is read by these rules too)."""
    return _data(_Table("data", raw))


FILE_CHUNK = 256 * 1024  # node.blobs.CHUNK_SIZE: the hash is the id the file travels under


@cache
def _file_hash(path: Path, size: int, mtime_ns: int) -> str:
    leaves = []
    with open(path, "rb") as f:
        while chunk := f.read(FILE_CHUNK):
            leaves.append(leaf_hash(chunk))
    return merkle_root_of_hashes(leaves).hex()


def file_hash(path: str | Path) -> str:
    """A file's content hash, hex: the Merkle root over its 256 KiB chunks, which is its blob id
    (`node.blobs.blob_id_of`); cached while the file's size and mtime stay."""
    st = Path(path).stat()
    return _file_hash(Path(path).resolve(), st.st_size, st.st_mtime_ns)


def _init_weights(t: _Table, base_dir: str | Path) -> tuple[str, str]:
    """(path as written, content hash hex) of model.init, or ("", "")."""
    init = t.string("init", "")
    if not init:
        return "", ""
    full = Path(init).expanduser()
    full = full if full.is_absolute() else Path(base_dir) / full
    if not full.is_file():
        raise t.fail("init", f"no such file {full}")
    return init, file_hash(full)


def _model(t: _Table, base_dir: str | Path = ".") -> ModelSpec:
    kind = t.choice("kind", MODEL_KINDS)
    dropout = t.number("dropout", 0.0, low=0.0, below=1.0)
    init, init_hash = _init_weights(t, base_dir)
    if kind == "gpt":
        d_model = t.integer("d_model", low=1)
        n_heads = t.integer("n_heads", low=1)
        if d_model % n_heads:
            raise t.fail("n_heads", f"must divide model.d_model ({d_model})")
        spec = ModelSpec(kind, d_model=d_model, n_layers=t.integer("n_layers", low=1), n_heads=n_heads,
                         d_ff=t.integer("d_ff", 4 * d_model, low=1), gelu=t.choice("gelu", GELU_APPROXIMATIONS, "tanh"),
                         dropout=dropout, tie_head=t.boolean("tie_head", False),
                         n_positions=t.integer("n_positions", 0, low=0), init=init, init_hash=init_hash)
    elif kind == "cnn":
        kernel = t.integer("kernel", 3, low=1)
        if kernel % 2 == 0:
            raise t.fail("kernel", "must be odd (the padding is kernel // 2 on each side)")
        spec = ModelSpec(kind, channels=t.int_list("channels"), kernel=kernel,
                         downsample=t.choice("downsample", DOWNSAMPLES, "maxpool"), dropout=dropout, init=init,
                         init_hash=init_hash)
    else:
        spec = ModelSpec(kind, hidden=t.int_list("hidden"), activation=t.choice("activation", ACTIVATIONS, "relu"),
                         dropout=dropout, init=init, init_hash=init_hash)
    t.done()
    return spec


def _optimizer(t: _Table) -> OptimizerSpec:
    kind = t.choice("kind", OPTIMIZER_KINDS)
    lr = t.number("lr", positive=True)
    wd = t.number("weight_decay", 0.0, low=0.0)
    if kind == "adamw":
        spec = OptimizerSpec(kind, lr, beta1=t.number("beta1", 0.9, low=0.0, below=1.0),
                             beta2=t.number("beta2", 0.999, low=0.0, below=1.0), eps=t.number("eps", 1e-8, positive=True),
                             weight_decay=wd)
    else:
        spec = OptimizerSpec(kind, lr, momentum=t.number("momentum", 0.0, low=0.0, below=1.0), weight_decay=wd)
    t.done()
    return spec


def _table(raw: Mapping[str, Any], name: str) -> _Table:
    if name not in raw:
        raise JobSpecError(f"{name}: table is required")
    return _Table(name, raw[name])


def parse_job(raw: Mapping[str, Any], base_dir: str | Path = ".") -> JobSpec:
    """A checked JobSpec from the parsed TOML tables."""
    unknown = sorted(set(raw) - {"job", "data", "model", "optimizer"})
    if unknown:
        raise JobSpecError(f"{unknown[0]}: unknown table")
    job = _table(raw, "job")
    data = _data(_table(raw, "data"))
    model = _model(_table(raw, "model"), base_dir)
    optimizer = _optimizer(_table(raw, "optimizer"))
    spec = JobSpec(
        seed=job.integer("seed", low=0, high=MAX_SEED), steps=job.integer("steps", low=1),
        batch_size=job.integer("batch_size", low=1), checkpoint_interval=job.integer("checkpoint_interval", low=1),
        data=data, model=model, optimizer=optimizer, name=job.string("name", "job"), base_dir=str(base_dir),
    )
    job.done()
    if model.n_positions and model.n_positions < data.context:
        raise JobSpecError(f"model.n_positions: must be at least data.context ({data.context})")
    if model.kind == "gpt" and not data.is_language:
        raise JobSpecError("model.kind: 'gpt' needs token data (data.kind 'text', 'tokens', or 'npy' without labels)")
    if model.kind == "mlp" and (data.is_language or data.kind in IMAGE_KINDS):
        raise JobSpecError("model.kind: 'mlp' needs classification data (data.kind 'synthetic', or 'npy' with labels)")
    if model.kind == "cnn" and data.kind not in IMAGE_KINDS:
        raise JobSpecError("model.kind: 'cnn' needs image data (data.kind 'images' or 'synthetic-images')")
    if model.kind == "cnn" and data.kind == "synthetic-images" and data.size < 2 ** len(model.channels):
        raise JobSpecError(f"data.size: {len(model.channels)} halvings need images of at least "
                           f"{2 ** len(model.channels)} pixels")
    return spec


def load_job(path: str | Path) -> JobSpec:
    """Read and check a job file."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise JobSpecError(f"{path}: no such job file") from None
    except tomllib.TOMLDecodeError as exc:
        raise JobSpecError(f"{path}: not valid TOML: {exc}") from None
    return parse_job(raw, path.resolve().parent)
