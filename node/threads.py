"""How many threads a training run's compiled kernels (numba, torch) may use.

On a machine whose cores are busy, the kernels' thread gangs wait at every parallel
region for a member the scheduler has put aside: a step then takes many times longer
than on one thread (measured on 2 busy cores: a tiny-gpt step 139 ms on one thread,
920 ms on numba's two, about 4 s with torch's two as well). A run therefore uses every
core but one, which the node's event loop (or the rest of the machine) keeps.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def kernel_threads() -> int:
    """Threads for a run's compiled kernels: every core this process may use but one, which
    its event loop and network keep (at least one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


@contextmanager
def limit_kernel_threads(n: int) -> Iterator[None]:
    """Run this thread's numba and torch kernels on at most `n` threads; restored on exit.

    numba's setting belongs to the calling thread; torch's is also its default for threads
    that start using it meanwhile. A lower limit already in force (NUMBA_NUM_THREADS,
    OMP_NUM_THREADS, as a testnet sets them) is kept.
    """
    restore = []
    try:
        import numba
    except ImportError:  # the kernels then run as array code, on no threads of their own
        numba = None
    if numba is not None:
        before = numba.get_num_threads()
        numba.set_num_threads(min(n, before))
        restore.append(lambda: numba.set_num_threads(before))
    try:
        import torch
    except ImportError:  # the int8 engine is unavailable without torch
        torch = None
    if torch is not None:
        torch_before = torch.get_num_threads()
        torch.set_num_threads(min(n, torch_before))
        restore.append(lambda: torch.set_num_threads(torch_before))
    try:
        yield
    finally:
        for undo in restore:
            undo()
