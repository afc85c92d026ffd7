"""repops_cupy imports, computes and trains with numpy and blake3 alone (issue 15).

numba, torch, safetensors, the network stack (trio, libp2p, web3, PyNaCl, msgpack) and
the command line's rich are optional: without numba every operator runs its array code,
without torch the matrix product takes the float64 engine; both are the specification's
bits. What needs a missing package says which when it is used: checkpoint files
(safetensors), the "int8" and "torch" GEMM engines (torch). Modules that exist to drive
one of those packages -- the compiled kernels (numba), the torch bridge and the
rounding-log mode (torch) -- are the only ones that may fail to import.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from repops_cupy.hashing import hash_tensor
from repops_cupy.registry import run

CASES = [("exp", {}), ("tanh", {}), ("erf", {}), ("sum", {"axis": (1,)}), ("softmax", {"axis": -1}),
         ("layer_norm", {"eps": 1e-5}), ("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"})]
HIDDEN = ("numba", "torch", "safetensors", "trio", "libp2p", "web3", "nacl", "msgpack", "eth_tester", "rich")
# modules that exist to drive a hidden package
NEED_HIDDEN = ("repops_cupy.cpu_kernels.", "repops_cupy.torch_bridge", "repops_cupy.roundlog")
ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "scripts" / "jobs" / "tiny-gpt.toml")

PROGRAM = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None  # import fails
import pkgutil
import numpy as np
import repops_cupy
import repops_cupy.ops
from repops_cupy import cpu_kernels
from repops_cupy.errors import OpError
from repops_cupy.hashing import hash_tensor, state_hash
from repops_cupy.registry import run
assert not cpu_kernels.AVAILABLE and not cpu_kernels.enabled(np)
x = np.linspace(-9, 9, 3 * 700, dtype=np.float32).reshape(3, 700)
for op, attrs in {cases!r}:
    inputs = (x, x[0], x[1]) if op == "layer_norm" else (x,)
    print(hash_tensor(run(op, inputs, attrs)).hex())

# one training step of a small GPT
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram
program = TrainingProgram(load_job({job!r}))
print(state_hash(program.run_step(program.initial_state()).state).hex())

# what needs a missing package names it
from repops_cupy.checkpoint import save_checkpoint
from repops_cupy.matmul import matmul
try:
    save_checkpoint("never-written.safetensors", {{"w": x}}, step=0)
except ImportError as exc:
    print("checkpoint:", "safetensors" in str(exc))
for engine in ("int8", "torch"):
    try:
        matmul(x, x.T, engine=engine)
    except OpError as exc:
        print(engine + ":", "needs the torch package" in str(exc))
from repops_cupy import gpu_kernels  # the fused GPU kernels' module needs numpy alone (CuPy at launch)
from repops_cupy.matmul import int8_ready
print("int8 engine:", int8_ready(np), "fused on numpy:", gpu_kernels.enabled(np))
failed = []
for m in pkgutil.walk_packages(repops_cupy.__path__, "repops_cupy."):
    try:
        __import__(m.name)
    except ImportError:
        failed.append(m.name)
print("failed:", " ".join(failed))
"""


def test_repops_cupy_computes_and_trains_without_the_optional_packages_and_gives_the_same_bits(tmp_path):
    from repops_cupy.hashing import state_hash
    from repops_cupy.jobspec import load_job
    from repops_cupy.train import TrainingProgram

    source = PROGRAM.format(hidden=HIDDEN, cases=CASES, job=JOB)
    path = os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    x = np.linspace(-9, 9, 3 * 700, dtype=np.float32).reshape(3, 700)
    expected = [hash_tensor(run(op, (x, x[0], x[1]) if op == "layer_norm" else (x,), attrs)).hex()
                for op, attrs in CASES]
    assert lines[:len(CASES)] == expected
    program = TrainingProgram(load_job(JOB))  # here with numba and torch's int8 engine, when present
    assert lines[len(CASES)] == state_hash(program.run_step(program.initial_state()).state).hex()
    assert lines[len(CASES) + 1:len(CASES) + 5] == ["checkpoint: True", "int8: True", "torch: True",
                                                    "int8 engine: False fused on numpy: False"]
    assert not (tmp_path / "never-written.safetensors").exists()
    failed = lines[-1].removeprefix("failed: ").split()
    assert all(name.startswith(NEED_HIDDEN) for name in failed), failed
