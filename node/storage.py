"""The node's SQLite database: jobs, commitments, disputes, peers, jobs final on chain, and
settlement version 2's follower position and party jobs.

WAL mode with ``synchronous=FULL``: a write that returned has been fsynced, so a
signed commitment we announced survives a crash (a node that forgot its own
commitment could be made to sign a different root for the same sequence number,
which is equivocation). The schema version lives in ``PRAGMA user_version``;
``MIGRATIONS[i]`` upgrades version ``i`` to ``i + 1`` inside one transaction.

The accessors are plain blocking calls (each a few fsyncs at most): from async code
call them through ``await db.run(db.put_job, job)``, which uses one worker thread.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import trio

from .errors import LocalError

T = TypeVar("T")

MIGRATIONS: list[str] = [
    # 0 -> 1
    """
    CREATE TABLE jobs (
        job_id   BLOB PRIMARY KEY,
        spec     BLOB NOT NULL,
        role     TEXT NOT NULL,
        state    TEXT NOT NULL,
        updated  REAL NOT NULL
    );
    CREATE INDEX jobs_by_state ON jobs(state);
    CREATE TABLE commitments (
        job_id    BLOB NOT NULL,
        role      TEXT NOT NULL,
        signer    BLOB NOT NULL,
        seq       INTEGER NOT NULL,
        root      BLOB NOT NULL,
        signature BLOB NOT NULL,
        body      BLOB NOT NULL DEFAULT x'',
        received  REAL NOT NULL,
        PRIMARY KEY (job_id, role, signer, seq)
    );
    CREATE TABLE disputes (
        dispute_id BLOB PRIMARY KEY,
        job_id     BLOB NOT NULL,
        state      BLOB NOT NULL,
        status     TEXT NOT NULL,
        updated    REAL NOT NULL
    );
    CREATE INDEX disputes_by_job ON disputes(job_id);
    CREATE TABLE peers (
        peer_id   TEXT PRIMARY KEY,
        addrs     TEXT NOT NULL,
        last_seen REAL NOT NULL,
        failures  INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 1 -> 2: the keeper's memory of which jobs are over on chain (never read again)
    """
    CREATE TABLE final_on_chain (
        job_id  BLOB PRIMARY KEY,
        status  TEXT NOT NULL,
        seen    REAL NOT NULL
    );
    """,
    # 2 -> 3: the block at which each job was seen final, so a reorganisation from a block
    # at or below it un-marks the job. Rows from before it say 0 (not known; never un-marked).
    """
    ALTER TABLE final_on_chain ADD COLUMN block INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX final_on_chain_by_block ON final_on_chain(block);
    """,
    # 3 -> 4: settlement version 2. The chain follower's position per contract (the next
    # block and log to hand, and the hash of the block before it, so a resumed node notices
    # a chain that changed while it was down), and the jobs the version-2 keeper pushes on.
    """
    CREATE TABLE follower_position (
        contract   TEXT PRIMARY KEY,
        block      INTEGER NOT NULL,
        log_index  INTEGER NOT NULL,
        anchor     TEXT NOT NULL
    );
    CREATE TABLE party_jobs (
        job_id  BLOB PRIMARY KEY,
        since   INTEGER NOT NULL
    );
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True)
class Job:
    job_id: bytes
    spec: bytes  # the protocol's encoded job spec, opaque here
    role: str  # our role in it: provider, auditor, client
    state: str
    updated: float = 0.0


@dataclass(frozen=True)
class Commitment:
    """A signed root: ``signer`` (32-byte Ed25519 key) says the ``seq``-th root of
    ``job_id`` in ``role`` is ``root``. ``body`` keeps the full signed message."""

    job_id: bytes
    role: str
    signer: bytes
    seq: int
    root: bytes
    signature: bytes
    body: bytes = b""
    received: float = 0.0


@dataclass(frozen=True)
class Dispute:
    dispute_id: bytes
    job_id: bytes
    state: bytes  # the dispute game's state, msgpack, opaque here
    status: str  # open, won, lost, ...
    updated: float = 0.0


@dataclass(frozen=True)
class PeerRecord:
    peer_id: str
    addrs: list[str]
    last_seen: float
    failures: int = 0


# Told of every move of a job's state or a dispute's status: (table, old, new); old is None
# for a new row. Called under the storage lock, in the order of the writes: keep it short.
StateWatcher = Callable[[str, "str | None", str], None]


class Storage:
    """One SQLite file; thread-safe (one connection behind a lock).

    The only writes of a job's state and a dispute's status are ``put_job``,
    ``set_job_state`` and ``put_dispute``; each tells the watchers (``watch_states``) of the
    move it made, so what follows them (the metrics' state gauges) cannot drift from the rows."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._limiter = trio.CapacityLimiter(1)
        self._db: sqlite3.Connection | None = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=10.0
        )
        self._db.row_factory = sqlite3.Row
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise LocalError(f"{self.path}: cannot use WAL mode (got {mode})")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        self._watchers: list[StateWatcher] = []

    # -- plumbing --------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise LocalError("storage is closed")
        return self._db

    def _migrate(self) -> None:
        db = self._conn()
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise LocalError(f"{self.path} has schema {version}; this gavel knows up to {SCHEMA_VERSION}")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            db.execute("BEGIN IMMEDIATE")
            try:
                for statement in MIGRATIONS[target - 1].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {target}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self._conn().execute("PRAGMA user_version").fetchone()[0]

    def _write(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self._lock:
            return self._conn().execute(sql, args).rowcount

    def _move(self, table: str, key: str, row_id: bytes, column: str, new: str, sql: str, args: Sequence[Any]) -> int:
        """Write a row's state (``column`` of ``table``) and tell the watchers what moved."""
        with self._lock:
            db = self._conn()
            found = db.execute(f"SELECT {column} FROM {table} WHERE {key}=?", (row_id,)).fetchone()
            count = db.execute(sql, args).rowcount
            old = found[0] if found else None
            if count and old != new:
                for watcher in self._watchers:
                    watcher(table, old, new)
            return count

    def watch_states(self, watcher: StateWatcher) -> dict[str, dict[str, int]]:
        """Tell ``watcher`` of every later state move; returns the counts it starts from
        ({"jobs": by state, "disputes": by status}), read under the same lock."""
        with self._lock:
            db = self._conn()
            counts = {
                "jobs": dict(db.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall()),
                "disputes": dict(db.execute("SELECT status, count(*) FROM disputes GROUP BY status").fetchall()),
            }
            self._watchers.append(watcher)
            return counts

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn().execute(sql, args).fetchall()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Call an accessor from async code without blocking the event loop."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def close(self) -> None:
        """Safe to call twice."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> "Storage":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- jobs ------------------------------------------------------------------

    def put_job(self, job: Job) -> Job:
        stored = Job(job.job_id, job.spec, job.role, job.state, job.updated or time.time())
        self._move(
            "jobs", "job_id", stored.job_id, "state", stored.state,
            "INSERT INTO jobs(job_id, spec, role, state, updated) VALUES (?,?,?,?,?)"
            " ON CONFLICT(job_id) DO UPDATE SET spec=excluded.spec, role=excluded.role,"
            " state=excluded.state, updated=excluded.updated",
            (stored.job_id, stored.spec, stored.role, stored.state, stored.updated),
        )
        return stored

    def set_job_state(self, job_id: bytes, state: str) -> None:
        if not self._move("jobs", "job_id", job_id, "state", state,
                          "UPDATE jobs SET state=?, updated=? WHERE job_id=?", (state, time.time(), job_id)):
            raise LocalError(f"no job {job_id.hex()}")

    def get_job(self, job_id: bytes) -> Job | None:
        rows = self._read("SELECT * FROM jobs WHERE job_id=?", (job_id,))
        return Job(**dict(rows[0])) if rows else None

    def jobs(self, *, state: str | None = None, role: str | None = None) -> list[Job]:
        sql, args = "SELECT * FROM jobs WHERE 1=1", []
        if state is not None:
            sql, args = sql + " AND state=?", args + [state]
        if role is not None:
            sql, args = sql + " AND role=?", args + [role]
        return [Job(**dict(r)) for r in self._read(sql + " ORDER BY updated", args)]

    def count_jobs_by_state(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self._read("SELECT state, count(*) FROM jobs GROUP BY state")}

    # -- jobs final on chain (the keeper's) -----------------------------------------

    def mark_final(self, job_id: bytes, status: str, block: int) -> None:
        """Remember that ``job_id`` is over on chain (``status``: FINALIZED or REFUNDED), as
        seen at ``block`` (at or above the block that made it so)."""
        self._write("INSERT OR IGNORE INTO final_on_chain(job_id, status, seen, block) VALUES (?,?,?,?)",
                    (job_id, status, time.time(), block))

    def unmark_final_from(self, block: int) -> list[bytes]:
        """Forget that the jobs marked final at ``block`` or above are over (a reorganisation
        replaced those blocks); returns their ids."""
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                ids = [r[0] for r in db.execute("SELECT job_id FROM final_on_chain WHERE block >= ?", (block,))]
                db.execute("DELETE FROM final_on_chain WHERE block >= ?", (block,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return ids

    def final_status(self, job_id: bytes) -> str | None:
        rows = self._read("SELECT status FROM final_on_chain WHERE job_id=?", (job_id,))
        return rows[0][0] if rows else None

    def jobs_not_final(self) -> list[bytes]:
        """The ids of the jobs of every role not (yet) known to be over on chain, oldest first."""
        return [r[0] for r in self._read("SELECT job_id FROM jobs WHERE job_id NOT IN"
                                         " (SELECT job_id FROM final_on_chain) ORDER BY updated")]

    # -- settlement version 2: the chain follower's position, the keeper's jobs ---------

    def follower_position(self, contract: str) -> tuple[int, int, str] | None:
        """(next block, next log index in it, anchor) stored for ``contract``: ``anchor`` is the
        hash of the block the position was reached in ("" before any block)."""
        rows = self._read("SELECT block, log_index, anchor FROM follower_position WHERE contract=?", (contract,))
        return (rows[0][0], rows[0][1], rows[0][2]) if rows else None

    def set_follower_position(self, contract: str, block: int, log_index: int, anchor: str) -> None:
        self._write("INSERT INTO follower_position(contract, block, log_index, anchor) VALUES (?,?,?,?)"
                    " ON CONFLICT(contract) DO UPDATE SET block=excluded.block, log_index=excluded.log_index,"
                    " anchor=excluded.anchor", (contract, block, log_index, anchor))

    def add_party_job(self, job_id: bytes, block: int) -> None:
        """Remember a job this node is party to (first seen at ``block``); a repeat keeps the first."""
        self._write("INSERT OR IGNORE INTO party_jobs(job_id, since) VALUES (?,?)", (job_id, block))

    def party_jobs_not_final(self) -> list[bytes]:
        """The jobs this node is party to that are not (yet) known to be over on chain, oldest first."""
        return [r[0] for r in self._read("SELECT job_id FROM party_jobs WHERE job_id NOT IN"
                                         " (SELECT job_id FROM final_on_chain) ORDER BY since, job_id")]

    # -- commitments -----------------------------------------------------------

    def add_commitment(self, c: Commitment) -> Commitment | None:
        """Record ``c``. If the same signer already committed a *different* root for
        the same (job, role, seq), keep the first and return it: the two signed roots
        are proof of equivocation. Returns None when ``c`` is new or a repeat."""
        received = c.received or time.time()
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT * FROM commitments WHERE job_id=? AND role=? AND signer=? AND seq=?",
                    (c.job_id, c.role, c.signer, c.seq),
                ).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO commitments(job_id, role, signer, seq, root, signature, body, received)"
                        " VALUES (?,?,?,?,?,?,?,?)",
                        (c.job_id, c.role, c.signer, c.seq, c.root, c.signature, c.body, received),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        if row is not None and bytes(row["root"]) != c.root:
            return Commitment(**dict(row))
        return None

    def commitments(self, job_id: bytes, *, role: str | None = None, signer: bytes | None = None) -> list[Commitment]:
        sql, args = "SELECT * FROM commitments WHERE job_id=?", [job_id]
        if role is not None:
            sql, args = sql + " AND role=?", args + [role]
        if signer is not None:
            sql, args = sql + " AND signer=?", args + [signer]
        return [Commitment(**dict(r)) for r in self._read(sql + " ORDER BY seq", args)]

    def latest_commitment(self, job_id: bytes, role: str, signer: bytes) -> Commitment | None:
        rows = self._read(
            "SELECT * FROM commitments WHERE job_id=? AND role=? AND signer=? ORDER BY seq DESC LIMIT 1",
            (job_id, role, signer),
        )
        return Commitment(**dict(rows[0])) if rows else None

    # -- disputes --------------------------------------------------------------

    def put_dispute(self, d: Dispute) -> Dispute:
        stored = Dispute(d.dispute_id, d.job_id, d.state, d.status, d.updated or time.time())
        self._move(
            "disputes", "dispute_id", stored.dispute_id, "status", stored.status,
            "INSERT INTO disputes(dispute_id, job_id, state, status, updated) VALUES (?,?,?,?,?)"
            " ON CONFLICT(dispute_id) DO UPDATE SET state=excluded.state, status=excluded.status,"
            " updated=excluded.updated",
            (stored.dispute_id, stored.job_id, stored.state, stored.status, stored.updated),
        )
        return stored

    def get_dispute(self, dispute_id: bytes) -> Dispute | None:
        rows = self._read("SELECT * FROM disputes WHERE dispute_id=?", (dispute_id,))
        return Dispute(**dict(rows[0])) if rows else None

    def disputes(self, *, job_id: bytes | None = None, status: str | None = None) -> list[Dispute]:
        sql, args = "SELECT * FROM disputes WHERE 1=1", []
        if job_id is not None:
            sql, args = sql + " AND job_id=?", args + [job_id]
        if status is not None:
            sql, args = sql + " AND status=?", args + [status]
        return [Dispute(**dict(r)) for r in self._read(sql + " ORDER BY updated", args)]

    def count_disputes_by_status(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self._read("SELECT status, count(*) FROM disputes GROUP BY status")}

    # -- peers -----------------------------------------------------------------

    def peer_seen(self, peer_id: str, addrs: Sequence[str]) -> None:
        """Record a successful contact: addresses refreshed, failures reset."""
        self._write(
            "INSERT INTO peers(peer_id, addrs, last_seen, failures) VALUES (?,?,?,0)"
            " ON CONFLICT(peer_id) DO UPDATE SET addrs=excluded.addrs, last_seen=excluded.last_seen, failures=0",
            (peer_id, json.dumps(list(addrs)), time.time()),
        )

    def peer_failed(self, peer_id: str) -> None:
        self._write(
            "INSERT INTO peers(peer_id, addrs, last_seen, failures) VALUES (?, '[]', 0, 1)"
            " ON CONFLICT(peer_id) DO UPDATE SET failures=failures+1",
            (peer_id,),
        )

    def get_peer(self, peer_id: str) -> PeerRecord | None:
        rows = self._read("SELECT * FROM peers WHERE peer_id=?", (peer_id,))
        return self._peer(rows[0]) if rows else None

    def peers(self) -> list[PeerRecord]:
        return [self._peer(r) for r in self._read("SELECT * FROM peers ORDER BY last_seen DESC")]

    @staticmethod
    def _peer(row: sqlite3.Row) -> PeerRecord:
        return PeerRecord(row["peer_id"], json.loads(row["addrs"]), row["last_seen"], row["failures"])


def read_snapshot(path: Path) -> tuple[list[Job], list[Dispute]]:
    """Every job and dispute in the database at ``path``, read without writing to it (no
    migration, no journal switch): for tools beside a running node, such as ``gavel status``.
    Empty lists when the node never created its database."""
    path = Path(path)
    if not path.exists():
        return [], []
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
    db.row_factory = sqlite3.Row
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] == 0:
            return [], []  # the node is still creating its schema
        jobs = [Job(**dict(r)) for r in db.execute("SELECT * FROM jobs ORDER BY updated")]
        disputes = [Dispute(**dict(r)) for r in db.execute("SELECT * FROM disputes ORDER BY updated")]
        return jobs, disputes
    except sqlite3.Error as error:
        raise LocalError(f"{path}: {error}") from None
    finally:
        db.close()

