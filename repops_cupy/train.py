"""The training loop: a job spec made into a step graph, run step by step, checkpointed.

Theory of operation
-------------------
`TrainingProgram` turns a `JobSpec` into what every party of a job computes alike:
the data set (content root), the network, the initial state (parameters from the
seed, zeroed optimizer state, the int64 step counter ``step`` = 0) and the traced
`StepGraph`. A step reads the state and the batch of step ``state["step"]`` and gives
the next state; nothing else enters, so any step can be recomputed from the state
before it.

`train` runs a job into a directory: checkpoint files ``step-SSSSSSSS.safetensors``
at steps 0, k, 2k, ... and always at the last step, and ``trace.json``: one entry
per checkpoint (index, step, state hash, file), the loss of every step, and the
trace root = Merkle root over the checkpoints' state hashes in order. A run resumes
from the latest checkpoint of an earlier run of the same job (and continues it to
identical bits); a checkpoint that ended a shorter run but is not a multiple of k is
not part of the longer run's trace.

What the dispute needs, per level:
1. `Trace.checkpoints[c].state_hash` and `Trace.root`;
2. `TrainingProgram.state_hashes(state, n)`: the state hash after each of n steps
   from an agreed checkpoint;
3. `TrainingProgram.node_hashes(state)`: every node's output hash in the step that
   starts from `state`; then `graph.nodes[n]` (op, attrs, input ids) and
   `TrainingProgram.node_inputs(state, n)` (the input arrays), which the referee
   feeds to `graph.run_node`.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import blake3
import numpy as np

from . import ops  # noqa: F401 - fills the registry
from ._backend import cupy_module, to_numpy
from .checkpoint import load_checkpoint, save_checkpoint, state_hash
from .data import Dataset, classification_batch, language_batch, load_dataset
from .graph import GraphBuilder, StepGraph, execute, node_inputs
from .jobspec import JobSpec
from .merkle import merkle_root
from .models import ForwardContext, build_network, classification_loss, init_params, language_loss
from .models.layers import Layer
from .optim import PARAM_PREFIX, initial_optimizer_state, optimizer_nodes
from .parallel import SplitError, with_batch_size
from .parallel_comm import WorkerError
from .parallel_train import env_pool, worker_pool

STEP_KEY = "step"
BATCH_PREFIX = "batch/"
LOSS_OUTPUT = "loss"
TRACE_FORMAT = "gavel-trace/1"
TRACE_FILE = "trace.json"


class TrainingError(RuntimeError):
    """A run that cannot go on: a mismatched resume, a missing device, a damaged trace."""


@dataclass
class StepOutcome:
    state: dict[str, Any]
    loss: float
    node_hashes: list[bytes] | None = None


def device_module(device: str) -> ModuleType:
    if device == "cpu":
        return np
    if device == "gpu":
        cp = cupy_module()
        if cp is None:
            raise TrainingError("--device gpu: no CUDA GPU with CuPy on this machine")
        return cp
    raise TrainingError(f"unknown device {device!r} (cpu or gpu)")


class TrainingProgram:
    """A job made executable: data set, network, initial state, step graph and batches."""

    loss_output = LOSS_OUTPUT

    def __init__(self, spec: JobSpec, dataset: Dataset | None = None, net: Layer | None = None,
                 initial_params: dict[str, np.ndarray] | None = None) -> None:
        """`net` and `initial_params` replace the network and weights the spec describes
        (the torch bridge passes a converted module and its weights)."""
        self.spec = spec
        self.dataset = dataset if dataset is not None else load_dataset(spec.data, spec.seed, spec.base_dir)
        if self.dataset.is_language != spec.data.is_language:
            raise TrainingError("the data set does not fit the job's data kind")
        if net is None:
            ds = self.dataset
            net = build_network(spec.model, vocab_size=ds.vocab_size, context=spec.data.context,
                                n_features=ds.n_features if not ds.is_language else 0, n_classes=ds.n_classes)
        self.net = net
        if initial_params is None and spec.model.init:
            from .weights import initial_weights  # noqa: PLC0415 - reads safetensors only when a job names weights
            initial_params = initial_weights(spec, net)
        self._initial_params = initial_params
        self._graph: StepGraph | None = None

    def at_batch_size(self, batch_size: int) -> TrainingProgram:
        """The same program (data, network, weights) with another batch size: its graph
        shows which values follow the batch (`parallel.split_plan`)."""
        return TrainingProgram(with_batch_size(self.spec, batch_size), dataset=self.dataset, net=self.net,
                               initial_params=self._initial_params)

    # --- state and batches ---------------------------------------------------------
    def initial_state(self) -> dict[str, np.ndarray]:
        params = init_params(self.net, self.spec.seed)
        if self._initial_params is not None:
            given = {n: np.asarray(v) for n, v in self._initial_params.items()}
            if set(given) != set(params):
                raise TrainingError(f"initial parameters differ from the network's: {sorted(set(given) ^ set(params))}")
            for n, v in given.items():
                if v.shape != params[n].shape or v.dtype != np.float32:
                    raise TrainingError(f"initial parameter {n!r}: expected float32 {params[n].shape}, got {v.dtype} {v.shape}")
            params = {n: np.ascontiguousarray(given[n]) for n in params}
        state = {PARAM_PREFIX + n: p for n, p in params.items()}
        state.update(initial_optimizer_state(self.spec.optimizer, params))
        state[STEP_KEY] = np.zeros((), np.int64)
        return state

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """The examples of step `step`, rebuilt from the data set, the seed and the step alone."""
        s = self.spec
        if self.dataset.is_language:
            raw = language_batch(self.dataset, s.seed, step, s.batch_size, s.data.context)
        else:
            raw = classification_batch(self.dataset, s.seed, step, s.batch_size)
        return {BATCH_PREFIX + k: v for k, v in raw.items()}

    def leaf_values(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, **self.batch(int(to_numpy(state[STEP_KEY])))}

    # --- the step graph ------------------------------------------------------------
    @property
    def graph(self) -> StepGraph:
        if self._graph is None:
            self._graph = self.trace_graph()
        return self._graph

    def trace_graph(self) -> StepGraph:
        """Trace forward, backward and update once, on the initial state and batch 0."""
        b = GraphBuilder(keep_values=False)  # holds about one step's live values, not every node's
        state0 = self.initial_state()
        leaves = {name: b.leaf(name, state0[name], "state") for name in sorted(state0)}
        batch = {name: b.leaf(name, value, "batch") for name, value in sorted(self.batch(0).items())}
        names = [n for n, _ in self.net.named_params()]
        params = {n: leaves[PARAM_PREFIX + n] for n in names}
        ctx = ForwardContext(b, params, step=leaves[STEP_KEY], seed=self.spec.seed)
        loss_fn = language_loss if self.dataset.is_language else classification_loss
        loss = loss_fn(ctx, self.net, batch[BATCH_PREFIX + "x"], batch[BATCH_PREFIX + "y"])
        grads = dict(zip(names, b.gradients(loss, [params[n] for n in names])))
        new_state = optimizer_nodes(b, self.spec.optimizer, leaves, grads)
        new_state[STEP_KEY] = b.op("step_increment", leaves[STEP_KEY])
        missing = set(state0) - set(new_state)
        if missing:
            raise TrainingError(f"the update leaves state tensors {sorted(missing)} without a new value")
        return b.finish({**new_state, LOSS_OUTPUT: loss})

    def identity(self) -> bytes:
        """Commits to the job's bits: spec (less steps), data root, step graph."""
        h = blake3.blake3(b"gavel/training-program/v1\0")
        h.update(self.spec.identity().encode() + b"\0")
        h.update(self.dataset.root())
        h.update(self.graph.digest())
        return h.digest()

    # --- running -------------------------------------------------------------------
    def run_step(self, state: dict[str, Any], *, xp: ModuleType = np, hashes: bool = False) -> StepOutcome:
        """One step from `state`; the new state stays on `xp`'s device."""
        run = execute(self.graph, self.leaf_values(state), xp=xp, hashes=hashes, host_outputs=False)
        loss = float(to_numpy(run.outputs.pop(LOSS_OUTPUT)))
        return StepOutcome(run.outputs, loss, run.node_hashes)

    def state_hashes(self, state: dict[str, Any], n_steps: int, *, xp: ModuleType = np) -> list[bytes]:
        """The state hash after each of the next `n_steps` steps (dispute level 2)."""
        out = []
        for _ in range(n_steps):
            state = self.run_step(state, xp=xp).state
            out.append(state_hash({k: to_numpy(v) for k, v in state.items()}))
        return out

    def node_hashes(self, state: dict[str, Any], *, xp: ModuleType = np) -> list[bytes]:
        """Every node's output hash, in order, in the step from `state` (dispute level 3)."""
        return self.run_step(state, xp=xp, hashes=True).node_hashes or []

    def node_inputs(self, state: dict[str, Any], node_id: int) -> list[np.ndarray]:
        """Input arrays of node `node_id` in the step from `state` (for the referee)."""
        return node_inputs(self.graph, self.leaf_values(state), node_id)


