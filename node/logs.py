"""Logging set up once per process, libp2p's logger included.

libp2p configures its own logger at import: no handlers, ``propagate = False``, so
its warnings reach stderr through Python's last-resort handler, and a failed dial
prints several of them. We import it first (so its set-up has run), then route it
through our handler at its own, quieter level.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
LEVELS = ("debug", "info", "warning", "error", "critical")

_handler: logging.Handler | None = None


def _level(name: str) -> int:
    if name.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {name!r}")
    return getattr(logging, name.upper())


def configure_logging(level: str = "info", *, libp2p_level: str = "critical", file: Path | None = None) -> None:
    """Install one handler on the root logger; later calls only change the levels."""
    global _handler
    import libp2p  # noqa: F401  (its import-time logging set-up must run before ours)

    root = logging.getLogger()
    if _handler is None:
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            _handler = logging.FileHandler(file)
        else:
            _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(_handler)
    root.setLevel(_level(level))
    lib = logging.getLogger("libp2p")
    lib.handlers.clear()
    lib.propagate = True
    lib.setLevel(_level(libp2p_level))
    # Some libp2p modules pin their own level (the auto-connector logs every
    # 10 s at INFO); make them follow the libp2p logger.
    import libp2p.network.swarm  # noqa: F401  (imports the auto-connector)

    for name, child in logging.root.manager.loggerDict.items():
        if name.startswith("libp2p.") and isinstance(child, logging.Logger):
            child.setLevel(logging.NOTSET)
    # multiaddr and the async service helpers log through their own names.
    for name in ("multiaddr", "async_service"):
        logging.getLogger(name).setLevel(_level(libp2p_level))
