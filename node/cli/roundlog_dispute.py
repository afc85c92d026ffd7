"""Plays the rounding-log dispute game (`protocol.roundlog_dispute`) between two run directories.

A run directory is what `repops_cupy.roundlog.roundlog_job.train_job` writes: checkpoints,
per-step logs and trace.json. `RunDirectoryParty` answers the referee from one;
states between checkpoints come from replaying the run's own logs from the
checkpoint before them (or from `kept_states`, for a party that stored them).
`play_dispute(spec, challenger, defender)` returns the `Verdict`; `dispute_sim_main` is
`gavel dispute-sim` for these jobs (an honest and a cheating run trained, then disputed).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from protocol.commitments import SignedRoot
from protocol.identity import Identity
from protocol.merkle import ChildrenProof, MerkleTree
from protocol.roundlog_dispute import (
    IntervalOpening, RoundLogReferee, StateOpening, StepEvidence, StepPair, Verdict, log_leaf_proof, max_rounds,
)
from repops_cupy.roundlog.roundlog_job import Job, RoundLogJobError, load_spec, train_job
from repops_cupy.roundlog.state import load_checkpoint, save_checkpoint
from repops_cupy.roundlog.trainer import Auditor, RoundLogTrainer

ROLE = "trainer"


def job_id_of(spec) -> bytes:
    """A job's id: sha256 of its spec tables as canonical JSON."""
    raw = {k: v for k, v in load_spec(spec).items() if not k.startswith("_")}
    return hashlib.sha256(json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()).digest()


def initial_state_hash(job: Job) -> bytes:
    return RoundLogTrainer(job.model_factory(), job.optimizer, job.data, job.config()).state_hash()


class RunDirectoryParty:
    """Answers the referee's requests from one run directory, signing its roots with `identity`."""

    def __init__(self, spec, run_dir: str | Path, identity: Identity, *,
                 kept_states: Mapping[int, StateOpening] | None = None) -> None:
        self.job = Job(spec)
        self.job_id = job_id_of(spec)
        self.run = Path(run_dir)
        self.identity = identity
        self.kept_states = dict(kept_states or {})
        trace = json.loads((self.run / "trace.json").read_text())
        self.checkpoint_steps = [c["step"] for c in trace["checkpoints"]]
        self.checkpoint_hashes = [bytes.fromhex(c["state_hash"]) for c in trace["checkpoints"]]
        self.step_hashes = {0: self.checkpoint_hashes[0]}
        self.step_hashes.update({s["step"]: bytes.fromhex(s["state_hash"]) for s in trace["steps"]})
        self.trace_tree = MerkleTree.from_data(self.checkpoint_hashes)

    def _interval_tree(self, index: int) -> MerkleTree:
        lo, hi = self.checkpoint_steps[index - 1], self.checkpoint_steps[index]
        return MerkleTree.from_data([self.step_hashes[s] for s in range(lo, hi + 1)])

    def _sign(self, kind: str, sequence: int, tree: MerkleTree) -> SignedRoot:
        return SignedRoot.sign(self.identity, job_id=self.job_id, role=ROLE, kind=kind, sequence=sequence,
                               leaf_count=tree.size, root=tree.root)

    def trace_commitment(self) -> SignedRoot:
        return self._sign("trace", self.trace_tree.size - 1, self.trace_tree)

    def trace_children(self, lo: int, hi: int) -> ChildrenProof:
        return self.trace_tree.children_proof(lo, hi)

    def interval_opening(self, index: int) -> IntervalOpening:
        tree = self._interval_tree(index)
        return IntervalOpening(
            root=self._sign("interval", index, tree),
            start=self.checkpoint_hashes[index - 1], end=self.checkpoint_hashes[index],
            start_in_trace=self.trace_tree.inclusion_proof(index - 1),
            end_in_trace=self.trace_tree.inclusion_proof(index),
            start_in_interval=tree.inclusion_proof(0), end_in_interval=tree.inclusion_proof(tree.size - 1))

    def interval_children(self, index: int, lo: int, hi: int) -> ChildrenProof:
        return self._interval_tree(index).children_proof(lo, hi)

    def step_pair(self, index: int, leaf: int) -> StepPair:
        tree = self._interval_tree(index)
        step = self.checkpoint_steps[index - 1] + leaf
        return StepPair(self.step_hashes[step - 1], self.step_hashes[step],
                        tree.inclusion_proof(leaf - 1), tree.inclusion_proof(leaf))

    def step_evidence(self, step: int) -> StepEvidence:
        return StepEvidence(agreed_state=self.state_at(step - 1), log_bytes=self.log_bytes(step),
                            log_proof=log_leaf_proof(self.state_at(step)))

    def log_bytes(self, step: int) -> bytes:
        return (self.run / "logs" / f"step_{step:06d}.rlog").read_bytes()

    def state_at(self, step: int) -> StateOpening:
        """The party's state after `step`: kept, a checkpoint, or replayed with its own logs."""
        if step in self.kept_states:
            return self.kept_states[step]
        start = max(c for c in self.checkpoint_steps if c <= step)
        tensors, meta = load_checkpoint(self.run / "checkpoints" / f"step_{start:06d}.safetensors")
        opening = StateOpening(tensors, bytes.fromhex(meta["log_digest"]) if meta.get("log_digest") else None)
        for s in range(start + 1, step + 1):
            opening = _replay(self.job, opening, s, self.log_bytes(s))[0]
        return opening


