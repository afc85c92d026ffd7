"""Benchmark of the on-chain one-step verifier's parts (issue 18; docs/onchain-step.md).

    python scripts/bench_onchain_step.py [--cases 200] [--tensor-mib 4] [--repeats 5]
    python scripts/bench_onchain_step.py --fourth-level [--job scripts/jobs/tiny-gpt.toml] [--seeds 12]

1. Gas of each primitive step of Float64Step.sol on the embedded EVM: mean and largest over
   edge cases and random, close-exponent, boundary and tie cases, measured in the EVM around
   the library call; and the gas of a whole transaction running the dearest case through the harness (21000 of it
   the transaction's base cost).
2. Gas of opening one 1 KiB chunk of a tensor of --tensor-mib MiB in each chunk tree (keccak,
   BLAKE3), inside the EVM and as a whole transaction (calldata included).
3. Python time to hash the same tensor: today's `repops_cupy.hashing.hash_tensor` (the
   baseline, measured in the same run), the keccak chunk tree, and the numpy BLAKE3 chunk tree
   (the proof side); printed as ratios against the baseline. Medians over --repeats.

With --fourth-level: the fourth level and the one-step ruling on the embedded EVM, at the
job's own shapes. (a) For every covered operator of one training step, its node with the
longest element program: a cheating defender wrong from a random step on (rounds, gas of
each kind of transaction) and a cheat located at the step with the most input openings
(the dearest ruling). (b) Whole disputes (`gavel dispute-sim --on-chain-step`) with the
wrong-op-output cheat for --seeds seeds: levels 1-3 off chain as today, then level 4 on chain.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from contracts.abi import ContractAbi
from contracts.artifacts import load_artifact
from contracts.embedded_chain import EmbeddedChain
from protocol import chunk_tree as T
from protocol import float64_steps as F
from repops_cupy.hashing import hash_tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the case generators live with the tests
from tests.contracts.test_float64_step_contract import operands_for  # noqa: E402


def _deploy(chain: EmbeddedChain, name: str) -> tuple[str, ContractAbi]:
    artifact = load_artifact(name)
    receipt = chain.transact(chain.accounts[0], None, artifact.bytecode, gas=8_000_000)
    return receipt.contract_address, ContractAbi(artifact.abi)


def _call(chain: EmbeddedChain, address: str, abi: ContractAbi, name: str, *args):
    return abi.decode_result(name, chain.call(address, abi.encode_call(name, *args)))


def step_gas(chain: EmbeddedChain, cases: int) -> None:
    address, abi = _deploy(chain, "Float64StepHarness")
    print(f"{'step':<20}{'cases':>7}{'mean gas':>10}{'max gas':>9}{'dearest as tx':>15}")
    for name, step in sorted(F.STEPS.items(), key=lambda item: item[1].code):
        operands = operands_for(name, np.random.default_rng(step.code), cases, all_edges=False)
        padded = operands + [[0] * len(operands[0])] * (3 - step.arity)
        gas = [g for lo in range(0, len(padded[0]), 400)
               for g in _call(chain, address, abi, "gasOf", step.code, *(c[lo:lo + 400] for c in padded))[0]]
        dearest = int(np.argmax(gas))
        one = abi.encode_call("run", step.code, *([c[dearest]] for c in padded))
        tx = chain.estimate_gas(chain.accounts[0], address, one)
        print(f"{name:<20}{len(gas):>7}{statistics.fmean(gas):>10.0f}{max(gas):>9}{tx:>15}")


def chunk_gas(chain: EmbeddedChain, data: bytes) -> None:
    address, abi = _deploy(chain, "TensorChunkHarness")
    count = T.chunk_count(len(data))
    keccak_root, blake3_root = T.keccak_chunk_root(data), T.blake3_chunk_root(data)
    print(f"\none 1 KiB chunk of {len(data) >> 20} MiB ({count} chunks): gas in the EVM, whole transaction")
    for index in (0, count - 1):
        chunk, keccak_siblings = T.keccak_chunk_proof(data, index)
        _, blake3_siblings = T.blake3_chunk_proof(data, index)
        keccak_gas, blake3_gas = _call(chain, address, abi, "gasOf", keccak_root, blake3_root, chunk, index, count,
                                       keccak_siblings, blake3_siblings)
        keccak_tx = chain.estimate_gas(chain.accounts[0], address, abi.encode_call(
            "verifyKeccak", keccak_root, chunk, index, count, keccak_siblings))
        blake3_tx = chain.estimate_gas(chain.accounts[0], address, abi.encode_call(
            "verifyBlake3", blake3_root, chunk, index, count, blake3_siblings))
        print(f"  chunk {index:>5}: keccak {keccak_gas:>8} ({keccak_tx} tx, {len(keccak_siblings)} siblings)   "
              f"BLAKE3 {blake3_gas:>8} ({blake3_tx} tx, {len(blake3_siblings)} siblings)")


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hashing_throughput(tensor: np.ndarray, repeats: int) -> None:
    data = tensor.tobytes()
    mib = len(data) / (1 << 20)
    baseline = _median_seconds(lambda: hash_tensor(tensor), repeats)
    rows = [("hash_tensor (BLAKE3, today: the baseline)", baseline),
            ("keccak chunk tree (eth_hash, 1 KiB leaves)", _median_seconds(lambda: T.keccak_chunk_root(data), repeats)),
            ("BLAKE3 chunk tree in numpy (proof side)", _median_seconds(lambda: T.blake3_chunk_root(data), repeats)),
            ("one BLAKE3 chunk proof in numpy", _median_seconds(lambda: T.blake3_chunk_proof(data, 0), repeats))]
    print(f"\nhashing a {mib:.0f} MiB float32 tensor, median of {repeats}")
    for label, seconds in rows:
        print(f"  {label:<45}{seconds * 1e3:>9.2f} ms {mib / seconds:>9.0f} MiB/s  x{seconds / baseline:>7.1f}")


def _dearest_step(spec) -> int:
    """The step whose operands need the most input chunk openings (the first such)."""
    from protocol.step_trace import INPUT
    counts = [sum(o.kind == INPUT for o in instr.operands) for instr in spec.program]
    return counts.index(max(counts))


def fourth_level_per_operator(job: str) -> None:
    from contracts.step_verifier import StepVerifier, play
    from node.cli.train import load_training
    from node.training_oracle import TrainingOracle
    from protocol.step_game import StepPlayer, cheat_values, claimed_output, make_setup
    from protocol.step_programs import COVERED, trace_element

    training = load_training(job, 1)
    oracle = TrainingOracle(training)
    values = oracle.step_values(1, oracle.state_before(1))
    graph = training.graph
    rng = np.random.default_rng(0)
    best: dict[str, tuple[int, int]] = {}
    for node in graph.nodes:
        if node.is_leaf or node.op not in COVERED or int(np.prod(node.shape)) == 0:
            continue
        inputs = [np.asarray(values[m]) for m in node.inputs]
        length = trace_element(node.op, dict(node.attrs), inputs, 0).spec.length
        if length > best.get(node.op, (-1, -1))[0]:
            best[node.op] = (length, node.id)
    chain = EmbeddedChain()
    verifier = StepVerifier.deploy(chain)
    accounts = (chain.accounts[1], chain.accounts[2])
    print(f"fourth level per operator ({job}, step 1; the node with the longest element program of each op)")
    print(f"{'op':15s} {'steps':>6s} {'rounds':>6s} {'open':>8s} {'commit':>9s} {'reveal':>8s} {'rule':>9s} "
          f"{'dearest rule':>12s} {'game total':>11s}")
    worst = (0, "")
    for op in sorted(best):
        length, node_id = best[op]
        node = graph.nodes[node_id]
        inputs = [np.asarray(values[m]) for m in node.inputs]
        output = np.asarray(values[node_id])
        element = int(rng.integers(0, output.size))
        honest = trace_element(op, dict(node.attrs), inputs, element)
        row = []
        for at in (None, _dearest_step(honest.spec)):
            bad = cheat_values(honest.spec, element, inputs, honest.values, rng, "step", at=at)
            claimed = claimed_output(output, element, bad[-1])
            setup = make_setup(honest.spec, element, inputs, (output, claimed))
            players = (StepPlayer(setup, 0, honest.values, output, inputs), StepPlayer(setup, 1, bad, claimed, inputs))
            game = play(verifier, setup, players, accounts, ruler=0)
            assert game.outcome == "challenger-won", (op, game.outcome)
            row.append(game)
            worst = max(worst, (game.worst.gas, f"{op} {game.worst.name}"))
        g, dear = row

        def most(game, name):
            return max((t.gas for t in game.transactions if t.name == name), default=0)

        print(f"{op:15s} {length:6d} {g.rounds:6d} {most(g, 'open'):8,d} {most(g, 'commit'):9,d} "
              f"{most(g, 'reveal'):8,d} {most(g, 'rule'):9,d} {most(dear, 'rule'):12,d} {g.total_gas:11,d}")
    print(f"worst single transaction: {worst[1]}, {worst[0]:,} gas")


def wrong_output_of(op: str):
    """A cheat like wrong-op-output, its flipped node drawn among `op`'s nodes only (built here from
    node.cheats' own pieces, so a benchmark can aim a whole dispute at one operator)."""
    from node.cheats import WRONG_RESULT, Cheat, Truth, WrongNodeOutput, _deviating, _draw, flip_bit

    def strategy(ctx):
        graph = ctx.training.graph
        nodes = [n.id for n in graph.nodes if n.op == op and np.prod(n.shape, dtype=np.int64) > 0]

        def draw():
            at, node = ctx.rng.randint(1, ctx.steps), ctx.rng.choice(nodes)
            index = ctx.rng.randrange(int(np.prod(graph.nodes[node].shape, dtype=np.int64)))
            bit = ctx.rng.randrange(23)
            oracle = _deviating(WrongNodeOutput, ctx, at=at, node=node, change=lambda v: flip_bit(v, index, bit))
            return oracle, at, f"flips bit {bit} of element {index} of node {node} ({op}) at step {at}"

        oracle, _, what = _draw(ctx, draw)
        return Cheat(f"wrong-{op}-output", oracle, Truth(oracle.at, oracle.node, WRONG_RESULT, 3), what)
    return strategy


