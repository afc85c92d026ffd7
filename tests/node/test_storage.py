"""SQLite storage: schema, accessors, equivocation evidence, durability across reopen and kill -9."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
import trio

from node.errors import LocalError
from node.storage import SCHEMA_VERSION, Commitment, Dispute, Job, Storage


def _commitment(seq: int, root: bytes, signer: bytes = b"S" * 32) -> Commitment:
    return Commitment(job_id=b"J" * 32, role="provider", signer=signer, seq=seq, root=root, signature=b"\x01" * 64)


def test_pragmas_and_schema(tmp_path):
    with Storage(tmp_path / "db") as db:
        assert db.schema_version == SCHEMA_VERSION
        conn = db._conn()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    db.close()  # twice is fine
    with pytest.raises(LocalError, match="closed"):
        db.jobs()


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "db"
    Storage(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(LocalError, match="schema"):
        Storage(path)


def test_a_schema_2_database_keeps_its_rows_and_marks_final_with_blocks_after_migrating(tmp_path):
    from node.storage import MIGRATIONS

    path = tmp_path / "db"
    raw = sqlite3.connect(path)  # a database as schema 2 left it, with a job the keeper saw final
    for migration in MIGRATIONS[:2]:
        raw.executescript(migration)
    raw.execute("PRAGMA user_version = 2")
    raw.execute("INSERT INTO jobs(job_id, spec, role, state, updated) VALUES (?, x'00', 'client', 'settled', 1.0)",
                (b"o" * 32,))
    raw.execute("INSERT INTO final_on_chain(job_id, status, seen) VALUES (?, 'FINALIZED', 1.0)", (b"o" * 32,))
    raw.commit()
    raw.close()
    with Storage(path) as db:
        assert db.schema_version == SCHEMA_VERSION
        assert db.get_job(b"o" * 32).state == "settled" and db.final_status(b"o" * 32) == "FINALIZED"
        for job_id in (b"p" * 32, b"q" * 32, b"r" * 32):
            db.put_job(Job(job_id, b"", "provider", "delivered"))
        db.mark_final(b"p" * 32, "FINALIZED", 10)
        db.mark_final(b"q" * 32, "REFUNDED", 12)
        db.mark_final(b"r" * 32, "REFUNDED", 14)
        assert db.jobs_not_final() == []
        # A reorganisation from block 12: what was seen final there or later is read again;
        # the row from before the migration (block unknown, 0) stays.
        assert sorted(db.unmark_final_from(12)) == [b"q" * 32, b"r" * 32]
        assert sorted(db.jobs_not_final()) == [b"q" * 32, b"r" * 32]
        assert db.final_status(b"p" * 32) == "FINALIZED" and db.final_status(b"o" * 32) == "FINALIZED"
        assert db.unmark_final_from(12) == []


def test_accessors_round_trip(tmp_path):
    with Storage(tmp_path / "db") as db:
        db.put_job(Job(b"a" * 32, b"spec-a", "provider", "training"))
        db.put_job(Job(b"b" * 32, b"spec-b", "auditor", "done"))
        db.set_job_state(b"a" * 32, "committed")
        assert db.get_job(b"a" * 32).state == "committed" and db.get_job(b"c" * 32) is None
        assert [j.job_id for j in db.jobs(role="auditor")] == [b"b" * 32]
        assert db.count_jobs_by_state() == {"committed": 1, "done": 1}
        with pytest.raises(LocalError):
            db.set_job_state(b"z" * 32, "x")

        assert db.add_commitment(_commitment(0, b"r0")) is None
        assert db.add_commitment(_commitment(1, b"r1")) is None
        assert db.add_commitment(_commitment(1, b"r1")) is None  # a repeat is not equivocation
        assert db.add_commitment(_commitment(1, b"r1", signer=b"T" * 32)) is None
        assert [c.root for c in db.commitments(b"J" * 32, signer=b"S" * 32)] == [b"r0", b"r1"]
        assert db.latest_commitment(b"J" * 32, "provider", b"S" * 32).seq == 1

        db.put_dispute(Dispute(b"d" * 32, b"a" * 32, b"\x81\xa1s\x01", "open"))
        db.put_dispute(Dispute(b"d" * 32, b"a" * 32, b"\x81\xa1s\x02", "won"))
        assert db.get_dispute(b"d" * 32).state == b"\x81\xa1s\x02"
        assert db.count_disputes_by_status() == {"won": 1}

        db.peer_failed("peerA")
        db.peer_failed("peerA")
        assert db.get_peer("peerA").failures == 2
        db.peer_seen("peerA", ["/ip4/127.0.0.1/tcp/1"])
        assert db.get_peer("peerA").failures == 0 and db.get_peer("peerA").addrs == ["/ip4/127.0.0.1/tcp/1"]


def test_two_roots_for_one_sequence_number_return_the_evidence(tmp_path):
    with Storage(tmp_path / "db") as db:
        db.add_commitment(_commitment(3, b"honest"))
        first = db.add_commitment(_commitment(3, b"other"))
        assert first is not None and first.root == b"honest"
        assert [c.root for c in db.commitments(b"J" * 32)] == [b"honest"]  # the first is kept


def test_async_access_through_a_worker_thread(tmp_path):
    async def main():
        db = Storage(tmp_path / "db")
        try:
            await db.run(db.put_job, Job(b"a" * 32, b"s", "client", "new"))
            return await db.run(db.get_job, b"a" * 32)
        finally:
            db.close()

    assert trio.run(main).state == "new"


def test_writes_survive_reopen_and_kill_9(tmp_path):
    path = tmp_path / "db"
    # A child writes, reports, and is killed with SIGKILL before it can close anything.
    child = textwrap.dedent(
        f"""
        import os, signal, sys
        from node.storage import Storage, Commitment, Job
        db = Storage({str(path)!r})
        db.put_job(Job(b"k" * 32, b"spec", "provider", "training"))
        for seq in range(20):
            db.add_commitment(Commitment(b"k" * 32, "provider", b"S" * 32, seq, bytes([seq]) * 32, b"s" * 64))
        print("written", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "written" and result.returncode == -9
    with Storage(path) as db:
        assert db.get_job(b"k" * 32).state == "training"
        assert [c.seq for c in db.commitments(b"k" * 32)] == list(range(20))
        db.set_job_state(b"k" * 32, "done")
    with Storage(path) as db:
        assert db.get_job(b"k" * 32).state == "done"
    assert os.path.exists(path)
