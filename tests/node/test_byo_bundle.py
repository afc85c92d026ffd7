"""A bring-your-own job's bundle: the text, the tokenizer.json and the initial weights travel as files
of the bundle, and the job installed from it is the client's job (identity, data root, initial state)."""
from __future__ import annotations

import pytest

from node.blobs import blob_id_of
from node.roles.jobfiles import BundleError, decode_bundle, encode_bundle, install_job, load_training, prepare_bundle
from repops_cupy.checkpoint import state_hash
from repops_cupy.jobspec import load_job
from repops_cupy.models import build_network, init_params
from repops_cupy.tokenizer import train_bpe
from repops_cupy.train import TrainingProgram
from repops_cupy.weights import save_weights

from .test_byo_network import BYO_JOB, TEXT, write_byo_job


def _same_job(a, b):
    assert a.identity() == b.identity()
    assert a.dataset.root() == b.dataset.root()
    assert state_hash(a.initial_state()) == state_hash(b.initial_state())


def test_bpe_trained_on_the_text_and_weights_travel_in_the_bundle(tmp_path):
    (tmp_path / "client").mkdir()
    job_file = write_byo_job(tmp_path / "client")
    spec = load_job(job_file)
    toml_text, files = prepare_bundle(spec)
    assert sorted(files) == ["data.txt", "init.safetensors"]
    assert 'tokenizer = "bpe"' in toml_text and 'init = "init.safetensors"' in toml_text and "tie_head = true" in toml_text
    fake_ids = {name: bytes([i]) * 32 for i, name in enumerate(files)}
    assert decode_bundle(encode_bundle(toml_text, fake_ids)) == (toml_text, fake_ids)
    installed = install_job(tmp_path / "provider", toml_text, files)
    _same_job(TrainingProgram(spec), load_training(installed))
    # the weights' hash in the job identity is the id of the blob they travel as
    assert spec.model.init_hash == blob_id_of(files["init.safetensors"].read_bytes()).hex()


def test_a_named_tokenizer_file_travels_too_and_other_weights_make_another_job(tmp_path):
    client = tmp_path / "client"
    client.mkdir()
    write_byo_job(client)
    (client / "tok.json").write_bytes(train_bpe(TEXT, 300))
    job_file = client / "named.toml"
    job_file.write_text(BYO_JOB.replace('tokenizer = "bpe"', 'tokenizer = "tok.json"'))
    spec = load_job(job_file)
    toml_text, files = prepare_bundle(spec)
    assert sorted(files) == ["data.txt", "init.safetensors", "tokenizer.json"]
    installed = load_training(install_job(tmp_path / "provider", toml_text, files))
    _same_job(TrainingProgram(spec), installed)
    # a provider that swapped the weights file builds a job whose identity and initial state differ
    other = tmp_path / "other"
    other.mkdir()
    net = build_network(spec.model, vocab_size=300, context=8)
    save_weights(other / "w.safetensors", init_params(net, 99))
    swapped = load_training(install_job(other, toml_text, {**files, "init.safetensors": other / "w.safetensors"}))
    assert swapped.identity() != installed.identity()
    assert state_hash(swapped.initial_state()) != state_hash(installed.initial_state())


def test_bundle_file_names_stay_restricted():
    for name in ("init.safetensors", "tokenizer.json", "data.txt", "labels.npy"):
        decode_bundle(encode_bundle("", {name: b"\0" * 32}))
    for name in ("../init.safetensors", "weights.bin", "tokenizer.json.exe"):
        with pytest.raises(BundleError, match="bad name"):
            decode_bundle(encode_bundle("", {name: b"\0" * 32}))
