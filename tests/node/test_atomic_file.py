"""node.atomic_file: whole-file replacement that concurrent writers of one path survive."""
import os
import threading

import pytest

from node.atomic_file import write_atomic


def test_threads_writing_one_path_at_once_all_succeed_and_the_file_holds_one_whole_write(tmp_path):
    # Two deliveries of one piece of evidence land at once: with one shared temporary name the
    # second rename found its temporary gone (FileNotFoundError) and the referee's task died.
    path = tmp_path / "held" / "evidence"
    payloads = [bytes([n]) * 50_000 for n in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(payloads))

    def writer(payload: bytes) -> None:
        start.wait()
        try:
            for _ in range(40):
                write_atomic(path, payload)
        except BaseException as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert path.read_bytes() in payloads
    assert sorted(p.name for p in path.parent.iterdir()) == ["evidence"]  # no temporary left behind


def test_text_is_written_as_utf8_with_the_mode_asked(tmp_path):
    path = tmp_path / "api"
    write_atomic(path, "pid: 1 ✓\n", mode=0o600)
    assert path.read_text() == "pid: 1 ✓\n"
    assert os.stat(path).st_mode & 0o777 == 0o600 & ~_umask()


def test_a_write_that_cannot_replace_its_target_leaves_the_target_and_no_temporary(tmp_path):
    target = tmp_path / "record"
    target.mkdir()  # a directory where the file should go: os.replace refuses
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    assert (target / "inside").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
