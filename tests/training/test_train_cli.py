"""`gavel train` and `gavel replay` through the CLI table (in process)."""
import json

import pytest

from node.cli import main

from .conftest import tiny_mlp_raw, to_toml


def test_train_prints_root_last_and_replay_checks_it(tmp_path, capsys):
    job = tmp_path / "mlp.toml"
    job.write_text(to_toml(tiny_mlp_raw(steps=4, interval=2)))
    out = tmp_path / "run"
    assert main(["train", str(job), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    trace = json.loads((out / "trace.json").read_text())
    assert lines[-1] == trace["trace_root"] and len(lines[-1]) == 64
    assert [c["step"] for c in trace["checkpoints"]] == [0, 2, 4]

    assert main(["replay", str(job), "--from", str(out), "--checkpoint", "1"]) == 0
    assert "match" in capsys.readouterr().out

    trace["checkpoints"][2]["state_hash"] = "ab" * 32
    from repops_cupy.merkle import merkle_root

    trace["trace_root"] = merkle_root([bytes.fromhex(c["state_hash"]) for c in trace["checkpoints"]]).hex()
    (out / "trace.json").write_text(json.dumps(trace))
    assert main(["replay", str(job), "--from", str(out), "--checkpoint", "1"]) == 1
    assert "MISMATCH" in capsys.readouterr().out
    # the last checkpoint starts no interval: a usage error that names the range
    assert main(["replay", str(job), "--from", str(out), "--checkpoint", "2"]) == 2
    assert "--checkpoint must lie in [0, 1]" in capsys.readouterr().err


def test_invalid_job_names_the_field(tmp_path, capsys):
    raw = tiny_mlp_raw()
    raw["optimizer"]["lr"] = -1
    job = tmp_path / "bad.toml"
    job.write_text(to_toml(raw))
    assert main(["train", str(job), "--out", str(tmp_path / "run")]) == 2
    assert "optimizer.lr: must be a positive number" in capsys.readouterr().err


def test_train_runs_its_kernels_on_the_threads_asked_for(tmp_path, capsys, monkeypatch):
    import numba
    import torch

    from node.cli import train as train_cli

    seen = []
    real_train = train_cli.train

    def spy(*args, **kwargs):
        seen.append((numba.get_num_threads(), torch.get_num_threads()))
        return real_train(*args, **kwargs)

    monkeypatch.setattr(train_cli, "train", spy)
    job = tmp_path / "mlp.toml"
    job.write_text(to_toml(tiny_mlp_raw(steps=2, interval=2)))
    before = (numba.get_num_threads(), torch.get_num_threads())
    assert main(["train", str(job), "--out", str(tmp_path / "run"), "--threads", "1"]) == 0
    assert seen == [(1, 1)] and (numba.get_num_threads(), torch.get_num_threads()) == before
    with pytest.raises(SystemExit) as exc:
        main(["train", str(job), "--out", str(tmp_path / "run2"), "--threads", "0"])
    assert exc.value.code == 2 and "--threads: must be at least 1, got 0" in capsys.readouterr().err
