"""Trainer and auditor on different configurations: identical state hashes with the log, the
cheated step found by step-level comparison, checkpoints, jobs on disk."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from repops_cupy.roundlog import Auditor, RoundLogTrainer, RunConfig, StepLog
from repops_cupy.roundlog.batches import SyntheticTokens
from repops_cupy.roundlog.torch_models import TinyGPT
from repops_cupy.roundlog.roundlog_job import Job, replay_job, train_job
from repops_cupy.roundlog.state import trace_root

PAIRS = {
    "threads": dict(threads=2),
    "numpy": dict(threads=1, backend="numpy"),
    "micro": dict(threads=1, micro_batch=2),
}
STEPS = 3
JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"


def _train(setup, config, steps=STEPS, cheat=None):
    factory, opt, data = setup
    tr = RoundLogTrainer(factory, opt, data, config)
    hashes, logs = [tr.state_hash()], []
    for i in range(1, steps + 1):
        h, log = tr.step(i)
        if cheat is not None and cheat(i, tr):
            h = tr.state_hash()
        hashes.append(h)
        logs.append(log)
    return tr, hashes, logs


@pytest.mark.parametrize("model", ["cnn", "gpt"])
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_replay_with_the_log_matches_on_another_configuration(setup_of, thresholds, model, pair):
    setup = setup_of(model)
    tr, hashes, logs = _train(setup, RunConfig(threads=1, thresholds=thresholds))
    auditor = Auditor(*setup, RunConfig(thresholds=thresholds, **PAIRS[pair]))
    replayed = [auditor.state_hash()]
    for i, log in enumerate(logs, 1):
        replayed.append(auditor.replay_step(i, log))
        rep = auditor.report()
        assert rep["implausible"] == 0 and rep["breaches"] == 0, rep
        assert replayed[-1] == hashes[i], f"step {i} differs: {rep}"
    assert trace_root(replayed) == trace_root(hashes)
    # the state really is float32 and changed
    state = tr.named_state()
    assert all(a.dtype != np.float64 for a in state.values())
    assert hashes[0] != hashes[-1]


def test_log_made_with_micro_batches_replays_on_the_whole_batch(setup_of, thresholds):
    setup = setup_of("gpt")
    _, hashes, logs = _train(setup, RunConfig(threads=1, micro_batch=1, backend="numpy", thresholds=thresholds))
    auditor = Auditor(*setup, RunConfig(threads=1, thresholds=thresholds))
    for i, log in enumerate(logs, 1):
        assert auditor.replay_step(i, log) == hashes[i]
    whole = StepLog.decode(_train(setup, RunConfig(threads=1, thresholds=thresholds), steps=1)[2][0])
    assert StepLog.decode(logs[0]).stream_length == whole.stream_length  # one canonical stream


def test_log_carries_decisions_that_plain_rounding_gets_wrong(setup_of, thresholds):
    """torch's fused attention backward leaves float64 noise where the NumPy route computes
    exact zeros (first query of causal attention): plain rounding differs there, the log fixes it.
    (The tiniest GPT happens to show none; d=32 with 32 positions does.)"""
    def factory():
        torch.manual_seed(0)
        return TinyGPT(vocab=32, d=32, heads=2, layers=1, block=32)

    setup = (factory, {"name": "adamw", "lr": 3e-3}, SyntheticTokens(4, vocab=32, block=32, seed=3))
    _, hashes, logs = _train(setup, RunConfig(threads=1, thresholds=thresholds), steps=2)
    with_log = Auditor(*setup, RunConfig(threads=1, backend="numpy", thresholds=thresholds))
    corrections = 0
    for i, log in enumerate(logs, 1):
        assert with_log.replay_step(i, log) == hashes[i]
        corrections += with_log.report()["corrections"]
    assert corrections > 0


def test_replay_without_the_log_reports_breaches(setup_of, thresholds):
    setup = setup_of("gpt")
    _, hashes, logs = _train(setup, RunConfig(threads=1, thresholds=thresholds), steps=1)
    no_log = Auditor(*setup, RunConfig(threads=1, backend="numpy", thresholds=thresholds))
    no_log.replay_step(1, logs[0], apply_log=False)
    assert no_log.report()["breaches"] > 0  # values the trainer logged, seen unlogged


@pytest.mark.parametrize("cheat_kind", ["weight", "lr"])
def test_cheated_step_is_the_first_differing_state_hash(setup_of, thresholds, cheat_kind):
    setup = setup_of("cnn")
    config = RunConfig(threads=1, thresholds=thresholds)
    _, honest, _ = _train(setup, config, steps=5)
    cheat_step = 3

    def cheat(i, tr):
        if cheat_kind == "weight" and i == cheat_step:
            with torch.no_grad():
                w = tr.params["head.weight"]
                w[0, 0] = (w[0, 0] + 1e-3).to(torch.float32).to(torch.float64)
            return True
        if cheat_kind == "lr" and i == cheat_step - 1:
            tr.optimizer.hyper["lr"] *= 1.5  # applies from the next step on
        return False

    _, cheater, cheater_logs = _train(setup, config, steps=5, cheat=cheat)
    differing = [i for i in range(6) if honest[i] != cheater[i]]
    assert differing[0] == cheat_step and differing == list(range(cheat_step, 6))
    # an auditor replaying the cheater's own logs from the agreed start finds the same step
    auditor = Auditor(*setup, RunConfig(threads=1, backend="numpy", thresholds=thresholds))
    first = next(i for i in range(1, 6) if auditor.replay_step(i, cheater_logs[i - 1]) != cheater[i])
    assert first == cheat_step


def test_replay_from_a_checkpoint(setup_of, thresholds, tmp_path):
    setup = setup_of("cnn")
    tr = RoundLogTrainer(*setup, RunConfig(threads=1, thresholds=thresholds))
    logs, hashes = {}, {}
    for i in range(1, 5):
        hashes[i], logs[i] = tr.step(i)
        if i == 2:
            assert tr.save_checkpoint(tmp_path / "c2.safetensors") == hashes[2]
    auditor = Auditor(*setup, RunConfig(threads=1, micro_batch=4, backend="numpy", thresholds=thresholds))
    assert auditor.load_checkpoint(tmp_path / "c2.safetensors") == hashes[2]
    for i in (3, 4):
        assert auditor.replay_step(i, logs[i]) == hashes[i]
    with pytest.raises(ValueError):
        auditor.replay_step(6, logs[4])  # steps must follow the state


def test_tampered_log_is_caught(setup_of, thresholds):
    setup = setup_of("gpt")
    _, hashes, logs = _train(setup, RunConfig(threads=1, thresholds=thresholds), steps=1)
    log = StepLog.decode(logs[0])
    assert log.bit_pos.size > 0
    # move every bit entry to a position far from any midpoint: the auditor flags them
    moved = StepLog(log.step, log.stream_length, np.unique((log.bit_pos + 1) % log.stream_length)[: log.bit_pos.size],
                    log.bit_up, log.value_pos, log.value)
    moved.bit_up = moved.bit_up[: moved.bit_pos.size]
    moved.value_pos = np.setdiff1d(moved.value_pos, moved.bit_pos)
    moved.value = log.value[np.isin(log.value_pos, moved.value_pos)]
    auditor = Auditor(*setup, RunConfig(threads=1, thresholds=thresholds))
    assert auditor.replay_step(1, moved.encode()) != hashes[1]
    assert auditor.report()["implausible"] > 0


def _job_raw(steps=4, interval=2):
    return {
        "job": {"name": "tiny-cnn", "seed": 5, "steps": steps, "batch_size": 8, "checkpoint_interval": interval},
        "model": {"kind": "torch-roundlog", "module": "repops_cupy.roundlog.torch_models:SmallCNN",
                  "args": {"in_channels": 3, "widths": [4, 8, 8], "num_classes": 5, "bn_group": 2}},
        "data": {"kind": "synthetic-images", "channels": 3, "size": 8, "num_classes": 5},
        "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9},
    }


def test_job_writes_checkpoints_logs_and_trace_and_replays(tmp_path):
    raw = _job_raw()
    run = tmp_path / "run"
    train_job(raw, run)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step_000000.safetensors", "step_000002.safetensors", "step_000004.safetensors"]
    assert len(list((run / "logs").iterdir())) == 4
    on_disk = json.loads((run / "trace.json").read_text())
    assert on_disk["trace_root"] == trace_root([bytes.fromhex(c["state_hash"]) for c in on_disk["checkpoints"]]).hex()
    assert [c["step"] for c in on_disk["checkpoints"]] == [0, 2, 4]
    result = replay_job(raw, run, start=2, backend="numpy", micro_batch=4)
    assert result["first_mismatch"] is None
    assert result["checkpoints"][4] == on_disk["checkpoints"][2]["state_hash"]


def test_job_cheat_is_located_by_replay(tmp_path):
    raw = _job_raw()

    def cheat(i, tr):
        if i == 3:
            with torch.no_grad():
                b = tr.params["head.bias"]
                b[1] = (b[1] + 0.25).to(torch.float32).to(torch.float64)

    train_job(raw, tmp_path / "cheat", after_step=cheat)
    result = replay_job(raw, tmp_path / "cheat", start=2, backend="numpy")
    assert result["first_mismatch"] == 3
    assert [s["match"] for s in result["steps"]] == [False, False]


def test_job_spec_files_load():
    for name in ("cnn", "gpt"):
        job = Job(JOBS / f"{name}-roundlog.toml")
        model = job.model_factory()()
        assert sum(p.numel() for p in model.parameters()) > 1000
        assert job.checkpoint_steps()[0] == 0 and job.checkpoint_steps()[-1] == job.steps


def test_an_escaped_flip_is_reported_at_its_site(setup_of, thresholds, monkeypatch):
    """An auditor whose products stray far beyond the bound (a broken BLAS, simulated):
    its state hash differs and the site digests name the first site that went wrong."""
    setup = setup_of("gpt")
    config = RunConfig(threads=1, thresholds=thresholds, site_digests=True)
    tr = RoundLogTrainer(*setup, config)
    h, log = tr.step(1)
    sites = tr.site_digests()
    honest = Auditor(*setup, RunConfig(threads=1, backend="numpy", thresholds=thresholds, site_digests=True))
    assert honest.replay_step(1, log, site_digests=sites) == h
    assert "first_differing_site" not in honest.report()

    from repops_cupy.roundlog import npbackend
    exact_linear = npbackend.ROUTES["linear"]
    monkeypatch.setitem(npbackend.ROUTES, "linear", lambda *a, **k: exact_linear(*a, **k) * (1 + 2.0 ** -30))
    broken = Auditor(*setup, RunConfig(threads=1, backend="numpy", thresholds=thresholds, site_digests=True))
    assert broken.replay_step(1, log, site_digests=sites) != h
    index, key = broken.report()["first_differing_site"]
    assert key == "linear:out0"
    assert [k for k, _ in tr.last.site_digests][index] == "linear:out0"
