"""The lists of the claim game (docs/economics.md section 8.2) and where two of them first differ.

A seat's revealed trace is the list of its C+1 checkpoint state hashes. Under it, for
interval c, the **steps list** holds the state hash before and after every step of the
interval: entry 0 is trace[c], entry j the state after step checkpoint_step(c) + j, the
last trace[c+1]. For step s, the **node list** holds the output hash of each of the
program's N nodes (leaves included, program order), then the state after the step:
entry N is the steps list's entry for s. N is the job's `graphNodes` term, the program's
size less its last entry (`StateOutputs`): the program tree has N + 1 leaves, the node
list N + 1 entries, and program entry N is the rule that turns entries 0..N-1 into entry N.

Every entry is a 32-byte hash and every list is a `protocol.listtree` list, so each root
here is the `LibList` root the contract computes, and each proof the one it checks:
`postSteps` proves the steps list's ends against the trace root, `postNodes` proves the
node list's last entry against the picked steps list.
"""
from __future__ import annotations

from typing import Sequence

from .commitments import state_root
from .errors import LocalProtocolError
from .jobs import CheckpointSchedule
from .listtree import ListProof, ListTree
from .oracle import TraceOracle


def steps_list(oracle: TraceOracle, c: int) -> list[bytes]:
    """Interval c's per-step state hashes: trace[c] first, trace[c+1] last (what `postSteps` posts)."""
    return [bytes(h) for h in oracle.step_states(c)]


def node_list(oracle: TraceOracle, s: int) -> list[bytes]:
    """Step s's N node-output hashes, then the state after step s (what `postNodes` posts).

    The last entry is the state root of the oracle's state after s, which is its
    steps-list entry for s; the N outputs are checked against the program's size.
    """
    outputs = [bytes(h) for h in oracle.node_outputs(s)]
    graph_nodes = oracle.program().size - 1
    if len(outputs) != graph_nodes:
        raise LocalProtocolError(f"the oracle gave {len(outputs)} node outputs for step {s}, "
                                 f"the program has {graph_nodes} nodes")
    return outputs + [state_root(oracle.state_tensor_hashes(s))]


def step_index(schedule: CheckpointSchedule, s: int) -> tuple[int, int]:
    """(interval c, index j of step s in c's steps list): the contract names a step claim by j."""
    c = schedule.interval_of_step(s)
    return c, s - schedule.checkpoint_step(c)


def first_difference(ours: Sequence[bytes], theirs: Sequence[bytes]) -> int | None:
    """The first index where two lists of one claim differ, or None where they agree.

    The contract fixes a list's length by its level (k_c + 1, N + 1, C + 1), so lists of
    different lengths are not two answers to one claim: that is the caller's mistake
    (`LocalProtocolError`), whatever their prefixes. For a steps list or a trace the
    entry 0 is proven (trace[c], the initial state), so the index is then at least 1.
    """
    if len(ours) != len(theirs):
        raise LocalProtocolError(f"lists of {len(ours)} and {len(theirs)} entries answer different claims")
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)


def first_wrong_interval(our_trace: Sequence[bytes], their_trace: Sequence[bytes]) -> int | None:
    """The interval c to open a game on: the first c with their trace[c+1] unlike ours; None if none.

    Both traces start at the job's initial state (`reveal` checks it), so a differing
    entry 0 means these are not two reveals of one job: `LocalProtocolError`.
    """
    i = first_difference(our_trace, their_trace)
    if i == 0:
        raise LocalProtocolError("the traces differ at checkpoint 0, which reveal checks against the terms")
    return None if i is None else i - 1


def steps_proofs(trace: Sequence[bytes], c: int) -> tuple[ListProof, ListProof]:
    """Proofs of trace[c] and trace[c+1] against the trace root (`postSteps`' proofFrom, proofTo)."""
    tree = ListTree(trace)
    if type(c) is not int or not 0 <= c < tree.size - 1:
        raise LocalProtocolError(f"interval {c!r} is outside a trace of {tree.size} checkpoints")
    return tree.proof(c), tree.proof(c + 1)


def node_list_proof(steps: Sequence[bytes], j: int) -> ListProof:
    """Proof of the steps list's entry j (step j of the interval, j >= 1) against its root:
    the node list's last entry, as `postNodes` checks it."""
    tree = ListTree(steps)
    if type(j) is not int or not 1 <= j < tree.size:
        raise LocalProtocolError(f"step {j!r} is outside an interval of {tree.size - 1} steps")
    return tree.proof(j)
