"""A rounding-log job trains on the client's own data: token arrays, images with labels, text
with a tokenizer, read by the graph-mode jobs' rules (`jobspec.parse_data`, `data.load_dataset`)
and sampled as they are; a malformed or truncated file is refused by name when the job loads."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from repops_cupy import data
from repops_cupy.roundlog.roundlog_job import Job, RoundLogJobError

JOB = """\
[job]
seed = 4
steps = 3
batch_size = 6
checkpoint_interval = 1

[model]
kind = "torch-roundlog"
module = "tests.node.roundlog_test_model:TinyTanhNet"

[model.args]
in_features = 32
hidden = 8
num_classes = 3

[optimizer]
kind = "sgd"
lr = 0.05

[data]
"""
IMAGES = 'kind = "images"\npath = "images.npy"\nlabels = "labels.npy"\nmean = [0.5, 0.5]\nstd = [0.25, 0.25]\n'
TOKENS = 'kind = "npy"\npath = "tokens.npy"\ncontext = 5\nvocab_size = 20\n'


def write(tmp_path, data_table: str, name: str = "job.toml"):
    path = tmp_path / name
    path.write_text(JOB + data_table)
    return path


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(5)
    np.save(tmp_path / "images.npy", rng.integers(0, 256, (30, 2, 4, 4), dtype=np.uint8))
    np.save(tmp_path / "labels.npy", (np.arange(30) % 3).astype(np.int64))
    np.save(tmp_path / "tokens.npy", rng.integers(0, 20, 200).astype(np.uint16))
    return tmp_path


def test_image_batches_are_the_graph_mode_samples_of_the_normalised_images(files):
    job = Job(write(files, IMAGES))
    images = np.load(files / "images.npy")
    expected = data.classification_batch(data.image_dataset(images, np.load(files / "labels.npy"), (0.5, 0.5),
                                                            (0.25, 0.25)), 4, 2, 6)
    x, y = job.data.batch(2)
    assert x.dtype == torch.float64 and y.dtype == torch.int64 and x.shape == (6, 2, 4, 4)
    assert np.array_equal(x.numpy(), expected["x"].astype(np.float64)) and np.array_equal(y.numpy(), expected["y"])
    again = Job(write(files, IMAGES, "again.toml")).data.batch(2)  # another load, the same batch
    assert torch.equal(again[0], x) and torch.equal(again[1], y)
    assert not torch.equal(job.data.batch(3)[0], x)
    assert job.data.dataset.root() == data.load_dataset(job.data_spec, 4, files).root()


def test_token_batches_are_windows_of_the_client_tokens(files):
    job = Job(write(files, TOKENS))
    expected = data.language_batch(data.token_dataset(np.load(files / "tokens.npy"), 20), 4, 1, 6, 5)
    x, y = job.data.batch(1)
    assert x.shape == y.shape == (6, 5) and x.dtype == torch.int64
    assert np.array_equal(x.numpy(), expected["x"]) and np.array_equal(y.numpy(), expected["y"])
    assert np.array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])  # y is x shifted by one
    assert torch.equal(Job(write(files, TOKENS, "again.toml")).data.batch(1)[0], x)
    assert job.data.vocab == 20


def test_text_with_a_tokenizer_file_reads_it_as_a_graph_mode_job_does(tmp_path):
    from repops_cupy.tokenizer import train_bpe

    text = "the quick brown fox jumps over the lazy dog, " * 20
    (tmp_path / "corpus.txt").write_text(text)
    (tmp_path / "tok.json").write_bytes(train_bpe(text, 300))
    job = Job(write(tmp_path, 'kind = "text"\npath = "corpus.txt"\ncontext = 4\ntokenizer = "tok.json"\n'
                               'vocab_size = 300\n'))
    assert "tokenizer" in job.data.dataset.arrays  # the tokenizer's bytes are under the data root
    assert job.data.batch(1)[0].shape == (6, 4)


def _npz(path):
    with open(path, "wb") as f:  # np.savez would add .npz to a name
        np.savez(f, a=np.zeros(3))


def _truncate(path, keep: int):
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("damage, match", [
    (lambda d: _truncate(d / "images.npy", 300), r"data\.path: images\.npy is not a readable \.npy file"),
    (lambda d: _truncate(d / "images.npy", 40), r"data\.path: images\.npy is not a readable \.npy file"),
    (lambda d: _truncate(d / "labels.npy", 130), r"data\.labels: labels\.npy is not a readable \.npy file"),
    (lambda d: (d / "images.npy").write_bytes(b"not an array at all"), r"data\.path: .*not a readable \.npy"),
    (lambda d: (d / "images.npy").write_bytes(b""), r"data\.path: .*not a readable \.npy"),
    (lambda d: _npz(d / "images.npy"), r"data\.path: images\.npy is an \.npz archive"),
    (lambda d: np.save(d / "images.npy", np.zeros((30, 32))), r"images must be \(N, C, H, W\)"),
    (lambda d: np.save(d / "labels.npy", np.arange(30) % 5), r"model\.args\.num_classes: 3 but the labels reach class 4"),
    (lambda d: np.save(d / "labels.npy", np.arange(29) % 3), r"labels must be \(N,\) for 30 images"),
    ((lambda d: (d / "labels.npy").unlink()), r"data\.labels: no such file"),
])
def test_a_damaged_image_file_is_refused_by_name(files, damage, match):
    damage(files)
    with pytest.raises(RoundLogJobError, match=match):
        Job(write(files, IMAGES))


def test_damaged_or_too_short_token_data_is_refused_by_name(files):
    np.save(files / "tokens.npy", np.arange(4, dtype=np.uint16))
    with pytest.raises(RoundLogJobError, match="a context of 5 needs at least 6"):
        Job(write(files, TOKENS))
    np.save(files / "tokens.npy", np.full(50, 25, dtype=np.uint16))
    with pytest.raises(RoundLogJobError, match=r"token ids must lie in \[0, 20\)"):
        Job(write(files, TOKENS))
    (files / "raw.bin").write_bytes(np.arange(50, dtype="<u2").tobytes()[:-1])  # half a token at the end
    with pytest.raises(RoundLogJobError, match="raw.bin holds 99 bytes, not a whole number of uint16 tokens"):
        Job(write(files, 'kind = "tokens"\npath = "raw.bin"\ncontext = 5\nvocab_size = 64\n'))
    with pytest.raises(RoundLogJobError, match="data.colour: unknown field"):
        Job(write(files, TOKENS + 'colour = "red"\n'))
