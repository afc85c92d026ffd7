"""Bring your own job: a BPE tokenizer on the user's text, initial weights from safetensors (ours or GPT-2's layout)."""
import hashlib
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from repops_cupy import ops  # noqa: F401 - fills the registry
from repops_cupy.checkpoint import load_checkpoint
from repops_cupy.data import DataError, builtin_text, load_dataset
from repops_cupy.graph import GraphBuilder, execute
from repops_cupy.jobspec import JobSpecError, load_job, parse_job
from repops_cupy.models import ForwardContext, build_network, count_params, init_params
from repops_cupy.tokenizer import train_bpe
from repops_cupy.train import TrainingProgram, train
from repops_cupy.weights import WeightsError, export_checkpoint, read_safetensors, save_weights, to_gpt2

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 20


def job_raw(text_path, *, tokenizer="bpe", vocab_size=300, init="", tie_head=True, n_positions=0, steps=2):
    data = {"kind": "text", "path": str(text_path), "context": 8, "tokenizer": tokenizer, "vocab_size": vocab_size}
    model = {"kind": "gpt", "d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 64, "tie_head": tie_head}
    if init:
        model["init"] = str(init)
    if n_positions:
        model["n_positions"] = n_positions
    return {"job": {"name": "byo", "seed": 3, "steps": steps, "batch_size": 2, "checkpoint_interval": 1},
            "data": data, "model": model, "optimizer": {"kind": "adamw", "lr": 0.01}}


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


# --- the tokenizer ------------------------------------------------------------------------


def test_bpe_training_is_deterministic_and_bound_into_the_data_root(text_file, tmp_path):
    first, second = train_bpe(TEXT, 300), train_bpe(TEXT, 300)
    assert first == second
    spec = parse_job(job_raw(text_file))
    a, b = load_dataset(spec.data, spec.seed), load_dataset(spec.data, spec.seed)
    assert a.arrays["tokens"].tobytes() == b.arrays["tokens"].tobytes() and a.root() == b.root()
    assert a.arrays["tokenizer"].tobytes() == first
    assert int(a.arrays["tokens"].max()) < 300 and len(a.arrays["tokens"]) < len(TEXT) // 2  # merges happened
    assert a.decode(a.arrays["tokens"][:12]) == TEXT[: len(a.decode(a.arrays["tokens"][:12]))]
    # the same tokenizer named as a file gives the same tokens, and the same data root
    (tmp_path / "tokenizer.json").write_bytes(first)
    named = parse_job(job_raw(text_file, tokenizer="tokenizer.json"), base_dir=tmp_path)
    c = load_dataset(named.data, named.seed, tmp_path)
    assert c.root() == a.root()
    # another text: other tokens, another root
    other = tmp_path / "other.txt"
    other.write_text(TEXT.replace("times", "days"), encoding="utf-8")
    assert load_dataset(parse_job(job_raw(other)).data, 3).root() != a.root()


@pytest.mark.slow  # three interpreters start
def test_bpe_bytes_do_not_depend_on_the_library_threads():
    code = ("import sys, hashlib; from repops_cupy.tokenizer import train_bpe; from repops_cupy.data import builtin_text; "
            "sys.stdout.write(hashlib.sha256(train_bpe(builtin_text('sonnets'), 2000)).hexdigest())")
    here = hashlib.sha256(train_bpe(builtin_text("sonnets"), 2000)).hexdigest()
    for env in ({"RAYON_NUM_THREADS": "1"}, {"RAYON_NUM_THREADS": "2"}, {"TOKENIZERS_PARALLELISM": "false"}):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                             check=True, timeout=120)
        assert out.stdout == here, env


