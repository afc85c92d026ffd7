"""Data sets are content-addressed; any step's batch is rebuilt from (data, seed, step) alone."""
import numpy as np
import pytest

from repops_cupy import data
from repops_cupy.jobspec import DataSpec


@pytest.fixture(scope="module")
def sonnets():
    return data.text_dataset(data.builtin_text("sonnets"))


def test_shipped_corpus(sonnets):
    assert len(sonnets) == 95728 and sonnets.vocab_size == 62
    assert sonnets.decode(sonnets.arrays["tokens"][:10]) == "THE SONNET"
    assert sonnets.vocab == "".join(sorted(sonnets.vocab))


def test_root_commits_to_every_token(sonnets):
    tokens = sonnets.arrays["tokens"].copy()
    assert data.dataset_root({"tokens": tokens}) == sonnets.root()
    tokens[70000] ^= 1
    assert data.dataset_root({"tokens": tokens}) != sonnets.root()
    rows = data.shard_rows(tokens)
    assert rows * tokens.itemsize == data.SHARD_BYTES
    assert len(data.shard_hashes(tokens)) == -(-len(tokens) // rows)


def test_language_batches_are_keyed_by_seed_and_step(sonnets):
    a = data.language_batch(sonnets, 5, 17, 8, 32)
    assert a["x"].shape == (8, 32) and a["x"].dtype == np.int64
    np.testing.assert_array_equal(a["x"][:, 1:], a["y"][:, :-1])
    again = data.language_batch(sonnets, 5, 17, 8, 32)
    assert all(np.array_equal(a[k], again[k]) for k in a)
    assert not np.array_equal(a["x"], data.language_batch(sonnets, 5, 18, 8, 32)["x"])
    assert not np.array_equal(a["x"], data.language_batch(sonnets, 6, 17, 8, 32)["x"])
    # the first rows of a bigger batch are the smaller batch: rows do not depend on batch size
    np.testing.assert_array_equal(data.language_batch(sonnets, 5, 17, 12, 32)["x"][:8], a["x"])


def test_synthetic_set_is_a_function_of_the_seed():
    a = data.synthetic_classification(3, 500, 6, 4)
    b = data.synthetic_classification(3, 500, 6, 4)
    assert a.root() == b.root() and a.root() != data.synthetic_classification(4, 500, 6, 4).root()
    assert a.arrays["x"].dtype == np.float32 and set(np.unique(a.arrays["y"])) == {0, 1, 2, 3}
    batch = data.classification_batch(a, 3, 9, 16)
    assert batch["x"].shape == (16, 6) and batch["y"].shape == (16,)


def test_user_files(tmp_path):
    (tmp_path / "t.txt").write_text("abcab" * 20)
    spec = DataSpec("text", path="t.txt", context=4)
    ds = data.load_dataset(spec, 0, tmp_path)
    assert ds.vocab == "abc" and ds.vocab_size == 3
    np.arange(50, dtype=np.uint16).tofile(tmp_path / "tok.bin")
    ds = data.load_dataset(DataSpec("tokens", path="tok.bin", context=4, dtype="uint16", vocab_size=50), 0, tmp_path)
    assert list(ds.arrays["tokens"][:3]) == [0, 1, 2]
    with pytest.raises(data.DataError, match="token ids must lie"):
        data.load_dataset(DataSpec("tokens", path="tok.bin", context=4, dtype="uint16", vocab_size=10), 0, tmp_path)
    np.save(tmp_path / "x.npy", np.ones((7, 3)))
    np.save(tmp_path / "y.npy", np.array([0, 1, 2, 0, 1, 2, 0]))
    ds = data.load_dataset(DataSpec("npy", path="x.npy", labels="y.npy"), 0, tmp_path)
    assert ds.n_classes == 3 and ds.arrays["x"].dtype == np.float32
    with pytest.raises(data.DataError, match="no such file"):
        data.load_dataset(DataSpec("text", path="missing.txt", context=4), 0, tmp_path)
