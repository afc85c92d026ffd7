"""Benchmarks of the protocol: Merkle trees, tensor hashing, envelopes, decoding fuzz, a whole dispute.

    python scripts/bench_protocol.py                  # defaults: 2^18 leaves, 64 MiB tensor, 100,000 fuzz inputs,
                                                      # a dispute on tiny-gpt.toml with 200 steps
    python scripts/bench_protocol.py --quick          # smaller sizes, for a smoke run (dispute on mlp.toml, 20 steps)
    python scripts/bench_protocol.py --dispute-only --dispute-steps 100

Prints one line per measurement. The decoding fuzz also checks, over every input, that
nothing but RemoteProtocolError escapes `decode_envelope` (it exits non-zero otherwise).
The whole dispute (`node.cli.dispute_sim`) trains the job as an honest party and as a
cheater, then plays the game, and splits its time into recomputation by the parties,
hashing, and game logic (protocol machines, signature checks, the referee's
recomputation of one node); it exits non-zero if the honest party does not win.
"""
from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np

from protocol import (
    Commitment, DisputeRules, Envelope, Fault, Identity, InputEvidence, JobOffer, JobTerms, MerkleTree, NodeEvidence,
    NodeSpec, OpenDispute, Program, RemoteProtocolError, RevealChildren, RevealRequest, SignedJobTerms,
    TensorPayload, Verdict, commit_trace, decode_envelope,
)
from protocol.envelope import MAX_TENSOR_MESSAGE_SIZE
from repops_cupy.hashing import hash_tensor

CLIENT, ALICE, BOB = (Identity(bytes([i]) * 32) for i in (1, 2, 3))