def _replay(job: Job, state: StateOpening, step: int, log_bytes: bytes) -> tuple[StateOpening, bytes, int]:
    """Step `step` from `state` with `log_bytes`: (state reached, its hash, implausible entries)."""
    auditor = Auditor(job.model_factory(), job.optimizer, job.data, job.config())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.safetensors"
        # the metadata's hash is left empty: load_checkpoint recomputes it
        save_checkpoint(path, {k: np.asarray(v) for k, v in state.tensors.items()}, step - 1, b"", state.log_hash)
        auditor.load_checkpoint(path)
    reached = auditor.replay_step(step, log_bytes)
    return StateOpening(auditor.named_state(), auditor.last_log_hash), reached, auditor.report()["implausible"]


def referee_for(spec) -> RoundLogReferee:
    job = Job(spec)

    def replay(state: StateOpening, step: int, log_bytes: bytes) -> tuple[bytes, int]:
        _, reached, implausible = _replay(job, state, step, log_bytes)
        return reached, implausible

    return RoundLogReferee(job_id=job_id_of(spec), checkpoint_steps=job.checkpoint_steps(),
                           initial_state_hash=initial_state_hash(job), replay=replay)


def play_dispute(spec, challenger: str | Path | RunDirectoryParty, defender: str | Path | RunDirectoryParty) -> Verdict:
    """The verdict of a dispute between two runs of `spec`: run directories (answered with fresh
    identities) or parties."""
    sides = [p if isinstance(p, RunDirectoryParty) else RunDirectoryParty(spec, p, Identity.generate())
             for p in (challenger, defender)]
    return referee_for(spec).play(*sides)


# --- gavel dispute-sim for rounding-log jobs ------------------------------------------------------

SIM_CHEATS = ("honest", "weight", "lr")
PROVIDER, AUDITOR = "provider", "auditor"


def _sim_cheat(kind: str, step: int):
    """after_step hook: "weight" nudges the first parameter after `step`; "lr" trains with 1.5x lr from `step` on."""
    def cheat(i, trainer) -> None:
        if kind == "weight" and i == step:
            with torch.no_grad():
                p = trainer.params[min(trainer.params)].view(-1)
                p[0] = (p[0] + 1e-3).to(torch.float32).to(torch.float64)
        if kind == "lr" and i == step - 1:
            trainer.optimizer.hyper["lr"] *= 1.5
    return cheat


def simulate(spec, cheat: str, work_dir: str | Path, *, cheater_role: str = PROVIDER, seed: int = 0) -> dict:
    """Train an honest and a cheating run of `spec` under `work_dir` and play the dispute; the
    auditor challenges the provider. Returns the verdict and the cheat as a JSON-ready dict."""
    raw = load_spec(spec)
    job = Job(raw)
    cheat_step = random.Random(seed).randint(2 if cheat == "lr" else 1, job.steps)
    work = Path(work_dir)
    kept: dict[int, StateOpening] = {}

    def cheating(i, trainer) -> None:
        if cheat != "honest":
            _sim_cheat(cheat, cheat_step)(i, trainer)
        kept[i] = StateOpening(trainer.named_state(), trainer.last_log_hash)

    train_job(raw, work / "honest")
    train_job(raw, work / "cheater", after_step=cheating)
    honest = RunDirectoryParty(raw, work / "honest", Identity.generate())
    cheater = RunDirectoryParty(raw, work / "cheater", Identity.generate(), kept_states=kept)
    challenger, defender = (honest, cheater) if cheater_role == PROVIDER else (cheater, honest)
    verdict = referee_for(raw).play(challenger, defender)
    honest_side = "challenger" if cheater_role == PROVIDER else "defender"
    return {"cheat": cheat, "cheat_step": None if cheat == "honest" else cheat_step, "cheater_role": cheater_role,
            "winner": verdict.winner, "honest_won": verdict.winner == honest_side or (cheat == "honest" and not verdict.faults),
            "level": verdict.level, "checkpoint": verdict.checkpoint, "step": verdict.step, "faults": verdict.faults,
            "rounds": verdict.rounds, "bound": max_rounds(job.checkpoint_steps())}


def dispute_sim_main(argv: list[str]) -> int:
    """`gavel dispute-sim JOB.toml --cheat honest|weight|lr` for a rounding-log job; exit 0 when the honest party won."""
    p = argparse.ArgumentParser(prog="gavel dispute-sim", description="Dispute game on a rounding-log job.")
    p.add_argument("job")
    p.add_argument("--cheat", required=True, choices=SIM_CHEATS)
    p.add_argument("--steps", type=int)
    p.add_argument("--seed", type=int, default=0, help="picks the cheated step")
    p.add_argument("--cheater-role", choices=(PROVIDER, AUDITOR), default=PROVIDER)
    p.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = p.parse_args(argv)
    try:
        raw = load_spec(args.job)
        if args.steps is not None:
            raw.setdefault("job", {})["steps"] = args.steps
        Job(raw)
    except RoundLogJobError as exc:
        print(f"gavel dispute-sim: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as work:
        result = simulate(raw, args.cheat, work, cheater_role=args.cheater_role, seed=args.seed)
    if result["level"] == "agreed":
        print("the trace roots agree: no dispute")
    else:
        print(f"verdict: {result['winner'] or 'no single winner'} wins; found checkpoint {result['checkpoint']}, "
              f"step {result['step']} (cheat at step {result['cheat_step']})")
        for side, why in result["faults"].items():
            print(f"  {side} loses: {why}")
        print(f"rounds: {result['rounds']} (bound {result['bound']})")
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0 if result["honest_won"] else 1
