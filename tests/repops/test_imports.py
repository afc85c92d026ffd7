"""repops_cupy imports and computes with numpy and blake3 alone (issue 15): numba is optional.

Without numba the compiled CPU kernels are unavailable and every operator runs its
array code, which is the specification: the same bits.
"""
import subprocess
import sys

import numpy as np

from repops_cupy.hashing import hash_tensor
from repops_cupy.registry import run

CASES = [("exp", {}), ("tanh", {}), ("erf", {}), ("sum", {"axis": (1,)}), ("softmax", {"axis": -1}),
         ("layer_norm", {"eps": 1e-5}), ("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"})]

PROGRAM = """
import sys
for name in ("numba", "torch", "safetensors"):
    sys.modules[name] = None  # import fails
import numpy as np
import repops_cupy.ops
from repops_cupy import cpu_kernels
from repops_cupy.hashing import hash_tensor
from repops_cupy.registry import run
assert not cpu_kernels.AVAILABLE and not cpu_kernels.enabled(np)
x = np.linspace(-9, 9, 3 * 700, dtype=np.float32).reshape(3, 700)
for op, attrs in {cases!r}:
    inputs = (x, x[0], x[1]) if op == "layer_norm" else (x,)
    print(hash_tensor(run(op, inputs, attrs)).hex())
"""


def test_repops_cupy_computes_without_numba_and_gives_the_same_bits():
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(cases=CASES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    x = np.linspace(-9, 9, 3 * 700, dtype=np.float32).reshape(3, 700)
    expected = [hash_tensor(run(op, (x, x[0], x[1]) if op == "layer_norm" else (x,), attrs)).hex()
                for op, attrs in CASES]
    assert done.stdout.split() == expected