def timed(fn, *, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def report(name: str, value: float, unit: str, detail: str = "") -> None:
    print(f"{name:<44} {value:>14,.1f} {unit:<10} {detail}")


def bench_merkle(leaves: int, proofs: int) -> None:
    rng = random.Random(0)
    data = [rng.randbytes(32) for _ in range(leaves)]
    tree = None

    def build():
        nonlocal tree
        tree = MerkleTree.from_data(data)

    seconds = timed(build)
    report("merkle build (leaf + inner hashing)", leaves / seconds, "leaves/s", f"{leaves} leaves in {seconds:.2f} s")
    indices = [rng.randrange(leaves) for _ in range(proofs)]
    made = []
    seconds = timed(lambda: made.extend(tree.inclusion_proof(i) for i in indices))
    report("inclusion proof generation", proofs / seconds, "proofs/s", f"depth {len(made[0].siblings)}")
    seconds = timed(lambda: [p.verify(tree.root, data[i]) for p, i in zip(made, indices)])
    report("inclusion proof verification", proofs / seconds, "proofs/s")
    nodes = [(0, leaves)]
    while nodes[-1][1] - nodes[-1][0] > 1:  # one descent path
        lo, hi = nodes[-1]
        nodes.append((lo, lo + (1 << ((hi - lo - 1).bit_length() - 1))))
    inner = nodes[:-1] * max(1, proofs // max(1, len(nodes) - 1))
    children = []
    seconds = timed(lambda: children.extend(tree.children_proof(lo, hi) for lo, hi in inner))
    report("children proof generation", len(inner) / seconds, "proofs/s")
    seconds = timed(lambda: [c.verify(tree.root) for c in children])
    report("children proof verification", len(inner) / seconds, "proofs/s")


def bench_tensor_hash(mib: int) -> None:
    for dtype in (np.float32, np.int64):
        array = np.random.default_rng(0).random(mib * (1 << 20) // np.dtype(dtype).itemsize).astype(dtype)
        seconds = timed(lambda: hash_tensor(array), repeat=3)
        report(f"hash_tensor {np.dtype(dtype).name} ({mib} MiB)", array.nbytes / seconds / 1e9, "GB/s")
    small = np.ones((64, 64), np.float32)
    n = 20_000
    seconds = timed(lambda: [hash_tensor(small) for _ in range(n)])
    report("hash_tensor 64x64 float32", n / seconds, "tensors/s", "(per-call overhead)")


def corpus() -> list[bytes]:
    """Valid envelopes of the main message types, built directly."""
    job_terms = JobTerms(client=CLIENT.node_id, config_hash=bytes(32), program_root=bytes(32), program_size=9,
                         data_root=bytes(32), initial_state=bytes(32), steps=1000, checkpoint_every=10, payment=1,
                         stake=1, deadline=10**12, nonce=0, rules=DisputeRules(10_000, 600_000))
    signed = SignedJobTerms.sign(CLIENT, job_terms)
    job = signed.job_id
    states = [bytes([i % 256]) * 32 for i in range(101)]
    tree = MerkleTree.from_data(states)
    mine = commit_trace(ALICE, job_id=job, role="auditor", checkpoint_states=states)
    theirs = commit_trace(BOB, job_id=job, role="provider", checkpoint_states=states[::-1])
    program = Program([NodeSpec("leaf", {"name": "w", "role": "state"}, ()), NodeSpec("add", {}, (0, 0))], {"w": 1})
    tensor = TensorPayload.from_array(np.arange(1024, dtype=np.float32))
    node_tree = MerkleTree.from_data(states[:9])
    bodies = [
        (JobOffer(signed), CLIENT), (Commitment(mine), ALICE), (OpenDispute(mine, theirs), ALICE),
        (RevealRequest(bytes(32), 1, 0, 101), CLIENT),
        (RevealChildren(bytes(32), 1, mine, tree.children_proof(64, 101)), ALICE),
        (NodeEvidence(bytes(32), 5, 1, program.leaves[1], program.proof(1), states[1], node_tree.inclusion_proof(1),
                      (InputEvidence(hash_tensor(tensor.to_array()), node_tree.inclusion_proof(0), tensor),) * 2),
         ALICE),
        (Verdict(bytes(32), ALICE.node_id, BOB.node_id, (Fault(BOB.node_id, "wrong-result", "x"),), 3, 5, 50, 1,
                 bytes(32), 12, bytes(32), None), CLIENT),
    ]
    return [Envelope.seal(b, identity=who, job_id=job, seq=1, deadline=10**12).encode() for b, who in bodies]


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0:
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 2:
        del b[rng.randrange(len(b)):]
    elif kind == 3:
        i = rng.randrange(len(b) + 1)
        b[i:i] = rng.randbytes(rng.randrange(1, 5))
    elif kind == 4:
        other = rng.choice(pool)
        b = b[:rng.randrange(len(b))] + bytearray(other[rng.randrange(len(other)):])
    else:
        return rng.randbytes(rng.randrange(0, 200))
    return bytes(b)


def bench_envelopes(messages: list[bytes]) -> None:
    reveal = decode_envelope(messages[4])
    n = 2000
    seconds = timed(lambda: [Envelope.seal(reveal.body, identity=ALICE, job_id=reveal.job_id, seq=i, deadline=9)
                             for i in range(n)])
    report("seal a RevealChildren (sign + encode)", n / seconds, "msgs/s", f"{len(messages[4])} bytes")
    seconds = timed(lambda: [decode_envelope(messages[4]) for _ in range(n)])
    report("decode a RevealChildren (parse + verify)", n / seconds, "msgs/s")


def bench_fuzz(messages: list[bytes], inputs: int, seed: int) -> bool:
    rng = random.Random(seed)
    cases = [mutate(rng, rng.choice(messages), messages) for _ in range(inputs)]
    originals = set(messages)
    unchanged = refused = 0
    failures: list[str] = []

    def run():
        nonlocal unchanged, refused
        for data in cases:
            try:
                decode_envelope(data, max_size=MAX_TENSOR_MESSAGE_SIZE)
            except RemoteProtocolError:
                refused += 1
            except Exception as exc:  # the property under test: this must never happen
                failures.append(f"escaped {type(exc).__name__}: {exc}")
            else:
                if data in originals:
                    unchanged += 1  # a splice that rebuilt the message it started from
                else:
                    failures.append(f"accepted a mutated message of {len(data)} bytes")

    seconds = timed(run)
    report("decode fuzz (mutated + random inputs)", inputs / seconds, "inputs/s",
           f"{inputs} inputs: {refused} refused, {unchanged} unchanged originals, {len(failures)} failures")
    for line in failures[:5]:
        print("  FAILURE", line)
    return not failures


def bench_dispute(job: str, steps: int, strategy: str, seed: int) -> bool:
    """One whole dispute on a real training job, from both parties' training to the verdict."""
    from node.cli.dispute_sim import simulate
    from repops_cupy.jobspec import load_job
    from repops_cupy.train import TrainingProgram

    training = TrainingProgram(load_job(job).with_steps(steps))
    seconds = timed(lambda: training.graph)
    spec = training.spec
    report("dispute: trace the step graph", seconds, "s",
           f"{job}: {spec.model.kind}, {len(training.graph)} nodes per step, {steps} steps, checkpoint every "
           f"{spec.checkpoint_interval}")
    result = None

    def run():
        nonlocal result
        result = simulate(training, strategy, seed=seed)

    total = timed(run)
    t = result.timings
    report("dispute: training (honest run + cheater's)", t.train + t.train_hash, "s",
           f"steps {t.train:.1f} s, state hashing {t.train_hash:.2f} s; cheater: {result.description}")
    game_total = t.replay + t.hash + t.game
    report("dispute: the game, opening to verdict", game_total, "s",
           f"{result.winner} wins at checkpoint {result.located(1)}, step {result.located(2)}, "
           f"node {result.located(3)} ({result.node_name(result.located(3))})")
    for name, value in (("recomputation by the parties", t.replay), ("hashing (states, node outputs)", t.hash),
                        ("game logic (machines, signatures, referee)", t.game)):
        report(f"  {name}", value, "s", f"{100 * value / game_total:.1f} %")
    report("dispute: rounds", result.rounds, "rounds", f"bound {result.bound}")
    report("dispute: bytes exchanged", result.bytes, "bytes", f"{result.messages} messages")
    report("dispute: wall time, all included", total, "s")
    return result.winner == "honest"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=1 << 18)
    parser.add_argument("--proofs", type=int, default=20_000)
    parser.add_argument("--tensor-mib", type=int, default=64)
    parser.add_argument("--fuzz-inputs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dispute-job", default="scripts/jobs/tiny-gpt.toml")
    parser.add_argument("--dispute-steps", type=int, default=200)
    parser.add_argument("--dispute-cheat", default="wrong-op-output")
    parser.add_argument("--dispute-seed", type=int, default=1)
    parser.add_argument("--no-dispute", action="store_true", help="skip the whole-dispute timing")
    parser.add_argument("--dispute-only", action="store_true", help="only the whole-dispute timing")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.leaves, args.proofs, args.tensor_mib, args.fuzz_inputs = 1 << 12, 1000, 4, 2000
        args.dispute_job, args.dispute_steps = "scripts/jobs/mlp.toml", 20
    print(f"{'measurement':<44} {'rate':>14} {'unit':<10} detail")
    ok = True
    if not args.dispute_only:
        bench_merkle(args.leaves, args.proofs)
        bench_tensor_hash(args.tensor_mib)
        messages = corpus()
        bench_envelopes(messages)
        ok = bench_fuzz(messages, args.fuzz_inputs, args.seed)
    if not args.no_dispute:
        ok = bench_dispute(args.dispute_job, args.dispute_steps, args.dispute_cheat, args.dispute_seed) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
