"""A machine's answer to a costly probe, kept on disk so that each process need not ask again.

The int8 engine's saturation probe (`_matmul_engines.probe_int8`) multiplies about two
billion int8 pairs: 6 s on one core of a CPU without VNNI, paid by every `gavel train`,
`gavel replay` and node process before its first product. Its answer depends only on
the machine and the software, so it is kept under a key the caller makes of the CPU's
identity (model and feature flags), the packages' releases, the ISA limits in the
environment and the probe's own source: another CPU, another torch or a changed probe
finds no answer and probes again. A missing, unreadable or unwritable cache only means
probing again.

Where: ``$GAVEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/gavel``, else ``~/.cache/gavel``.
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import tempfile
from pathlib import Path
from typing import Callable

CACHE_ENV = "GAVEL_CACHE_DIR"
CPUINFO = Path("/proc/cpuinfo")
_CPU_FIELDS = ("model name", "flags", "Features", "CPU implementer", "CPU part")  # x86 and ARM


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gavel"


@functools.cache
def cpu_identity() -> str:
    """The first CPU's model and feature flags (Linux), else what `platform` says."""
    try:
        lines = CPUINFO.read_text().split("\n\n")[0].splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    return "\n".join(line for line in lines if line.split(":")[0].strip() in _CPU_FIELDS)


def remembered(name: str, key: str, probe: Callable[[], bool]) -> bool:
    """probe()'s answer for `key`, from the cache when an earlier process stored it there."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    path = cache_dir() / f"{name}-{digest}"
    try:
        stored = path.read_text()
    except (OSError, UnicodeDecodeError):
        stored = ""
    if stored in ("yes", "no"):
        return stored == "yes"
    answer = bool(probe())
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".", delete=False) as tmp:
            tmp.write("yes" if answer else "no")
        os.replace(tmp.name, path)  # whole or absent: a process reading meanwhile probes itself
    except OSError:
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)
    return answer
