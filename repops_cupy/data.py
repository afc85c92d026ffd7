"""Content-addressed datasets and a batch sampler that rebuilds any step's batch alone.

Datasets
--------
A `Dataset` is a few named arrays: ``tokens`` (1-D integers) for language modelling,
or ``x`` (N, D) float32 and ``y`` (N,) int64 for classification. Its root commits to
every value:

- each array is cut along its first axis into shards of ``SHARD_BYTES`` (the last
  may be shorter); a shard's Merkle leaf is its `hash_tensor`;
- an array's root is the Merkle root over its shard leaves;
- the dataset root is the Merkle root over, in name order, the leaves
  ``u16 len(name) || name || array root``: `hashing.state_root` of the array roots,
  the layout of a state hash.

So a provider can prove any shard against the root a job names, and two parties that
agree on the root agree on every example.

Sources: ``builtin:sonnets`` (the shipped corpus, see `datasets/README.md`), a UTF-8
text file (char-level: the vocabulary is the sorted set of its characters; or a
byte-level BPE, `tokenizer`, whose ``tokenizer.json`` bytes are the data set's
``tokenizer`` array, so the root commits to the tokenizer as well as the ids), a raw
token file (nanoGPT-style flat binary of one integer dtype), ``.npy`` files (1-D
tokens, or features with a labels file), images (an (N, C, H, W) ``.npy`` with a labels
file; see `image_dataset` for the normalisation), and synthetic classification sets
(features or images) made from the job seed.

Sampling
--------
`batch_for_step(step)` draws from the counter-based RNG with key = job seed, stream
= `STREAM_DATA` and counter = step * 2^20 (blocks), so it needs nothing but the
dataset, the seed and the step number. Language model: ``batch_size`` start offsets
uniform over the positions that leave room for ``context + 1`` tokens; ``x`` is the
window, ``y`` the window shifted by one. Classification: ``batch_size`` example
indices uniform over [0, N) (with replacement).

Philox streams used by training programs: 1 data order, 2 parameter initialisation,
3 the synthetic data sets, 2^32 + site for dropout masks (`optim.DROPOUT_STREAM_BASE`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from . import rng, tokenizer
from .hashing import hash_tensor, state_root
from .merkle import leaf_hash, merkle_root_of_hashes

SHARD_BYTES = 1 << 16
STREAM_DATA = 1
STREAM_INIT = 2
STREAM_SYNTHETIC = 3
DATA_COUNTER_SHIFT = 20  # blocks per step's batch: 2^20 (two indices per block)
BUILTIN_DIR = Path(__file__).resolve().parent / "datasets"
BUILTIN = {"sonnets": "sonnets.txt"}


class DataError(ValueError):
    """A data source that cannot be loaded or does not fit the job."""


@dataclass(frozen=True)
class Dataset:
    arrays: Mapping[str, np.ndarray]
    vocab: str = ""  # char-level text: token id i is vocab[i]
    tokenizer_json: bytes = b""  # BPE text: the tokenizer that made the ids
    vocab_size: int = 0  # language data
    n_classes: int = 0  # classification data
    _root: list = field(default_factory=list, repr=False, compare=False)

    @property
    def is_language(self) -> bool:
        return "tokens" in self.arrays

    @property
    def n_features(self) -> int:
        """Features of (N, D) data; channels of (N, C, H, W) images."""
        return int(self.arrays["x"].shape[1])

    def __len__(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0])

    def root(self) -> bytes:
        if not self._root:
            self._root.append(dataset_root(self.arrays))
        return self._root[0]

    def decode(self, ids: np.ndarray) -> str:
        if self.tokenizer_json:
            return tokenizer.decode(self.tokenizer_json, ids)
        if not self.vocab:
            return " ".join(str(int(i)) for i in ids)
        return "".join(self.vocab[int(i)] for i in ids)


def shard_rows(array: np.ndarray) -> int:
    row_bytes = max(1, array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64)))  # exact: ints
    return max(1, SHARD_BYTES // row_bytes)


def shard_hashes(array: np.ndarray) -> list[bytes]:
    """hash_tensor of each fixed-size shard along the first axis."""
    rows = shard_rows(array)
    return [hash_tensor(array[i:i + rows]) for i in range(0, max(len(array), 1), rows)]


def array_root(array: np.ndarray) -> bytes:
    return merkle_root_of_hashes([leaf_hash(h) for h in shard_hashes(array)])


def dataset_root(arrays: Mapping[str, np.ndarray]) -> bytes:
    return state_root({name: array_root(array) for name, array in arrays.items()})


# --- loading -----------------------------------------------------------------------


def text_dataset(text: str) -> Dataset:
    """Char-level tokens of a text; the vocabulary is its sorted set of characters."""
    vocab = "".join(sorted(set(text)))
    if len(vocab) < 2:
        raise DataError("a text needs at least two distinct characters")
    lookup = {c: i for i, c in enumerate(vocab)}
    dtype = np.uint16 if len(vocab) <= 1 << 16 else np.int32
    tokens = np.fromiter((lookup[c] for c in text), dtype=dtype, count=len(text))
    return Dataset({"tokens": tokens}, vocab=vocab, vocab_size=len(vocab))


def bpe_dataset(text: str, tokenizer_json: bytes, vocab_size: int, where: str = "data.tokenizer") -> Dataset:
    """BPE tokens of a text; the tokenizer's bytes are an array of the data set (bound by its root)."""
    try:
        tokens = tokenizer.encode(tokenizer_json, text, vocab_size, where)
    except tokenizer.TokenizerError as exc:
        raise DataError(str(exc)) from None
    if len(tokens) < 2:
        raise DataError("the text gives fewer than two BPE tokens")
    arrays = {"tokens": tokens, "tokenizer": np.frombuffer(tokenizer_json, dtype=np.uint8).copy()}
    return Dataset(arrays, vocab_size=vocab_size, tokenizer_json=bytes(tokenizer_json))


