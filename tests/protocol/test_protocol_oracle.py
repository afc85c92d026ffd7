"""The oracle interface a party's training side implements."""
from __future__ import annotations

from protocol import TraceOracle
from .protocol_world import World, chain_program


def test_the_synthetic_world_is_a_trace_oracle_and_a_partial_one_is_not():
    world = World(chain_program(3), 5, 2)
    assert isinstance(world, TraceOracle)

    class Partial:
        def checkpoint_states(self):
            return []

    assert not isinstance(Partial(), TraceOracle)


def test_the_world_answers_consistently():
    world = World(chain_program(3), 5, 2)
    checkpoints = world.checkpoint_states()
    assert len(checkpoints) == 4  # checkpoints 0..ceil(5/2)
    for c in range(3):
        interval = world.step_states(c)
        assert interval[0] == checkpoints[c] and interval[-1] == checkpoints[c + 1]
    assert len(world.node_outputs(1)) == len(world.program().nodes)
