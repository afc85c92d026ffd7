"""The training loop: checkpoints and trace, resume to identical bits, replay, learning."""
import json

import numpy as np
import pytest

from repops_cupy.checkpoint import load_checkpoint, state_hash
from repops_cupy.jobspec import parse_job
from repops_cupy.train import TRACE_FILE, Trace, TrainingError, TrainingProgram, checkpoint_steps, replay, train

from .conftest import tiny_mlp_raw


def test_checkpoint_steps():
    assert checkpoint_steps(6, 2) == [0, 2, 4, 6]
    assert checkpoint_steps(7, 3) == [0, 3, 6, 7]
    assert checkpoint_steps(2, 5) == [0, 2]


def test_train_resume_and_replay(tmp_path, tiny_mlp_spec):
    program = TrainingProgram(tiny_mlp_spec)
    full = train(tiny_mlp_spec, tmp_path / "full", program=program)
    assert [c["step"] for c in full.checkpoints] == [0, 2, 4, 6] and len(full.losses) == 6
    on_disk = Trace.load(tmp_path / "full" / TRACE_FILE)
    assert on_disk.root == full.root
    for c in full.checkpoints:
        state, step, digest = load_checkpoint(tmp_path / "full" / c["file"])
        assert step == c["step"] and digest.hex() == c["state_hash"] and int(state["step"]) == step

    # a shorter run whose last checkpoint (step 3) is off the grid, then resumed to 6 steps
    short = train(tiny_mlp_spec.with_steps(3), tmp_path / "part", program=program)
    assert [c["step"] for c in short.checkpoints] == [0, 2, 3]
    resumed = train(tiny_mlp_spec, tmp_path / "part", resume=True, program=program)
    assert resumed.root == full.root and resumed.losses == full.losses
    assert [c["step"] for c in resumed.checkpoints] == [0, 2, 4, 6]
    with pytest.raises(TrainingError, match="--resume"):
        train(tiny_mlp_spec, tmp_path / "full", program=program)

    ok = replay(tiny_mlp_spec, tmp_path / "full", 1, program=program)
    assert ok.matches and (ok.from_step, ok.to_step) == (2, 4)

    # a trace whose claimed checkpoint 2 is wrong: replay of 1 -> 2 must say so
    path = tmp_path / "full" / TRACE_FILE
    obj = json.loads(path.read_text())
    obj["checkpoints"][2]["state_hash"] = "00" * 32
    trace = Trace(obj["job"], obj["identity"], obj["steps"], obj["checkpoint_interval"], obj["checkpoints"], obj["losses"])
    trace.save(tmp_path / "full")
    bad = replay(tiny_mlp_spec, tmp_path / "full", 1, program=program)
    assert not bad.matches and bad.got == ok.got


def test_resume_refuses_another_job(tmp_path, tiny_mlp_spec):
    train(tiny_mlp_spec.with_steps(2), tmp_path, program=TrainingProgram(tiny_mlp_spec))
    other = parse_job(tiny_mlp_raw(seed=6))
    with pytest.raises(TrainingError, match="different job"):
        train(other, tmp_path, resume=True)


def test_interval_state_hashes_match_checkpoints(tmp_path, tiny_mlp_spec):
    program = TrainingProgram(tiny_mlp_spec)
    trace = train(tiny_mlp_spec.with_steps(4), tmp_path, program=program)
    hashes = program.state_hashes(program.initial_state(), 4)
    assert hashes[1].hex() == trace.checkpoints[1]["state_hash"] and hashes[3].hex() == trace.checkpoints[2]["state_hash"]


def test_dropout_masks_change_with_the_step_but_not_the_graph():
    spec = parse_job(tiny_mlp_raw(dropout=0.5))
    program = TrainingProgram(spec)
    site = next(n.id for n in program.graph.nodes if n.op == "dropout_at_step")
    state0 = program.initial_state()
    state1 = program.run_step(state0).state
    h0, h1 = program.node_hashes(state0), program.node_hashes(state1)
    assert h0[site] != h1[site]
    assert program.node_hashes(state0) == h0


def test_mlp_learns_with_adamw():
    spec = parse_job(tiny_mlp_raw(steps=60, optimizer={"kind": "adamw", "lr": 0.01, "weight_decay": 0.01}))
    program = TrainingProgram(spec)
    state, losses = program.initial_state(), []
    for _ in range(60):
        out = program.run_step(state)
        state, losses = out.state, losses + [out.loss]
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])
    assert state_hash(state) != state_hash(program.initial_state())