def tokenized_text(text: str, data_spec, base_dir: str | Path) -> Dataset:
    """The data set of a text under the job's tokenizer: "char", "bpe" (trained here) or a tokenizer.json."""
    choice = getattr(data_spec, "tokenizer", "char")
    if choice == "char":
        return text_dataset(text)
    if choice == "bpe":
        try:
            raw = tokenizer.train_bpe(text, data_spec.vocab_size)
        except tokenizer.TokenizerError as exc:
            raise DataError(str(exc)) from None
        return bpe_dataset(text, raw, data_spec.vocab_size)
    path = _resolve(choice, base_dir)
    if not path.exists():
        raise DataError(f"data.tokenizer: no such file {path}")
    return bpe_dataset(text, path.read_bytes(), data_spec.vocab_size, f"data.tokenizer ({path.name})")


def _resolve(path: str, base_dir: str | Path) -> Path:
    full = Path(path).expanduser()
    return full if full.is_absolute() else Path(base_dir) / full


@functools.cache
def builtin_text(name: str) -> str:
    if name not in BUILTIN:
        raise DataError(f"no built-in data set {name!r} (have: {', '.join(sorted(BUILTIN))})")
    return (BUILTIN_DIR / BUILTIN[name]).read_text(encoding="utf-8")


def token_dataset(tokens: np.ndarray, vocab_size: int) -> Dataset:
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise DataError(f"tokens must be a 1-D integer array, got {tokens.dtype} {tokens.shape}")
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise DataError(f"token ids must lie in [0, {vocab_size}), found {int(tokens.min())}..{int(tokens.max())}")
    return Dataset({"tokens": np.ascontiguousarray(tokens)}, vocab_size=vocab_size)


def classification_dataset(x: np.ndarray, y: np.ndarray, n_classes: int | None = None) -> Dataset:
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
        raise DataError(f"features must be (N, D) and labels (N,), got {x.shape} and {y.shape}")
    if x.dtype.kind != "f":
        raise DataError(f"features must be floating point, got {x.dtype}")
    if y.dtype.kind not in "iu":
        raise DataError(f"labels must be integers, got {y.dtype}")
    x = np.ascontiguousarray(x, dtype=np.float32)  # float64 -> float32 rounds each value once
    y, classes = _labels(y, n_classes)
    return Dataset({"x": x, "y": y}, n_classes=classes)


def _labels(y: np.ndarray, n_classes: int | None) -> tuple[np.ndarray, int]:
    """Labels as int64 and the number of classes (given, or the largest label + 1)."""
    y = np.ascontiguousarray(y, dtype=np.int64)
    if y.size and int(y.min()) < 0:
        raise DataError("labels must be non-negative")
    classes = int(y.max()) + 1 if n_classes is None else n_classes
    if y.size and int(y.max()) >= classes:
        raise DataError(f"labels must lie in [0, {classes})")
    return y, classes


