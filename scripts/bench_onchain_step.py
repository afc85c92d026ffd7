"""Benchmark of the on-chain one-step verifier's parts (issue 18; docs/onchain-step.md).

    python scripts/bench_onchain_step.py [--cases 200] [--tensor-mib 4] [--repeats 5]

1. Gas of each primitive step of Float64Step.sol on the embedded EVM: mean and largest over
   edge cases and random, close-exponent, boundary and tie cases, measured in the EVM around
   the library call; and the gas of a whole transaction running the dearest case through the harness (21000 of it
   the transaction's base cost).
2. Gas of opening one 1 KiB chunk of a tensor of --tensor-mib MiB in each chunk tree (keccak,
   BLAKE3), inside the EVM and as a whole transaction (calldata included).
3. Python time to hash the same tensor: today's `repops_cupy.hashing.hash_tensor` (the
   baseline, measured in the same run), the keccak chunk tree, and the numpy BLAKE3 chunk tree
   (the proof side); printed as ratios against the baseline. Medians over --repeats.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from contracts.abi import ContractAbi
from contracts.artifacts import load_artifact
from contracts.chain import EmbeddedChain
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200, help="structured and random cases per kind and step")
    parser.add_argument("--tensor-mib", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    chain = EmbeddedChain()
    step_gas(chain, args.cases)
    tensor = np.random.default_rng(0).standard_normal((args.tensor_mib << 20) // 4).astype(np.float32)
    chunk_gas(chain, tensor.tobytes())
    hashing_throughput(tensor, args.repeats)


if __name__ == "__main__":
    main()
