"""State hashes of rounding-log runs are the project's state hashes, with the step log as one leaf."""
import numpy as np
import pytest

from repops_cupy.checkpoint import state_hash as project_state_hash
from repops_cupy.roundlog import RoundLogTrainer, RunConfig
from repops_cupy.roundlog.state import log_digest, state_hash, to_canonical


def test_state_hash_is_the_projects_with_the_log_as_a_uint8_tensor(setup_of, thresholds):
    tr = RoundLogTrainer(*setup_of("cnn"), RunConfig(threads=1, thresholds=thresholds))
    assert tr.state_hash() == project_state_hash(tr.named_state())
    digest, log = tr.step(1)
    assert digest == project_state_hash({**tr.named_state(), "roundlog.log": np.frombuffer(log, np.uint8)})
    assert digest == state_hash(tr.named_state(), log_digest(log))
    names = set(tr.named_state())
    assert {"data.step", "optim.steps", "buffer.stages.1.running_mean", "param.head.weight",
            "optim.head.weight.momentum"} <= names


def test_state_tensors_must_hold_float32_values():
    import torch
    with pytest.raises(ValueError):
        to_canonical(torch.tensor([0.1], dtype=torch.float64))
    assert to_canonical(torch.tensor([0.5], dtype=torch.float64)).dtype == np.float32
