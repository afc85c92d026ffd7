"""`gavel train` / `gavel replay` route rounding-log jobs to the rounding-log mode."""
import json

from node.cli import main
from node.cli.roundlog import is_roundlog_job

JOB = "scripts/jobs/cnn-roundlog.toml"


def test_job_kind_is_read_from_the_file(tmp_path):
    assert is_roundlog_job(JOB)
    assert not is_roundlog_job("scripts/jobs/mlp.toml")
    assert not is_roundlog_job(str(tmp_path / "missing.toml"))


def test_train_then_replay_on_another_configuration(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", JOB, "--out", str(out), "--steps", "3"]) == 0
    root = capsys.readouterr().out.strip().splitlines()[-1]
    trace = json.loads((out / "trace.json").read_text())
    assert root == trace["trace_root"] and len(root) == 64
    assert [c["step"] for c in trace["checkpoints"]] == [0, 3]

    # the auditor's configuration differs: NumPy/OpenBLAS products, micro-batches
    assert main(["replay", JOB, "--from", str(out), "--checkpoint", "0",
                 "--matmul-backend", "numpy", "--micro-batch", "4"]) == 0
    assert "match" in capsys.readouterr().out

    trace["steps"][1]["state_hash"] = "00" * 32  # a claimed state the replay cannot reach
    (out / "trace.json").write_text(json.dumps(trace))
    assert main(["replay", JOB, "--from", str(out), "--checkpoint", "0"]) == 1
    assert "MISMATCH at step 2" in capsys.readouterr().out
    assert main(["replay", JOB, "--from", str(out), "--checkpoint", "5"]) == 2
