"""Rounding-log jobs (``[model] kind = "torch-roundlog"``) as network jobs.

`RoundLogProgram` gives such a job the face of a `repops_cupy.train.TrainingProgram`
that the roles use: ``spec``, ``identity()``, ``dataset.root()``, ``initial_state()``,
``run_step(state)``, and for the dispute game ``protocol_program()`` and
``step_node_values(state)`` in place of a step graph. Its state is the rounding-log trainer's named
state plus the leaf ``roundlog.log`` holding the step's rounding-log bytes (empty in the initial
state), so after every step the project's `state_hash` of it is the trainer's own state
hash (`repops_cupy.hashing.roundlog_state_hash`), and checkpoints are the project's files.

The model's code travels in the bundle as ``model.py`` (`jobfiles.prepare_roundlog_bundle`;
the client ships the file its job names, by ``model.source`` or, failing that, the module's
own file) and the class is loaded from that file only: the job's identity (the terms' config
hash) and its one-entry committed program both hash the file's bytes, so a provider cannot
run other code under these terms, and a class the bundled file does not define is refused
when the job loads. A step the model's code fails in (a model that does not fit the data) is
a `repops_cupy.train.TrainingError` naming the step and the error, which fails the run.

Disputes: the game bisects checkpoints and steps as for any job; inside a step the
program's nodes are the state tensors before and after it, so a run whose state after a
step is not what its own step nodes give loses at the state outputs, and one whose step
node is wrong loses when the referee recomputes that node: the step nodes' operator
(``torch-roundlog-step/<tensors>``) is registered when a job is loaded and reruns the
step from the proven state before it. (`protocol.roundlog_dispute`, the game inside a
step's rounding sites, is not used here yet.)

Data: synthetic data is a function of its table and the job's seed. The client's own data
(``text``, ``tokens``, ``npy``, ``images``: `roundlog_job.FILE_DATA`) travels and is bound as a
graph-mode job's is: its files go in the bundle under the same names (``data.<ext>``,
``labels.npy``, ``tokenizer.json``: `jobfiles.data_files`), the job's data root is the data
set's content root (`repops_cupy.data.Dataset.root`, the tokenizer's bytes among its arrays),
and the identity hashes that root and the spec without the files' paths. The referee's step
operator names the identity, so it reruns a disputed step on the committed data: a provider
that trains on other data (the cheat ``roundlog-other-data`` of `node.cheats`) loses.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import threading
import tomllib
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from protocol import NodeSpec, Program

MODEL_FILE = "model.py"
STEP_OP = "torch-roundlog-step"
STEP_SECONDS = 0.5  # an upper estimate for the windows: a small torch model's float64 step with rounding


def _bytes_hash(data: bytes) -> bytes:
    from repops_cupy.hashing import hash_tensor

    return hash_tensor(np.frombuffer(data, dtype=np.uint8))


# identity (hex) -> a loaded job: the step operator a referee runs finds its job here
_PROGRAMS: weakref.WeakValueDictionary[str, RoundLogProgram] = weakref.WeakValueDictionary()


def step_op(arity: int) -> str:
    """The step nodes' operator for a state of ``arity`` tensors (the registry's operators
    have a fixed arity)."""
    return f"{STEP_OP}/{arity}"


def _recompute_step(*inputs: Any, output: str, program: str) -> np.ndarray:
    """Tensor ``output`` of the state after a rounding-log step, from the whole state before it."""
    from repops_cupy.errors import OpError

    job = _PROGRAMS.get(program)
    if job is None:
        raise OpError(f"{STEP_OP}: rounding-log job {program[:16]} is not loaded here")
    names = job.state_names()
    if len(inputs) != len(names) or output not in names:
        raise OpError(f"{STEP_OP}: {len(inputs)} inputs and output {output!r} do not fit the job's state")
    return job.run_step({n: np.asarray(x) for n, x in zip(names, inputs)}).state[output]


def _register_step_op(arity: int) -> None:
    """Register the step operator for this arity once, so that a referee of a rounding-log
    job (who has loaded it) recomputes a disputed step node like any operator."""
    from repops_cupy import registry

    if step_op(arity) not in registry.names():
        registry.register(step_op(arity), _recompute_step, arity=arity,
                          attrs={"output": registry.Attr(str), "program": registry.Attr(str)})


class RoundLogBundleError(ValueError):
    """A rounding-log job file that cannot travel: its model's module has no file to ship."""


def is_roundlog_file(job_file: Path) -> bool:
    from repops_cupy.roundlog.roundlog_job import MODEL_KIND

    try:
        raw = tomllib.loads(Path(job_file).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(raw.get("model"), dict) and raw["model"].get("kind") == MODEL_KIND


# -- the model's file ------------------------------------------------------------------


def model_source_file(raw: dict, base_dir: Path) -> Path:
    """The local file of a job's model code: ``model.source``, else the module's own file."""
    model = raw["model"]
    if model.get("source"):
        return base_dir / str(model["source"])
    module = str(model.get("module", "")).partition(":")[0]
    try:
        found = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):
        found = None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise RoundLogBundleError(f"model.module: no Python file for {module!r} to ship with the job "
                                  "(name it with model.source)")
    return Path(found.origin)