def whole_disputes(job: str, seeds: int, ops: Sequence[str] = ()) -> None:
    from node.cli.dispute_sim import simulate
    from node.cli.onchain_step import play_fourth_level
    from node.cli.train import load_training
    from node.training_oracle import TrainingOracle

    training = load_training(job, 4)
    honest = TrainingOracle(training)
    print(f"\nwhole disputes ({job}, 4 steps, wrong-op-output, the cheater the provider)")
    from node.cheats import STRATEGIES
    runs = [("wrong-op-output", seed) for seed in range(seeds)]
    for op in ops:  # aimed at one operator: registered for this process only
        STRATEGIES[f"wrong-{op}-output"] = wrong_output_of(op)
        runs.append((f"wrong-{op}-output", 0))
    for strategy, seed in runs:
        result = simulate(training, strategy, seed=seed, honest=honest)
        fourth = play_fourth_level(result, honest, seed=seed)
        head = f"{strategy} seed {seed:2d}: levels 1-3 {result.rounds} rounds off chain ({result.winner} wins at the referee)"
        if fourth is None or not fourth.covered:
            print(head + f"; node {fourth.node if fourth else '?'} ({fourth.op if fourth else '?'}) not covered")
            continue
        g = fourth.game
        print(head + f"; level 4 on chain: {fourth.op} ({fourth.program_length} steps), {g.rounds} rounds, "
              f"{len(g.transactions)} transactions, {g.total_gas:,} gas, worst {g.worst.name} {g.worst.gas:,}, "
              f"{fourth.outcome}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200, help="structured and random cases per kind and step")
    parser.add_argument("--tensor-mib", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fourth-level", action="store_true", help="the fourth level's rounds and gas instead")
    parser.add_argument("--job", default="scripts/jobs/tiny-gpt.toml")
    parser.add_argument("--seeds", type=int, default=12, help="whole disputes played with --fourth-level")
    parser.add_argument("--aim", nargs="*", default=["matmul", "softmax", "layer_norm"],
                        help="operators to aim one more whole dispute at each")
    parser.add_argument("--skip-operators", action="store_true", help="with --fourth-level: whole disputes only")
    args = parser.parse_args()
    if args.fourth_level:
        if not args.skip_operators:
            fourth_level_per_operator(args.job)
        whole_disputes(args.job, args.seeds, args.aim)
        return
    chain = EmbeddedChain()
    step_gas(chain, args.cases)
    tensor = np.random.default_rng(0).standard_normal((args.tensor_mib << 20) // 4).astype(np.float32)
    chunk_gas(chain, tensor.tobytes())
    hashing_throughput(tensor, args.repeats)


if __name__ == "__main__":
    main()