IMAGE_DTYPES = ("uint8", "float32")


def image_dataset(x: np.ndarray, y: np.ndarray, mean: tuple[float, ...] = (), std: tuple[float, ...] = (),
                  n_classes: int | None = None) -> Dataset:
    """Images (N, C, H, W), uint8 or float32, with integer labels (N,), normalised exactly.

    uint8 values become float32(v) / float32(255) (one correctly rounded division); float32
    values are taken as they are. With `mean` and `std` (one value per channel, each
    rounded once to float32), channel c then becomes (x - mean[c]) / std[c]: a float32
    subtraction and a float32 division, each correctly rounded. The data set holds the
    normalised float32 images, so its root commits to the values the model sees.
    """
    if x.ndim != 4:
        raise DataError(f"images must be (N, C, H, W), got shape {x.shape}")
    if x.dtype.name not in IMAGE_DTYPES:
        raise DataError(f"images must be {' or '.join(IMAGE_DTYPES)}, got {x.dtype}")
    if mean and len(mean) != x.shape[1]:
        raise DataError(f"data.mean has {len(mean)} values for images of {x.shape[1]} channels")
    if x.dtype == np.uint8:
        x = np.divide(x.astype(np.float32), np.float32(255.0), dtype=np.float32)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if mean:
        m = np.asarray(mean, dtype=np.float32).reshape(-1, 1, 1)
        s = np.asarray(std, dtype=np.float32).reshape(-1, 1, 1)
        x = np.divide(np.subtract(x, m, dtype=np.float32), s, dtype=np.float32)
    if y.ndim != 1 or len(y) != len(x):
        raise DataError(f"labels must be (N,) for {len(x)} images, got {y.shape}")
    if y.dtype.kind not in "iu":
        raise DataError(f"labels must be integers, got {y.dtype}")
    y, classes = _labels(y, n_classes)
    return Dataset({"x": x, "y": y}, n_classes=classes)


def synthetic_images(seed: int, n_samples: int, channels: int, size: int, n_classes: int) -> Dataset:
    """Noisy copies of one random template per class, (N, channels, size, size), from the job seed.

    Templates: uniform in [-1, 1) per pixel. Noise: Irwin-Hall sums of four 24-bit
    uniforms (exact in float64), centred and scaled by 0.5; one rounding to float32.
    Example i has class i % n_classes.
    """
    shape = (channels, size, size)
    templates = rng.uniform_f32(seed, STREAM_SYNTHETIC, (n_classes, *shape), counter=0).astype(np.float64)
    templates = templates * 2.0 - 1.0  # exact: scaling by 2 and subtracting 1 in [0, 2)
    labels = np.arange(n_samples, dtype=np.int64) % n_classes
    u = rng.uniform_f32(seed, STREAM_SYNTHETIC, (4, n_samples, *shape), counter=2 << 40).astype(np.float64)
    noise = ((u[0] + u[1]) + (u[2] + u[3])) - 2.0  # exact: 24-bit fractions, sums below 2^2
    x = templates[labels] + noise * 0.5
    return Dataset({"x": x.astype(np.float32), "y": labels}, n_classes=n_classes)


def synthetic_classification(seed: int, n_samples: int, n_features: int, n_classes: int) -> Dataset:
    """Two Gaussian-like clusters per class, made from the job seed with integer RNG bits.

    Centres: uniform in [-1, 1) per feature. Noise: Irwin-Hall sums of four 24-bit
    uniforms (exact in float64), centred and scaled by 0.3; one rounding to float32.
    Example i has class i % n_classes and one of its class's two clusters.
    """
    centres = rng.uniform_f32(seed, STREAM_SYNTHETIC, (2 * n_classes, n_features), counter=0).astype(np.float64)
    centres = centres * 2.0 - 1.0  # exact: scaling by 2 and subtracting 1 in [0, 2)
    which = rng.randint(seed, STREAM_SYNTHETIC, (n_samples,), 2, counter=1 << 40)
    labels = np.arange(n_samples, dtype=np.int64) % n_classes
    u = rng.uniform_f32(seed, STREAM_SYNTHETIC, (4, n_samples, n_features), counter=2 << 40).astype(np.float64)
    noise = ((u[0] + u[1]) + (u[2] + u[3])) - 2.0  # exact: 24-bit fractions, sums below 2^2
    x = centres[2 * labels + which] + noise * 0.3
    return Dataset({"x": x.astype(np.float32), "y": labels}, n_classes=n_classes)


