"""What every trio task of this process is waiting on, written on request (SIGUSR1).

A run whose tasks all wait on something that never comes looks idle to a sampling profiler
(the loop sits in its poll, the worker threads in their queues); the await chain of each
task names what it waits for.
"""
from __future__ import annotations

import signal
from pathlib import Path

import trio


def task_tree() -> str:
    """Every task under this run's root, indented by nursery, each with its await frames."""
    lines: list[str] = []

    def walk(task: trio.lowlevel.Task, depth: int) -> None:
        pad = "  " * depth
        lines.append(f"{pad}- {task.name}")
        for frame, lineno in task.iter_await_frames():
            lines.append(f"{pad}    {frame.f_code.co_filename}:{lineno} {frame.f_code.co_name}")
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child, depth + 1)

    walk(trio.lowlevel.current_root_task(), 0)
    return "\n".join(lines) + "\n"


async def dump_tasks_on_signal(path: Path, signum: int = signal.SIGUSR1) -> None:
    """Until cancelled: on each ``signum``, write `task_tree` to ``path`` (replacing the last)."""
    with trio.open_signal_receiver(signum) as signals:
        async for _ in signals:
            partial = trio.Path(path).with_suffix(".partial")  # a reader never sees half a tree
            await partial.write_text(task_tree())
            await partial.replace(path)


__all__ = ["dump_tasks_on_signal", "task_tree"]