# --- traces and the loop -----------------------------------------------------------------


def checkpoint_steps(total: int, interval: int) -> list[int]:
    """Steps that get a checkpoint: 0, k, 2k, ... below `total`, and `total`."""
    return list(range(0, total, interval)) + [total]


def checkpoint_file(step: int) -> str:
    return f"step-{step:08d}.safetensors"


@dataclass
class Trace:
    job: str
    identity: str
    steps: int
    checkpoint_interval: int
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    @property
    def root(self) -> bytes:
        return merkle_root([bytes.fromhex(c["state_hash"]) for c in self.checkpoints])

    def to_json(self) -> str:
        return json.dumps({
            "format": TRACE_FORMAT, "job": self.job, "identity": self.identity, "steps": self.steps,
            "checkpoint_interval": self.checkpoint_interval, "checkpoints": self.checkpoints,
            "losses": self.losses, "trace_root": self.root.hex(),
        }, indent=1)

    @classmethod
    def load(cls, path: Path) -> Trace:
        try:
            obj = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise TrainingError(f"{path}: cannot read the trace ({exc})") from None
        if obj.get("format") != TRACE_FORMAT:
            raise TrainingError(f"{path}: not a {TRACE_FORMAT} file")
        trace = cls(obj["job"], obj["identity"], obj["steps"], obj["checkpoint_interval"], obj["checkpoints"],
                    obj["losses"])
        if trace.root.hex() != obj.get("trace_root"):
            raise TrainingError(f"{path}: trace_root does not match its checkpoints")
        return trace

    def save(self, out_dir: Path) -> None:
        tmp = out_dir / (TRACE_FILE + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(out_dir / TRACE_FILE)


StepCallback = Callable[[int, float], None]


def _host(state: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: to_numpy(v) for k, v in state.items()}


def train(spec: JobSpec, out_dir: str | Path, *, resume: bool = False, device: str = "cpu",
          on_step: StepCallback | None = None, program: TrainingProgram | None = None,
          workers: int = 1, threads: int | None = None, torchrun: bool = False) -> Trace:
    """Run `spec` for spec.steps steps into `out_dir`; returns the finished trace.

    workers > 1: the batch is cut over that many processes on this machine (the same
    bits, see `parallel`), each with `threads` kernel threads; CPU only. torchrun: this
    process is rank 0 of the group torchrun describes (`parallel_train.env_pool`).
    """
    if workers == 1 and not torchrun:
        return _train(spec, out_dir, resume, device, on_step, program, None)
    if device != "cpu":
        raise TrainingError("several workers run on CPU (gloo); --device gpu takes one worker")
    program = program or TrainingProgram(spec)
    try:
        pool_of = env_pool(program, threads=threads) if torchrun else worker_pool(program, workers, threads=threads)
        with pool_of as pool:
            return _train(spec, out_dir, resume, device, on_step, program, pool.run_step)
    except (SplitError, WorkerError) as exc:
        raise TrainingError(f"{'torchrun' if torchrun else f'--workers {workers}'}: {exc}") from None


def _train(spec: JobSpec, out_dir: str | Path, resume: bool, device: str, on_step: StepCallback | None,
           program: TrainingProgram | None, split_step: Callable[[dict[str, Any]], tuple[dict[str, Any], float]] | None,
           ) -> Trace:
    xp = device_module(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    program = program or TrainingProgram(spec)
    identity = program.identity().hex()
    total, k = spec.steps, spec.checkpoint_interval
    grid = checkpoint_steps(total, k)
    trace = Trace(spec.name, identity, total, k)
    state: dict[str, Any] | None = None
    trace_path = out / TRACE_FILE
    if trace_path.exists() and not resume:
        raise TrainingError(f"{out} already holds a trace: pass --resume to continue it, or use another directory")
    if resume and trace_path.exists():
        old = Trace.load(trace_path)
        if old.identity != identity or old.checkpoint_interval != k:
            raise TrainingError(f"{out} holds a different job (identity or checkpoint interval differs)")
        usable = [c for c in old.checkpoints if c["step"] <= total]
        if usable:
            last = usable[-1]
            loaded, step, digest = load_checkpoint(out / last["file"])
            if digest.hex() != last["state_hash"] or step != last["step"]:
                raise TrainingError(f"{last['file']} does not match the trace")
            state = loaded
            trace.checkpoints = [dict(c, index=i) for i, c in enumerate(
                c for c in usable if c["step"] in grid)]
            trace.losses = old.losses[: last["step"]]
    if state is None:
        state = program.initial_state()
        digest = save_checkpoint(out / checkpoint_file(0), state, step=0)
        trace.checkpoints = [{"index": 0, "step": 0, "state_hash": digest.hex(), "file": checkpoint_file(0)}]
        trace.losses = []
    trace.save(out)
    start = int(state[STEP_KEY])
    if xp is not np:
        state = {name: xp.asarray(v) for name, v in state.items()}
    for step in range(start, total):
        if split_step is None:
            outcome = program.run_step(state, xp=xp)
            state, loss = outcome.state, outcome.loss
        else:
            state, loss = split_step(state)
        trace.losses.append(loss)
        done = step + 1
        if done in grid and (not trace.checkpoints or trace.checkpoints[-1]["step"] != done):
            digest = save_checkpoint(out / checkpoint_file(done), _host(state), step=done)
            trace.checkpoints.append({"index": len(trace.checkpoints), "step": done, "state_hash": digest.hex(),
                                      "file": checkpoint_file(done)})
            trace.save(out)
        if on_step is not None:
            on_step(done, loss)
    trace.save(out)
    return trace


@dataclass
class ReplayResult:
    checkpoint: int
    from_step: int
    to_step: int
    expected: str
    got: str
    seconds: float

    @property
    def matches(self) -> bool:
        return self.expected == self.got


def replay(spec: JobSpec, run_dir: str | Path, checkpoint: int, *, device: str = "cpu",
           program: TrainingProgram | None = None) -> ReplayResult:
    """Recompute checkpoint `checkpoint` + 1 from checkpoint `checkpoint` of a finished run."""
    xp = device_module(device)
    run_dir = Path(run_dir)
    trace = Trace.load(run_dir / TRACE_FILE)
    if not 0 <= checkpoint < len(trace.checkpoints) - 1:
        raise TrainingError(f"--checkpoint must lie in [0, {len(trace.checkpoints) - 2}] for this trace")
    program = program or TrainingProgram(spec.with_steps(trace.steps))
    if program.identity().hex() != trace.identity:
        raise TrainingError("the job file does not describe the job of this trace")
    begin, end = trace.checkpoints[checkpoint], trace.checkpoints[checkpoint + 1]
    state, step, digest = load_checkpoint(run_dir / begin["file"])
    if digest.hex() != begin["state_hash"]:
        raise TrainingError(f"{begin['file']} does not hash to the trace's state hash")
    t0 = time.perf_counter()
    if xp is not np:
        state = {name: xp.asarray(v) for name, v in state.items()}
    for _ in range(step, end["step"]):
        state = program.run_step(state, xp=xp).state
    got = state_hash(_host(state)).hex()
    return ReplayResult(checkpoint, begin["step"], end["step"], end["state_hash"], got, time.perf_counter() - t0)
