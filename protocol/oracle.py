"""What a party must be able to answer in a dispute: its view of the job it ran.

The training side implements `TraceOracle` over the real interpreter; tests
implement it over synthetic data. Every hash is 32 bytes; every state hash is the
root `commitments.state_root` gives over the state's named tensor hashes.
Steps are numbered as in `jobs.CheckpointSchedule` (step s turns state s-1 into
state s). The party machine caches what it gets, so each method is called at most
once per argument in a dispute.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from .program import Program


@runtime_checkable
class TraceOracle(Protocol):
    def program(self) -> Program:
        """The step program of the job (its root must be the job's `program_root`)."""

    def checkpoint_states(self) -> Sequence[bytes]:
        """State hashes at checkpoints 0..C: the leaves of the party's trace."""

    def step_states(self, checkpoint: int) -> Sequence[bytes]:
        """State hashes of interval `checkpoint`, recomputed from that checkpoint's state.

        The state at the checkpoint first, then the state after each step of the
        interval: ``len(schedule.interval_steps(checkpoint)) + 1`` hashes.
        """

    def node_outputs(self, step: int) -> Sequence[bytes]:
        """The output hash of every node of step `step`, in program order (leaves included)."""

    def state_tensor_hashes(self, step: int) -> Mapping[str, bytes]:
        """Name -> tensor hash of the state after `step` (0: the initial state)."""

    def node_inputs(self, step: int, node: int) -> Sequence[Any]:
        """The input arrays of operator node `node` in step `step`, in the order the program lists them."""


class BatchOracle(Protocol):
    """The referee's own knowledge of the batches: name -> tensor hash of step `step`'s batch.

    The client holds the job's data, so it rebuilds a batch itself rather than
    trusting either party when the dispute lands on a batch leaf.
    """

    def __call__(self, step: int) -> Mapping[str, bytes]: ...