# -- the program -----------------------------------------------------------------------


@dataclass(frozen=True)
class RoundLogSpec:
    name: str
    seed: int
    steps: int
    batch_size: int
    checkpoint_interval: int


class _DataRoot:
    """Synthetic data's commitment: the data is a function of its table and the job's seed."""

    def __init__(self, table: dict, seed: int, batch_size: int) -> None:
        text = json.dumps({"data": table, "seed": seed, "batch_size": batch_size}, sort_keys=True)
        self._root = _bytes_hash(b"gavel/roundlog-data/v1\0" + text.encode())

    def root(self) -> bytes:
        return self._root


@dataclass
class RoundLogOutcome:
    state: dict[str, Any]
    loss: float
    node_hashes: list[bytes] | None = None


class RoundLogProgram:
    """A rounding-log job file loaded for training, replay and the terms check."""

    def __init__(self, job_file: Path) -> None:
        from repops_cupy.roundlog.roundlog_job import Job

        job_file = Path(job_file)
        self.job = Job(job_file)  # RoundLogJobError: the caller reports it
        source = self.job.source or model_source_file(self.job.raw, job_file.resolve().parent)
        self.model_code = source.read_bytes()
        self.model_factory = self.job.model_factory()  # loads the class now: a bad file is refused here
        j = self.job
        self.spec = RoundLogSpec(j.name, j.seed, j.steps, j.batch_size, j.checkpoint_interval)
        # file data: a `repops_cupy.data.Dataset`, whose root is its content's
        self.dataset = _DataRoot(j.raw["data"], j.seed, j.batch_size) if j.data_spec is None else j.data.dataset
        # where the model and data files lie differs between the client's file and the bundle: their bytes count
        self._raw = {k: v for k, v in j.raw.items() if k != "_base_dir"}
        self._raw["model"] = {k: v for k, v in self._raw["model"].items() if k != "source"}
        if j.data_spec is not None:
            self._raw["data"] = {k: v for k, v in self._raw["data"].items() if k not in ("path", "labels")}
            if j.data_spec.tokenizer_file:
                self._raw["data"]["tokenizer"] = "file"  # its bytes are an array of the data set, under the data root
        self._batches = j.data
        self._lock = threading.Lock()
        self._trainer: Any = None
        self._current: dict[str, Any] | None = None  # the state the trainer holds
        _PROGRAMS[self.identity().hex()] = self
        _register_step_op(len(self.state_names()))

    def model_hash(self) -> bytes:
        return _bytes_hash(self.model_code)

    def identity(self) -> bytes:
        """Commits to the job's bits: the whole spec, the model's code, the data."""
        from repops_cupy.hashing import state_root

        spec = _bytes_hash(json.dumps(self._raw, sort_keys=True).encode())
        return state_root({"roundlog-program/v1.spec": spec, "roundlog-program/v1.model": self.model_hash(),
                           "roundlog-program/v1.data": self.dataset.root()})

    def state_names(self) -> list[str]:
        return sorted(self.initial_state(), key=lambda n: n.encode())

    def protocol_program(self) -> Program:
        """A leaf per state tensor, then a step node per state tensor (its new value, from the
        whole state before: a rounding-log step is one torch computation, not a graph of
        registered operators), each naming the job's identity, which binds the model's code."""
        names = self.state_names()
        leaves = [NodeSpec("leaf", {"name": n, "role": "state"}, ()) for n in names]
        inputs = tuple(range(len(leaves)))
        op = step_op(len(names))
        steps = [NodeSpec(op, {"output": n, "program": self.identity().hex()}, inputs) for n in names]
        return Program(leaves + steps, {n: len(leaves) + i for i, n in enumerate(names)})

    def step_node_values(self, state: dict[str, Any], after: dict[str, Any] | None = None) -> list[Any]:
        """Every node's value in the step from ``state``, in program order (the dispute's level 3)."""
        names = self.state_names()
        after = self.run_step(state).state if after is None else after
        return [np.asarray(state[n]) for n in names] + [np.asarray(after[n]) for n in names]

    def step_seconds(self) -> float:
        return STEP_SECONDS

    # -- running -----------------------------------------------------------------------

    def on_data(self, dataset: Any) -> RoundLogProgram:
        """This job's program trained on another data set of the same kind (a cheater's run): its
        own trainer, the job's identity kept, not registered for the referee's step operator."""
        from repops_cupy.roundlog.batches import DatasetBatches

        if self.job.data_spec is None:
            raise ValueError("the job's data is synthetic: there is no data set to replace")
        other = copy.copy(self)
        other._batches = DatasetBatches(dataset, self.spec.batch_size, seed=self.spec.seed,
                                        context=self.job.data_spec.context)
        other._lock, other._trainer, other._current = threading.Lock(), None, None
        return other

    def _new_trainer(self) -> Any:
        from repops_cupy.roundlog.trainer import RoundLogTrainer

        j = self.job
        return RoundLogTrainer(self.model_factory, j.optimizer, self._batches, j.config(), seed=j.seed)

    def initial_state(self) -> dict[str, Any]:
        """The trainer's initial state and an empty log: every state has the same tensors, so
        one program fits every step (only this hash differs from the trainer's own, which
        has no log leaf before step 1)."""
        from repops_cupy.hashing import LOG_LEAF

        return {**self._new_trainer().named_state(), LOG_LEAF: np.zeros(0, dtype=np.uint8)}

    def run_step(self, state: dict[str, Any], **_: Any) -> RoundLogOutcome:
        """The next step from ``state``; the state after it carries its rounding log."""
        from repops_cupy.hashing import LOG_LEAF
        from repops_cupy.train import TrainingError

        with self._lock:
            trainer = self._trainer_at(state)
            step = trainer.step_done + 1
            try:
                _, log = trainer.step(step)
            except Exception as error:  # the client's model code may fail in any way on its data
                self._trainer = self._current = None  # stopped inside a step: rebuilt from the next state given
                raise TrainingError(f"rounding-log step {step}: the model {self.job.module!r} fails on the job's "
                                    f"data: {type(error).__name__}: {error}") from error
            after = trainer.named_state()
            after[LOG_LEAF] = np.frombuffer(log, dtype=np.uint8).copy()
            self._current = after
            return RoundLogOutcome(after, trainer.last_loss)

    def _trainer_at(self, state: dict[str, Any]) -> Any:
        import torch

        from repops_cupy.hashing import LOG_LEAF, log_digest

        if self._trainer is not None and state is self._current:
            return self._trainer
        trainer = self._trainer or self._new_trainer()
        tensors = {k: np.asarray(v) for k, v in state.items()}
        with torch.no_grad():
            for n, p in trainer.model.named_parameters():
                p.copy_(torch.from_numpy(tensors[f"param.{n}"]).to(p.dtype))
            for n, b in trainer.model.named_buffers():
                b.copy_(torch.from_numpy(tensors[f"buffer.{n}"]).to(b.dtype))
        trainer.optimizer.load_named_state({k: torch.from_numpy(v.copy()) for k, v in tensors.items()
                                            if k.startswith("optim.")})
        trainer.step_done = int(tensors["data.step"])
        log = tensors.get(LOG_LEAF)
        trainer.last_log_hash = log_digest(log.tobytes()) if log is not None and log.size else None
        self._trainer = trainer
        return trainer


