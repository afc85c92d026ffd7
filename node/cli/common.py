"""What the commands share: exit statuses, errors said in one line, durations.

Standard library only: `gavel --help` imports this module.
"""
from __future__ import annotations

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


def describe_os_error(error: OSError) -> str:
    """An OSError in one line: 'PATH: reason' (as ls or cp say it), without '[Errno N]'."""
    reason = error.strerror or str(error)
    if error.filename is None:
        return reason
    if error.filename2 is not None:
        return f"{error.filename} -> {error.filename2}: {reason}"
    return f"{error.filename}: {reason}"


def format_duration(seconds: float) -> str:
    """``1h02m``, ``1m40s`` or ``45s``."""
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