def test_char_stays_the_default_and_bad_tokenizers_are_refused(text_file, tmp_path):
    raw = job_raw(text_file)
    del raw["data"]["tokenizer"], raw["data"]["vocab_size"]
    spec = parse_job(raw)
    assert spec.data.tokenizer == "char" and '"tokenizer"' not in spec.identity()
    with pytest.raises(JobSpecError, match="data.vocab_size: is required"):
        parse_job({**raw, "data": {**raw["data"], "tokenizer": "bpe"}})
    with pytest.raises(DataError, match="at least 256 tokens"):
        load_dataset(parse_job(job_raw(text_file, vocab_size=100)).data, 3)
    with pytest.raises(DataError, match="no such file"):
        load_dataset(parse_job(job_raw(text_file, tokenizer="missing.json")).data, 3, tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="not a readable tokenizer.json"):
        load_dataset(parse_job(job_raw(text_file, tokenizer="bad.json")).data, 3, tmp_path)
    (tmp_path / "big.json").write_bytes(train_bpe(TEXT, 300))
    with pytest.raises(DataError, match="more than data.vocab_size"):
        load_dataset(parse_job(job_raw(text_file, tokenizer="big.json", vocab_size=260)).data, 3, tmp_path)


# --- initial weights ----------------------------------------------------------------------


def _weights_of(spec, seed=99):
    net = build_network(spec.model, vocab_size=spec.data.vocab_size, context=spec.data.context)
    return net, init_params(net, seed)


def test_fine_tuning_starts_from_the_file_and_its_hash_is_in_the_identity(text_file, tmp_path):
    base = parse_job(job_raw(text_file))
    net, weights = _weights_of(base)
    save_weights(tmp_path / "init.safetensors", weights)
    spec = parse_job(job_raw(text_file, init="init.safetensors"), base_dir=tmp_path)
    program = TrainingProgram(spec)
    state = program.initial_state()
    for name, value in weights.items():
        assert state["params/" + name].tobytes() == value.tobytes()
    assert spec.identity() != base.identity() and spec.model.init_hash in spec.identity()
    assert "init.safetensors" not in spec.identity()
    # other weights: another identity
    save_weights(tmp_path / "other.safetensors", _weights_of(base, seed=100)[1])
    other = parse_job(job_raw(text_file, init="other.safetensors"), base_dir=tmp_path)
    assert other.identity() != spec.identity()
    # fine-tune, then export the weights in GPT-2's layout and start again from them
    trace = train(spec, tmp_path / "run")
    assert len(trace.checkpoints) == 3 and all(math.isfinite(x) for x in trace.losses)
    last = tmp_path / "run" / trace.checkpoints[-1]["file"]
    export_checkpoint(last, tmp_path / "tuned.safetensors", layout="gpt2")
    assert "h.1.attn.c_attn.weight" in read_safetensors(tmp_path / "tuned.safetensors")
    again = TrainingProgram(parse_job(job_raw(text_file, init="tuned.safetensors"), base_dir=tmp_path))
    tuned, _, _ = load_checkpoint(last)
    start = again.initial_state()
    for name in weights:
        assert start["params/" + name].tobytes() == tuned["params/" + name].tobytes()


