"""One compute thread per node.

A testnet runs many nodes on a few cores. A node whose kernels fan out over every
core (numba's prange, a threaded BLAS) then mostly waits for its own threads, which
the other nodes keep off the cores: on 2 shared cores a tiny MLP step took 10x
longer that way. The operators give the same bits on any thread count, so this
changes only the speed.
"""
from __future__ import annotations

import os
import sys

THREAD_ENV = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def one_thread_per_node(env: dict[str, str] | None = None) -> dict[str, str]:
    """Set the thread limits in ``env`` (default: this process) unless already set; returns ``env``.

    In this process numba's limit is set through its API, never through
    NUMBA_NUM_THREADS: numba re-reads that variable at every compilation and refuses
    a value that differs from the size of a thread pool it has already started.
    """
    if env is not None:
        for name, value in THREAD_ENV.items():
            env.setdefault(name, value)
        return env
    for name, value in THREAD_ENV.items():
        if name != "NUMBA_NUM_THREADS":
            os.environ.setdefault(name, value)
    if "numba" in sys.modules:  # already imported: its pool size is fixed, its use is not
        import numba

        numba.set_num_threads(1)
    return os.environ
