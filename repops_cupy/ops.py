"""Every operator of the library, registered: import this module to fill the registry.

Each op module registers its operators when it is imported; this module imports
them all, so `registry.names()` after `import repops_cupy.ops` is the complete list
a referee can recompute.
"""
from __future__ import annotations

import importlib

from .registry import get, names, run, vjp  # noqa: F401 - re-exported

OP_MODULES = (
    "elementwise",
    "shape",
    "reduce",
    "transcendental",
    "nn",
    "matmul",
    "optim",
    "conv",
)

for _module in OP_MODULES:
    importlib.import_module(f"{__package__}.{_module}")