def _gpt2_reference_logits(t, ids, n_layers, n_heads):
    """GPT-2's forward written from its own layout (Conv1D: x @ W + b), in float64 torch."""
    g = {k: torch.from_numpy(v.astype(np.float64)) for k, v in t.items()}
    T = ids.shape[1]
    x = g["wte.weight"][ids] + g["wpe.weight"][:T]
    d = x.shape[-1]
    hd = d // n_heads
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), g[p + ".weight"], g[p + ".bias"], 1e-5)  # noqa: E731
    for i in range(n_layers):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ g[p + "attn.c_attn.weight"] + g[p + "attn.c_attn.bias"]
        q, k, v = (z.reshape(1, T, n_heads, hd).transpose(1, 2) for z in qkv.split(d, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(1, T, d)
        x = x + y @ g[p + "attn.c_proj.weight"] + g[p + "attn.c_proj.bias"]
        h = ln(x, p + "ln_2") @ g[p + "mlp.c_fc.weight"] + g[p + "mlp.c_fc.bias"]
        h = torch.nn.functional.gelu(h, approximate="tanh")
        x = x + h @ g[p + "mlp.c_proj.weight"] + g[p + "mlp.c_proj.bias"]
    return (ln(x, "ln_f") @ g["wte.weight"].T).numpy()


def test_gpt2_layout_loads_into_the_same_function(text_file, tmp_path):
    # a longer position table than the context: only its first rows are used, as in GPT-2
    spec0 = parse_job(job_raw(text_file, n_positions=32))
    net, ours = _weights_of(spec0)
    gpt2 = {"transformer." + k: v for k, v in to_gpt2(ours).items()}
    gpt2["lm_head.weight"] = ours["wte.weight"]
    gpt2["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 32, 32), np.float32))  # a mask buffer, skipped
    save_file(gpt2, str(tmp_path / "gpt2.safetensors"))
    spec = parse_job(job_raw(text_file, n_positions=32, init="gpt2.safetensors"), base_dir=tmp_path)
    program = TrainingProgram(spec)
    loaded = {k.removeprefix("params/"): v for k, v in program.initial_state().items() if k.startswith("params/")}
    assert set(loaded) == set(ours) and all(loaded[k].tobytes() == ours[k].tobytes() for k in ours)
    assert loaded["wpe.weight"].shape == (32, 16) and "head.weight" not in loaded
    # our traced forward agrees with GPT-2's own (float64 reference) on the GPT-2 tensors
    ids = np.arange(8, dtype=np.int64)[None, :] * 7 % 300
    b = GraphBuilder()
    params = {n: b.leaf("p/" + n, v) for n, v in ours.items()}
    x = b.leaf("ids", ids, "batch")
    graph = b.finish({"logits": program.net.forward(ForwardContext(b, params), "", x)})
    got = execute(graph, {**{"p/" + n: v for n, v in ours.items()}, "ids": ids}).outputs["logits"]
    want = _gpt2_reference_logits({k.removeprefix("transformer."): v for k, v in gpt2.items()}, ids, 2, 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)


@pytest.mark.parametrize("change, message", [
    (lambda w: w.pop("ln_f.bias"), "lacks tensor 'ln_f.bias'"),
    (lambda w: w.update(extra=np.zeros(3, np.float32)), "tensor 'extra' is not a parameter"),
    (lambda w: w.update({"wpe.weight": np.zeros((9, 16), np.float32)}), r"'wpe.weight' has shape \(9, 16\)"),
    (lambda w: w.update({"ln_f.weight": np.arange(16, dtype=np.int32)}), "'ln_f.weight' has dtype int32"),
    (lambda w: w["blocks.1.mlp.0.bias"].__setitem__(5, np.nan), "'blocks.1.mlp.0.bias' holds a NaN"),
    (lambda w: w["wte.weight"].__setitem__((0, 0), np.inf), "'wte.weight' holds a NaN or infinite"),
])
def test_bad_weight_files_are_refused_by_tensor_name(text_file, tmp_path, change, message):
    spec = parse_job(job_raw(text_file))
    _, weights = _weights_of(spec)
    change(weights)
    save_file(weights, str(tmp_path / "w.safetensors"))
    with pytest.raises(WeightsError, match=message):
        TrainingProgram(parse_job(job_raw(text_file, init="w.safetensors"), base_dir=tmp_path))


def test_weight_file_errors_at_parse_time(text_file, tmp_path):
    with pytest.raises(JobSpecError, match="model.init: no such file"):
        parse_job(job_raw(text_file, init="nowhere.safetensors"), base_dir=tmp_path)
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    spec = parse_job(job_raw(text_file, init="junk.safetensors"), base_dir=tmp_path)
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        TrainingProgram(spec)
    tied = parse_job(job_raw(text_file, tie_head=True))
    gpt2 = to_gpt2(_weights_of(tied)[1])
    gpt2["lm_head.weight"] = np.zeros((300, 16), np.float32)
    save_file(gpt2, str(tmp_path / "untied.safetensors"))
    with pytest.raises(WeightsError, match="'lm_head.weight' differs from 'wte.weight'"):
        TrainingProgram(parse_job(job_raw(text_file, init="untied.safetensors"), base_dir=tmp_path))


# --- GPT-2 small ----------------------------------------------------------------------------


def test_gpt2_small_config_has_124m_parameters_counted_without_allocating():
    spec = load_job("scripts/jobs/gpt2-small.toml")
    m = spec.model
    assert (m.n_layers, m.d_model, m.n_heads, m.n_positions, m.tie_head) == (12, 768, 12, 1024, True)
    assert spec.data.vocab_size == 50257 and spec.data.tokenizer == "bpe"
    net = build_network(m, vocab_size=spec.data.vocab_size, context=spec.data.context)
    assert count_params(net) == 124_439_808  # GPT-2 small (tied head)
