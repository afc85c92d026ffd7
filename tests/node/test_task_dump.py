"""node.task_dump: what each trio task awaits, written when the process gets SIGUSR1."""
import os
import signal

import trio
import trio.testing

from node.task_dump import dump_tasks_on_signal, task_tree


async def _waits_for_the_event(event: trio.Event) -> None:
    await event.wait()


def test_the_tree_names_each_task_and_the_frame_it_waits_in():
    async def main() -> str:
        event = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_waits_for_the_event, event, name="the-waiter")
            await trio.testing.wait_all_tasks_blocked()
            tree = task_tree()
            event.set()
        return tree

    tree = trio.run(main)
    lines = tree.splitlines()
    waiter = next(i for i, line in enumerate(lines) if line.strip() == "- the-waiter")
    # the waiter's own frames follow its line, deeper than the task that started it
    assert any("_waits_for_the_event" in line for line in lines[waiter + 1:])
    main_line = next(i for i, line in enumerate(lines) if line.strip().endswith("main"))
    assert len(lines[waiter]) - len(lines[waiter].lstrip()) > len(lines[main_line]) - len(lines[main_line].lstrip())


def test_sigusr1_writes_the_tree_to_the_file(tmp_path):
    path = tmp_path / "tasks.txt"

    async def main() -> str:
        event = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_waits_for_the_event, event, name="the-waiter")
            nursery.start_soon(dump_tasks_on_signal, path)
            await trio.testing.wait_all_tasks_blocked()
            os.kill(os.getpid(), signal.SIGUSR1)
            while not path.exists():
                await trio.sleep(0.01)
            event.set()
            nursery.cancel_scope.cancel()
        return path.read_text()

    assert "- the-waiter" in trio.run(main)
