"""What this node computed for each job it holds a seat of (`RoleContext.trained`).

The provider puts a `TrainedJob` in ``ctx.trained`` once its reveal is mined; the defender
(posting lists and evidence), the data service (serving items) and anyone else of the node
read it by job id. Nothing in it is secret any more: the trace is on chain and the salt
opened the commitment.

Persistence: `TrainedJobs.add` writes ``trained-v2.msgpack`` into the job's directory
(``<data dir>/jobs/<job id hex>/``, `jobfiles.job_dir`) before it registers the job, and a
restarted node rebuilds the registry with `TrainedJobs.load_sync(make_oracle)`: every job
directory holding that file gives a `TrainedJob` again, with the oracle factory
``make_oracle(job)`` returns (the provider's: it reloads the job's training from
``job.toml`` and answers from the checkpoint files under ``run/``, as version 1's
`runner.StoredRunOracle`). The checkpoint files and the step hashes file themselves are
the run's and are not copied.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import trio

from ...atomic_file import write_atomic
from ...errors import LocalError, PeerError
from ...framing import pack, unpack
from ..jobfiles import RUN_DIR, job_dir

log = logging.getLogger(__name__)

TRAINED_FILE = "trained-v2.msgpack"

OracleFactory = Callable[[], Awaitable[Any]]  # -> protocol.TraceOracle over the seat's own checkpoints


@dataclass
class TrainedJob:
    """One seat's run of a job: what it revealed and where its files are."""

    job_id: bytes
    directory: Path  # the job directory
    trace: tuple[bytes, ...]  # the revealed trace: the C + 1 checkpoint state hashes
    salt: bytes  # the salt the reveal opened the commitment with
    bundle_id: bytes  # the job bundle's blob id (item 0 of the data duty)
    checkpoint_files: tuple[str, ...]  # checkpoint c's file name under ``directory / run``
    step_hashes: str = ""  # the file (under ``directory``) of the per-step state hashes, "" when not recorded
    oracle_factory: OracleFactory | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.checkpoint_files) != len(self.trace):
            raise ValueError(f"{len(self.trace)} trace entries and {len(self.checkpoint_files)} checkpoint files")

    @property
    def intervals(self) -> int:
        """C: the trace covers checkpoints 0..C."""
        return len(self.trace) - 1

    def checkpoint_path(self, c: int) -> Path:
        """The file of checkpoint ``c`` (0..C)."""
        if not 0 <= c < len(self.trace):
            raise LocalError(f"job {self.job_id.hex()[:12]} has checkpoints 0..{self.intervals}, not {c}")
        return self.directory / RUN_DIR / self.checkpoint_files[c]

    async def oracle(self) -> Any:
        """The job's `TraceOracle` over this seat's checkpoints (built by the provider's factory)."""
        if self.oracle_factory is None:
            raise LocalError(f"job {self.job_id.hex()[:12]}: no oracle factory was registered with its run")
        return await self.oracle_factory()

    def to_record(self) -> dict:
        return {"job": self.job_id, "trace": list(self.trace), "salt": self.salt, "bundle": self.bundle_id,
                "files": list(self.checkpoint_files), "steps": self.step_hashes}

    @classmethod
    def from_record(cls, directory: Path, record: Any) -> "TrainedJob":
        try:
            return cls(bytes(record["job"]), Path(directory), tuple(bytes(h) for h in record["trace"]),
                       bytes(record["salt"]), bytes(record["bundle"]), tuple(str(f) for f in record["files"]),
                       str(record["steps"]))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise LocalError(f"{Path(directory) / TRAINED_FILE}: not a trained job record ({error})") from None


class TrainedJobs:
    """The node's registry: job id -> `TrainedJob`, kept in each job's directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._jobs: dict[bytes, TrainedJob] = {}

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __getitem__(self, job_id: bytes) -> TrainedJob:
        return self._jobs[job_id]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def get(self, job_id: bytes) -> TrainedJob | None:
        return self._jobs.get(job_id)

    async def add(self, job: TrainedJob) -> None:
        """Write the job's record into its directory, then register it."""
        await trio.to_thread.run_sync(self.save_sync, job)
        self._jobs[job.job_id] = job

    def save_sync(self, job: TrainedJob) -> None:
        write_atomic(Path(job.directory) / TRAINED_FILE, pack(job.to_record()))

    def load_sync(self, make_oracle: Callable[[TrainedJob], OracleFactory | None] | None = None) -> list[bytes]:
        """Register every job whose directory holds a record (a restart); returns their ids. A
        record that does not read (a damaged disk) is skipped with one warning naming it."""
        loaded = []
        root = self.data_dir / "jobs"
        for path in sorted(root.glob(f"*/{TRAINED_FILE}")) if root.exists() else []:
            try:
                job = TrainedJob.from_record(path.parent, unpack(path.read_bytes()))
                if job_dir(self.data_dir, job.job_id) != path.parent:
                    raise LocalError(f"{path} names job {job.job_id.hex()}, not its directory's")
            except (PeerError, LocalError, OSError) as error:
                log.warning("trained jobs: skipping %s: %s", path, error)
                continue
            if make_oracle is not None:
                job.oracle_factory = make_oracle(job)
            self._jobs[job.job_id] = job
            loaded.append(job.job_id)
        return loaded


__all__ = ["TRAINED_FILE", "OracleFactory", "TrainedJob", "TrainedJobs"]