def load_dataset(data_spec, seed: int, base_dir: str | Path = ".") -> Dataset:
    """The data set a job's [data] table names (see `jobspec.DataSpec`)."""
    kind = data_spec.kind
    if kind == "synthetic":
        return synthetic_classification(seed, data_spec.n_samples, data_spec.n_features, data_spec.n_classes)
    if kind == "synthetic-images":
        return synthetic_images(seed, data_spec.n_samples, data_spec.channels, data_spec.size, data_spec.n_classes)
    path = data_spec.path
    if kind == "text" and path.startswith("builtin:"):
        return tokenized_text(builtin_text(path.removeprefix("builtin:")), data_spec, base_dir)
    full = _resolve(path, base_dir)
    if not full.exists():
        raise DataError(f"data.path: no such file {full}")
    if kind == "text":
        try:
            text = full.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"data.path: {full.name} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        return tokenized_text(text, data_spec, base_dir)
    if kind == "tokens":
        dtype = np.dtype(data_spec.dtype).newbyteorder("<")
        if full.stat().st_size % dtype.itemsize:  # np.fromfile would drop the partial token silently
            raise DataError(f"data.path: {full.name} holds {full.stat().st_size} bytes, not a whole number of "
                            f"{data_spec.dtype} tokens (truncated?)")
        return token_dataset(np.fromfile(full, dtype=dtype), data_spec.vocab_size)
    arr = load_npy(full, "data.path")
    if kind == "images":
        labels = _resolve(data_spec.labels, base_dir)
        if not labels.exists():
            raise DataError(f"data.labels: no such file {labels}")
        return image_dataset(arr, load_npy(labels, "data.labels"), data_spec.mean, data_spec.std)
    if not data_spec.labels:
        return token_dataset(arr, data_spec.vocab_size)
    labels = _resolve(data_spec.labels, base_dir)
    if not labels.exists():
        raise DataError(f"data.labels: no such file {labels}")
    return classification_dataset(arr, load_npy(labels, "data.labels"))


def load_npy(path: Path, field: str) -> np.ndarray:
    """One array from a .npy file; a truncated or malformed file (or an .npz, or pickled objects)
    is a DataError naming ``field``, never NumPy's own exception."""
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        raise DataError(f"{field}: {path.name} is not a readable .npy file ({exc})") from None
    if not isinstance(arr, np.ndarray):
        arr.close()
        raise DataError(f"{field}: {path.name} is an .npz archive, not one .npy array")
    return arr


# --- sampling ----------------------------------------------------------------------


def batch_indices(seed: int, step: int, batch_size: int, high: int) -> np.ndarray:
    """`batch_size` int64 values uniform in [0, high), keyed by (seed, STREAM_DATA, step)."""
    if not 1 <= high <= 1 << 32:
        raise DataError(f"cannot sample from {high} positions (1 to 2^32 supported)")
    if batch_size > 1 << (DATA_COUNTER_SHIFT + 1):
        raise DataError(f"batch size {batch_size} exceeds {1 << (DATA_COUNTER_SHIFT + 1)}")
    return rng.randint(seed, STREAM_DATA, (batch_size,), high, counter=step << DATA_COUNTER_SHIFT)


def language_batch(dataset: Dataset, seed: int, step: int, batch_size: int, context: int) -> dict[str, np.ndarray]:
    tokens = dataset.arrays["tokens"]
    positions = len(tokens) - context
    if positions < 1:
        raise DataError(f"the data has {len(tokens)} tokens; a context of {context} needs at least {context + 1}")
    starts = batch_indices(seed, step, batch_size, positions)
    window = starts[:, None] + np.arange(context + 1, dtype=np.int64)[None, :]
    rows = tokens[window].astype(np.int64)
    return {"x": np.ascontiguousarray(rows[:, :-1]), "y": np.ascontiguousarray(rows[:, 1:])}


def classification_batch(dataset: Dataset, seed: int, step: int, batch_size: int) -> dict[str, np.ndarray]:
    idx = batch_indices(seed, step, batch_size, len(dataset))
    return {"x": dataset.arrays["x"][idx], "y": dataset.arrays["y"][idx]}
