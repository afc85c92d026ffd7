"""Ways to cheat at a training job: one function per strategy, in `STRATEGIES`.

For tests and simulations only, and passed in where a run may cheat: `gavel dispute-sim`,
a testnet's cheating providers (`node.runtime.Node(..., cheats=STRATEGIES)`, which hands
the table to the provider's `node.roles.runner.JobRun`). Honest node code never imports it.

A cheat is a deviating run of the job (a `TrainingOracle` whose `step` and
`step_values` compute something else from some step on) and, for the cheats that
misbehave in the game itself, a `rewrite` of the cheater's outgoing moves. Each
records its `Truth`: where its run first departs from the job (the first step whose
state differs, the first node of that step whose output differs) and the fault the
referee should find.

A deviating run uses the training program's own interpreter (`graph.execute`) with
one of three hooks: another graph at a step (`graph_at`), other leaf values (a
batch, `leaf_values`), or a change to the state after a step (`after_step`). A
wrong operator output turns that node into an input of the step graph whose value
the cheater supplies, so everything after it is computed from the wrong value by
the interpreter as usual.

A cheat's random choices are drawn again until its error survives to the checkpoint
that ends its interval: rounding can erase a small error within a few steps, and
then the trace is the job's and there is nothing to dispute.

The cheater also knows what the honest computation gives (it could always run it):
`honest` is that run, which the lying and equivocating moves copy.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from protocol import (
    EQUIVOCATION, INVALID_MOVE, TIMEOUT, WRONG_RESULT, Envelope, Identity, RevealChildren,
    StepRequest, commit_trace, hash_tree,
)
from repops_cupy.checkpoint import state_hash
from repops_cupy.data import Dataset, classification_batch, language_batch
from repops_cupy.graph import LEAF_OP, Node, StepGraph, execute
from repops_cupy.hashing import hash_tensor
from repops_cupy.optim import PARAM_PREFIX
from repops_cupy.train import BATCH_PREFIX, LOSS_OUTPUT, STEP_KEY, TrainingProgram

from .training_oracle import CheatContext, State, TrainingOracle

# a rewrite gets the referee's request, the cheater's own answer and the key it signs with;
# it returns the envelope to send instead, or None to stay silent
Rewrite = Callable[[Envelope, Envelope, Identity], "Envelope | None"]

TAMPERED_LEAF = "cheat/tampered-output"  # the name under which a wrong node output enters the step graph
MAX_DRAWS = 50  # a cheat redraws its choices until its error survives to a checkpoint


@dataclass(frozen=True)
class Truth:
    """Where a cheater's run departs from the job, and how the game should end.

    step: the first step whose state differs from the honest run's (None: none does).
    node: the first node of that step whose output differs (the program's last entry,
        the state outputs, when only the state after the step is wrong).
    reason: the fault the referee should find against the cheater (None: no dispute).
    depth: how far the descent should get before the verdict (None: it depends on when
        the cheater stops, as for a stall).
    """

    step: int | None
    node: int | None
    reason: str | None
    depth: int | None


@dataclass
class Cheat:
    strategy: str
    oracle: TrainingOracle
    truth: Truth
    description: str
    rewrite: Rewrite | None = None


# --- deviating runs ------------------------------------------------------------------------------


class Deviation(TrainingOracle):
    """A run of the job through the training interpreter, with hooks where it departs from the job."""

    def graph_at(self, s: int) -> StepGraph:
        return self.training.graph

    def leaf_values(self, s: int, state: State) -> dict[str, Any]:
        return self.training.leaf_values(state)

    def after_step(self, s: int, before: State, after: State) -> State:
        return after

    def step(self, s: int, state: State) -> State:
        run = execute(self.graph_at(s), self.leaf_values(s, state), host_outputs=False)
        after = {name: value for name, value in run.outputs.items() if name != LOSS_OUTPUT}
        return self.after_step(s, state, after)

    def step_values(self, s: int, state: State) -> list[Any]:
        graph = self.graph_at(s)
        run = execute(graph, self.leaf_values(s, state), keep=range(len(graph)))
        return [run.values[i] for i in range(len(graph))]


class FlippedBit(Deviation):
    """One bit of one parameter flips after step `at` (a memory fault); training goes on from there."""

    def __init__(self, training: TrainingProgram, *, at: int, name: str, index: int, bit: int, **kw: Any) -> None:
        super().__init__(training, **kw)
        self.at, self.name, self.index, self.bit = at, name, index, bit

    def after_step(self, s: int, before: State, after: State) -> State:
        return {**after, self.name: flip_bit(after[self.name], self.index, self.bit)} if s == self.at else after


class SkippedStep(Deviation):
    """Step `at` computes its gradients but its update is never applied (only the step counter moves on)."""

    def __init__(self, training: TrainingProgram, *, at: int, **kw: Any) -> None:
        super().__init__(training, **kw)
        self.at = at

    def after_step(self, s: int, before: State, after: State) -> State:
        return {**before, STEP_KEY: after[STEP_KEY]} if s == self.at else after


class OtherProgramFrom(Deviation):
    """From step `at` on, the steps of another training program (same graph shape, other attributes)."""

    def __init__(self, training: TrainingProgram, *, at: int, other: TrainingProgram, **kw: Any) -> None:
        super().__init__(training, **kw)
        self.at, self.other = at, other

    def graph_at(self, s: int) -> StepGraph:
        return self.other.graph if s >= self.at else self.training.graph


class SwappedBatch(Deviation):
    """Step `at` trains on the batch `batch(s)` gives instead of its own."""

    def __init__(self, training: TrainingProgram, *, at: int, batch: Callable[[int], dict[str, Any]], **kw: Any) -> None:
        super().__init__(training, **kw)
        self.at, self.batch = at, batch

    def leaf_values(self, s: int, state: State) -> dict[str, Any]:
        leaves = self.training.leaf_values(state)
        return {**leaves, **self.batch(s)} if s == self.at else leaves


class OtherData(Deviation):
    """From step `at` on, every step trains on the batch `other` (a data set of the same kind) gives."""

    def __init__(self, training: TrainingProgram, *, at: int, other: Dataset, **kw: Any) -> None:
        super().__init__(training, **kw)
        self.at, self.other = at, other

    def batch(self, s: int) -> dict[str, Any]:
        """Step s's batch (training step s - 1) drawn from the other data, with the job's seed and sizes."""
        spec = self.training.spec
        if self.other.is_language:
            raw = language_batch(self.other, spec.seed, s - 1, spec.batch_size, spec.data.context)
        else:
            raw = classification_batch(self.other, spec.seed, s - 1, spec.batch_size)
        return {BATCH_PREFIX + k: v for k, v in raw.items()}

    def leaf_values(self, s: int, state: State) -> dict[str, Any]:
        leaves = self.training.leaf_values(state)
        return {**leaves, **self.batch(s)} if s >= self.at else leaves


class WrongNodeOutput(Deviation):
    """At step `at`, node `node` outputs `change(its true output)`; the rest of the step computes on from it."""

    def __init__(self, training: TrainingProgram, *, at: int, node: int, change: Callable[[np.ndarray], np.ndarray],
                 **kw: Any) -> None:
        super().__init__(training, **kw)
        self.at, self.node, self.change = at, node, change
        graph = training.graph
        nodes = list(graph.nodes)
        true = nodes[node]
        nodes[node] = Node(node, LEAF_OP, {"name": TAMPERED_LEAF, "role": "batch"}, (), true.shape, true.dtype)
        self._tampered = StepGraph(tuple(nodes), graph.outputs)

    def graph_at(self, s: int) -> StepGraph:
        return self._tampered if s == self.at else self.training.graph

    def leaf_values(self, s: int, state: State) -> dict[str, Any]:
        leaves = self.training.leaf_values(state)
        if s != self.at:
            return leaves
        true = execute(self.training.graph, leaves, keep=[self.node], stop_after=self.node).values[self.node]
        return {**leaves, TAMPERED_LEAF: self.change(np.asarray(true))}


def flip_bit(value: np.ndarray, index: int, bit: int) -> np.ndarray:
    """A copy of `value` with bit `bit` of element `index` flipped (in the element's own bits)."""
    out = np.array(value, copy=True)
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[out.dtype.itemsize]
    flat = out.reshape(-1).view(unsigned)
    flat[index] ^= unsigned(1 << (bit % (8 * out.dtype.itemsize)))
    return out


# --- the strategies --------------------------------------------------------------------------------


def _deviating(kind: type[Deviation], ctx: CheatContext, **kw: Any) -> Deviation:
    return kind(ctx.training, timer=ctx.timer, program=ctx.honest.program(), **kw)


def _departs(ctx: CheatContext, oracle: Deviation, at: int) -> bool:
    """Does a run that first deviates at step `at` still differ at the checkpoint that ends its interval?

    Rounding can erase a small error within a few steps; the trace then equals the
    job's (as does every later state), and there is nothing to dispute.
    """
    c = ctx.schedule.interval_of_step(at)
    state = ctx.honest.state_before(at)
    for s in range(at, ctx.schedule.interval_steps(c)[-1] + 1):
        state = oracle.step(s, state)
    return state_hash(state) != ctx.honest.checkpoint_states()[c + 1]


def _draw(ctx: CheatContext, draw: Callable[[], tuple[Deviation, int, str]]) -> tuple[Deviation, int, str]:
    """Draw a cheat's choices until its run departs from the job's at a checkpoint."""
    for _ in range(MAX_DRAWS):
        oracle, at, what = draw()
        if _departs(ctx, oracle, at):
            return oracle, at, what
    raise RuntimeError(f"no draw of this cheat in {MAX_DRAWS} changes a checkpoint of the job")


def perturb_weight(ctx: CheatContext) -> Cheat:
    names = sorted(n for n in ctx.honest.checkpoint_state(0) if n.startswith(PARAM_PREFIX))

    def draw() -> tuple[Deviation, int, str]:
        at, name = ctx.rng.randint(1, ctx.steps), ctx.rng.choice(names)
        index, bit = ctx.rng.randrange(ctx.honest.checkpoint_state(0)[name].size), ctx.rng.randrange(32)
        oracle = _deviating(FlippedBit, ctx, at=at, name=name, index=index, bit=bit)
        return oracle, at, f"flips bit {bit} of {name}[{index}] after step {at}"

    oracle, at, what = _draw(ctx, draw)
    return Cheat("perturb-weight", oracle, Truth(at, ctx.state_outputs_entry, WRONG_RESULT, 3), what)


def skip_step(ctx: CheatContext) -> Cheat:
    def draw() -> tuple[Deviation, int, str]:
        at = ctx.rng.randint(1, ctx.steps)
        return _deviating(SkippedStep, ctx, at=at), at, f"skips the update of step {at}"

    oracle, at, what = _draw(ctx, draw)
    return Cheat("skip-step", oracle, Truth(at, ctx.state_outputs_entry, WRONG_RESULT, 3), what)


def wrong_lr(ctx: CheatContext) -> Cheat:
    spec = ctx.training.spec
    others: dict[float, TrainingProgram] = {}

    def draw() -> tuple[Deviation, int, str]:
        at, factor = ctx.rng.randint(1, ctx.steps), ctx.rng.choice((0.1, 0.5, 2.0, 10.0))
        if factor not in others:
            optimizer = dataclasses.replace(spec.optimizer, lr=spec.optimizer.lr * factor)
            others[factor] = TrainingProgram(dataclasses.replace(spec, optimizer=optimizer), dataset=ctx.training.dataset)
        other = others[factor]
        return (_deviating(OtherProgramFrom, ctx, at=at, other=other), at,
                f"trains with lr {other.spec.optimizer.lr:g} instead of {spec.optimizer.lr:g} from step {at} on")

    oracle, at, what = _draw(ctx, draw)
    job_nodes, other_nodes = ctx.training.graph.nodes, oracle.other.graph.nodes
    if [(n.op, n.inputs) for n in job_nodes] != [(n.op, n.inputs) for n in other_nodes]:
        raise RuntimeError("a different learning rate changed the step graph's shape")
    first = next(i for i, (a, b) in enumerate(zip(job_nodes, other_nodes)) if a.attrs != b.attrs)
    return Cheat("wrong-lr", oracle, Truth(at, first, WRONG_RESULT, 3), what)


def _batch_leaf(ctx: CheatContext, at: int, batch: dict[str, Any]) -> int:
    """The first batch leaf whose value differs from step `at`'s own batch."""
    own = ctx.training.batch(at - 1)
    leaves = ctx.training.graph.leaves("batch")
    changed = [leaves[n] for n in batch if hash_tensor(batch[n]) != hash_tensor(own[n])]
    if not changed:
        raise RuntimeError(f"the substituted batch of step {at} equals its own")
    return min(changed)


def wrong_batch(ctx: CheatContext) -> Cheat:
    def draw() -> tuple[Deviation, int, str]:
        at = ctx.rng.randint(1, ctx.steps)
        other = ctx.rng.choice([t for t in range(1, ctx.steps + 2) if t != at])
        batch = ctx.training.batch(other - 1)
        return (_deviating(SwappedBatch, ctx, at=at, batch=lambda s: batch), at,
                f"trains step {at} on the batch of step {other}")

    oracle, at, what = _draw(ctx, draw)
    return Cheat("wrong-batch", oracle, Truth(at, _batch_leaf(ctx, at, oracle.batch(at)), WRONG_RESULT, 3), what)


def poison_data(ctx: CheatContext) -> Cheat:
    def draw() -> tuple[Deviation, int, str]:
        at = ctx.rng.randint(1, ctx.steps)
        batch = dict(ctx.training.batch(at - 1))
        name = ctx.rng.choice(sorted(batch))
        value = np.array(batch[name], copy=True)
        index = ctx.rng.randrange(value.size)
        flat = value.reshape(-1)
        if value.dtype.kind == "f":
            flat[index] = -flat[index] + value.dtype.type(1.0)  # a feature moved, still finite
        else:  # a token or a label changed to another valid one
            ds = ctx.training.dataset
            flat[index] = (flat[index] + 1) % (ds.vocab_size if ds.is_language else ds.n_classes)
        batch[name] = value
        where = tuple(int(i) for i in np.unravel_index(index, value.shape))
        return (_deviating(SwappedBatch, ctx, at=at, batch=lambda s: batch), at,
                f"alters {name}{list(where)} of step {at}'s batch")

    oracle, at, what = _draw(ctx, draw)
    return Cheat("poison-data", oracle, Truth(at, _batch_leaf(ctx, at, oracle.batch(at)), WRONG_RESULT, 3), what)


def substitute_data(dataset: Dataset) -> Dataset:
    """Data of the same kind and size that is not the job's: its tokens in reverse order, or its
    examples with labels moved to the next class (a provider training on a corpus of its own)."""
    a = dataset.arrays
    if dataset.is_language:
        arrays = {**a, "tokens": np.ascontiguousarray(a["tokens"][::-1])}
    else:
        arrays = {**a, "y": (a["y"] + 1) % dataset.n_classes}
    return dataclasses.replace(dataset, arrays=arrays, _root=[])


def other_data(ctx: CheatContext) -> Cheat:
    other = substitute_data(ctx.training.dataset)

    def draw() -> tuple[Deviation, int, str]:
        at = ctx.rng.randint(1, ctx.steps)
        return (_deviating(OtherData, ctx, at=at, other=other), at,
                f"trains on other data (the job's, reordered) from step {at} on")

    oracle, at, what = _draw(ctx, draw)
    return Cheat("other-data", oracle, Truth(at, _batch_leaf(ctx, at, oracle.batch(at)), WRONG_RESULT, 3), what)


def _wrong_node_output(ctx: CheatContext) -> tuple[WrongNodeOutput, str]:
    """One bit of one element of one operator node's output flipped at a random step."""
    graph = ctx.training.graph
    operators = [n.id for n in graph.nodes if not n.is_leaf and np.prod(n.shape, dtype=np.int64) > 0]

    def draw() -> tuple[Deviation, int, str]:
        at, node = ctx.rng.randint(1, ctx.steps), ctx.rng.choice(operators)
        size = int(np.prod(graph.nodes[node].shape, dtype=np.int64))
        index, bit = ctx.rng.randrange(size), ctx.rng.randrange(23)  # a mantissa bit (or a low integer bit)
        oracle = _deviating(WrongNodeOutput, ctx, at=at, node=node, change=lambda v: flip_bit(v, index, bit))
        return oracle, at, f"flips bit {bit} of element {index} of node {node} ({graph.nodes[node].op}) at step {at}"

    oracle, _, what = _draw(ctx, draw)
    return oracle, what


def wrong_op_output(ctx: CheatContext) -> Cheat:
    oracle, what = _wrong_node_output(ctx)
    return Cheat("wrong-op-output", oracle, Truth(oracle.at, oracle.node, WRONG_RESULT, 3), what)


def lie_in_bisection(ctx: CheatContext) -> Cheat:
    """Computes one node wrongly, then hides it in the node descent by revealing the honest children."""
    oracle, what = _wrong_node_output(ctx)
    step: int | None = None
    lied = False

    def rewrite(request: Envelope, answer: Envelope, identity: Identity) -> Envelope | None:
        nonlocal step, lied
        if isinstance(request.body, StepRequest):
            step = request.body.step
        body = answer.body
        if lied or not isinstance(body, RevealChildren) or body.level != 3:
            return answer
        lied = True
        honest_tree = hash_tree(list(ctx.honest.node_outputs(step)) + [state_hash(ctx.honest.state_after(step))])
        lie = dataclasses.replace(body, proof=honest_tree.children_proof(body.proof.lo, body.proof.hi))
        return _resign(answer, lie, identity)

    return Cheat("lie-in-bisection", oracle, Truth(oracle.at, oracle.node, INVALID_MOVE, 2),
                 f"{what}; then reveals the honest children in the node descent", rewrite)


def equivocate(ctx: CheatContext) -> Cheat:
    """Publishes a wrong trace, then answers the dispute under a second trace root: a copy of the honest trace."""
    base = perturb_weight(ctx)
    honest_states = list(ctx.honest.checkpoint_states())
    done = False

    def rewrite(request: Envelope, answer: Envelope, identity: Identity) -> Envelope | None:
        nonlocal done
        body = answer.body
        if done or not isinstance(body, RevealChildren) or body.level != 1:
            return answer
        done = True
        r = body.root
        second = commit_trace(identity, job_id=r.job_id, role=r.role, checkpoint_states=honest_states)
        proof = hash_tree(honest_states).children_proof(body.proof.lo, body.proof.hi)
        return _resign(answer, dataclasses.replace(body, root=second, proof=proof), identity)

    return Cheat("equivocate", base.oracle, Truth(base.truth.step, base.truth.node, EQUIVOCATION, 0),
                 f"{base.description}; then signs a second trace root (a copy of the honest one) in the dispute",
                 rewrite)


def stall(ctx: CheatContext) -> Cheat:
    """Computes one node wrongly and stops answering after its first few moves."""
    oracle, what = _wrong_node_output(ctx)
    answered = ctx.rng.randint(1, 3)
    moves = 0

    def rewrite(request: Envelope, answer: Envelope, identity: Identity) -> Envelope | None:
        nonlocal moves
        moves += 1
        return answer if moves <= answered else None

    return Cheat("stall", oracle, Truth(oracle.at, oracle.node, TIMEOUT, None),
                 f"{what}; stops answering after {answered} move(s)", rewrite)


class PerturbedRoundLogWeight(TrainingOracle):
    """A rounding-log job's run (no step graph: each step is the job's own) where one bit of one
    weight flips after step `at`."""

    def __init__(self, training: Any, *, at: int, name: str, index: int, bit: int, in_step: bool = False,
                 **kw: Any) -> None:
        """in_step: the cheater also claims the step computed the flipped weight (its step node
        lies, not only the state after it)."""
        super().__init__(training, **kw)
        self.at, self.name, self.index, self.bit, self.in_step = at, name, index, bit, in_step

    def step(self, s: int, state: State) -> State:
        after = super().step(s, state)
        return {**after, self.name: flip_bit(after[self.name], self.index, self.bit)} if s == self.at else after

    def step_values(self, s: int, state: State) -> list[Any]:
        if self.in_step:
            return self.training.step_node_values(state, after=self.step(s, state))
        return super().step_values(s, state)


def roundlog_perturb_weight(ctx: CheatContext, *, in_step: bool = False) -> Cheat:
    state0 = ctx.honest.checkpoint_state(0)
    names = sorted(n for n in state0 if n.startswith("param."))  # the rounding-log state's weights

    def draw() -> tuple[TrainingOracle, int, str]:
        at, name = ctx.rng.randint(1, ctx.steps), ctx.rng.choice(names)
        index, bit = ctx.rng.randrange(state0[name].size), ctx.rng.randrange(16, 23)  # a mantissa bit: stays finite
        oracle = PerturbedRoundLogWeight(ctx.training, timer=ctx.timer, program=ctx.honest.program(), at=at,
                                         name=name, index=index, bit=bit, in_step=in_step)
        return oracle, at, f"flips bit {bit} of {name}[{index}] {'in' if in_step else 'after'} rounding-log step {at}"

    oracle, at, what = _draw(ctx, draw)
    program = ctx.honest.program()
    node = program.outputs.as_dict()[oracle.name] if in_step else program.size - 1
    strategy = "roundlog-wrong-step" if in_step else "roundlog-perturb-weight"
    return Cheat(strategy, oracle, Truth(at, node, WRONG_RESULT, 3), what)


def roundlog_wrong_step(ctx: CheatContext) -> Cheat:
    return roundlog_perturb_weight(ctx, in_step=True)


class RoundLogOtherData(TrainingOracle):
    """A rounding-log job's run that trains on `other` (a data set of the job's kind) from step `at`
    on; its step nodes claim what it computed."""

    def __init__(self, training: Any, *, at: int, other: Dataset, **kw: Any) -> None:
        super().__init__(training, **kw)
        self.at, self.other = at, training.on_data(other)

    def step(self, s: int, state: State) -> State:
        return self.other.run_step(state).state if s >= self.at else super().step(s, state)

    def step_values(self, s: int, state: State) -> list[Any]:
        return self.training.step_node_values(state, after=self.step(s, state))


def roundlog_other_data(ctx: CheatContext) -> Cheat:
    """A rounding-log job with the client's own data, trained on other data (`substitute_data`)."""
    if not isinstance(ctx.training.dataset, Dataset):
        raise RuntimeError("the job's data is synthetic: there is no client data to replace")  # noqa: TRY004 - a RunFailed
    other = substitute_data(ctx.training.dataset)

    def draw() -> tuple[TrainingOracle, int, str]:
        at = ctx.rng.randint(1, ctx.steps)
        oracle = RoundLogOtherData(ctx.training, timer=ctx.timer, program=ctx.honest.program(), at=at, other=other)
        what = f"trains on other data (the job's, tokens reversed or labels moved) from rounding-log step {at} on"
        return oracle, at, what

    oracle, at, what = _draw(ctx, draw)
    # the first step node (one per state tensor, in state-name order) whose value differs from the job's
    names = ctx.training.state_names()
    ours, theirs = oracle.step(at, ctx.honest.state_before(at)), ctx.honest.state_after(at)
    differ = [i for i, n in enumerate(names) if hash_tensor(np.asarray(ours[n])) != hash_tensor(np.asarray(theirs[n]))]
    if not differ:
        raise RuntimeError(f"the other data's step {at} gives the job's own state")
    return Cheat("roundlog-other-data", oracle, Truth(at, len(names) + differ[0], WRONG_RESULT, 3), what)


def honest(ctx: CheatContext) -> Cheat:
    oracle = TrainingOracle(ctx.training, timer=ctx.timer, program=ctx.honest.program())
    return Cheat("honest", oracle, Truth(None, None, None, None), "trains the job as specified")


def _resign(envelope: Envelope, body: Any, identity: Identity) -> Envelope:
    return Envelope.seal(body, identity=identity, job_id=envelope.job_id, seq=envelope.seq, deadline=envelope.deadline)


STRATEGIES: dict[str, Callable[[CheatContext], Cheat]] = {
    "perturb-weight": perturb_weight,
    "skip-step": skip_step,
    "wrong-lr": wrong_lr,
    "wrong-batch": wrong_batch,
    "poison-data": poison_data,
    "other-data": other_data,
    "lie-in-bisection": lie_in_bisection,
    "wrong-op-output": wrong_op_output,
    "equivocate": equivocate,
    "stall": stall,
    "honest": honest,
}

# cheats for rounding-log jobs only (their runs have no step graph for the strategies above)
ROUNDLOG_STRATEGIES: dict[str, Callable[[CheatContext], Cheat]] = {
    "roundlog-perturb-weight": roundlog_perturb_weight,
    "roundlog-wrong-step": roundlog_wrong_step,
    "roundlog-other-data": roundlog_other_data,
}