def train_roundlog_run(program: RoundLogProgram, run_dir: Path, *, on_step: Callable[[int, float], None]) -> Any:
    """Train the job into ``run_dir`` as `repops_cupy.train.train` does (its checkpoint files
    and trace.json), resuming from the last checkpoint of an earlier run of the same job."""
    from repops_cupy.checkpoint import load_checkpoint, save_checkpoint
    from repops_cupy.train import TRACE_FILE, Trace, TrainingError, checkpoint_file, checkpoint_steps

    spec = program.spec
    identity = program.identity().hex()
    grid = checkpoint_steps(spec.steps, spec.checkpoint_interval)
    run_dir.mkdir(parents=True, exist_ok=True)
    trace = Trace(spec.name, identity, spec.steps, spec.checkpoint_interval)
    state = None
    if (run_dir / TRACE_FILE).exists():
        old = Trace.load(run_dir / TRACE_FILE)
        if old.identity != identity:
            raise TrainingError(f"{run_dir} holds a different job")
        if old.checkpoints:
            last = old.checkpoints[-1]
            state, step, digest = load_checkpoint(run_dir / last["file"])
            if digest.hex() != last["state_hash"] or step != last["step"]:
                raise TrainingError(f"{last['file']} does not match the trace")
            trace.checkpoints, trace.losses = list(old.checkpoints), old.losses[:step]
    if state is None:
        state = program.initial_state()
        digest = save_checkpoint(run_dir / checkpoint_file(0), state, step=0)
        trace.checkpoints = [{"index": 0, "step": 0, "state_hash": digest.hex(), "file": checkpoint_file(0)}]
        trace.save(run_dir)
    for done in range(int(state["data.step"]) + 1, spec.steps + 1):
        outcome = program.run_step(state)
        state = outcome.state
        trace.losses.append(outcome.loss)
        if done in grid:
            digest = save_checkpoint(run_dir / checkpoint_file(done), state, step=done)
            trace.checkpoints.append({"index": len(trace.checkpoints), "step": done, "state_hash": digest.hex(),
                                      "file": checkpoint_file(done)})
            trace.save(run_dir)
        on_step(done, outcome.loss)
    trace.save(run_dir)
    return trace
