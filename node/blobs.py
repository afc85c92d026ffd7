"""Content-addressed blobs on disk, and a chunked, verified, resumable transfer protocol.

Blob id: the Merkle root (``repops_cupy.merkle``, leaf/inner domain separation) over
the leaf hashes of the blob's 256 KiB chunks (the last one shorter). A fetcher first
gets the chunk-hash list, checks it against the id, then checks every chunk against
its hash as it arrives: a peer that sends one wrong byte is caught at that chunk,
named, and dropped, and nothing it sent is kept. Chunk lengths follow from the hashes,
so the id binds the size too.

Store layout under ``root``::

    objects/ab/abcdef….blob     complete blobs, written to tmp/, fsynced, renamed
    objects/ab/abcdef….chunks   their chunk-hash lists (32 bytes per chunk)
    partial/abcdef….part        a download in progress (sparse, chunks at offsets)
    partial/abcdef….chunks      its verified chunk-hash list
    tmp/                        files being written

A partial download resumes from the chunks it already has: in the same process from
the set recorded while fetching, after a restart by re-hashing the ``.part`` file.

Wire protocol (``/gavel/blob/1.0.0``), one stream, many requests, msgpack maps:
  → {"op": "manifest", "id": <32 bytes>}
  ← {"ok": true, "size": n, "hashes": <32·chunks bytes>} | {"ok": false, "error": "…"}
  → {"op": "chunks", "id": …, "start": i, "count": c}      (c ≤ MAX_CHUNKS_PER_REQUEST)
  ← c raw frames, each a 4-byte big-endian chunk index followed by the chunk
"""
from __future__ import annotations

import logging
import os
import secrets
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import trio
from libp2p.peer.id import ID

from repops_cupy.merkle import leaf_hash, merkle_root_of_hashes

from .errors import BadMessage, BlobCorrupt, BlobNotFound, LocalError, PeerError, RemoteError
from .framing import FramedStream, unpack
from .streams import StreamLimits

log = logging.getLogger(__name__)

BLOB_PROTOCOL = "/gavel/blob/1.0.0"
CHUNK_SIZE = 256 * 1024
HASH_SIZE = 32
MAX_CHUNKS = 64 * 1024  # 16 GiB per blob: the hash list then fits one 2 MiB frame
MAX_CHUNKS_PER_REQUEST = 64
_INDEX = struct.Struct(">I")
BLOB_LIMITS = StreamLimits(
    max_frame=MAX_CHUNKS * HASH_SIZE + 1024, read_timeout=10.0, write_timeout=10.0, idle_timeout=60.0
)
_COPY_BLOCK = 4 * 1024 * 1024


# -- ids and manifests -------------------------------------------------------------


def chunk_count(size: int) -> int:
    return -(-size // CHUNK_SIZE)


def chunk_hashes(data: bytes | memoryview) -> list[bytes]:
    view = memoryview(data)
    return [leaf_hash(bytes(view[i : i + CHUNK_SIZE])) for i in range(0, len(view), CHUNK_SIZE)]


def blob_id_of(data: bytes | memoryview) -> bytes:
    """The id a blob with these bytes has."""
    return merkle_root_of_hashes(chunk_hashes(data))


@dataclass(frozen=True)
class Manifest:
    """A blob's size and chunk hashes; ``check`` ties them to ``blob_id``."""

    blob_id: bytes
    size: int
    hashes: tuple[bytes, ...]

    def chunk_length(self, index: int) -> int:
        return min(CHUNK_SIZE, self.size - index * CHUNK_SIZE)

    def check(self, *, peer: object = None) -> None:
        n = chunk_count(self.size)
        if self.size < 0 or n > MAX_CHUNKS:
            raise BlobCorrupt(f"blob size {self.size} out of range", peer=peer)
        if len(self.hashes) != n or any(len(h) != HASH_SIZE for h in self.hashes):
            raise BlobCorrupt(f"manifest lists {len(self.hashes)} chunk hashes for {n} chunks", peer=peer)
        if merkle_root_of_hashes(list(self.hashes)) != self.blob_id:
            raise BlobCorrupt("manifest does not hash to the blob id", peer=peer)

    def encode_hashes(self) -> bytes:
        return b"".join(self.hashes)

    @classmethod
    def decode(cls, blob_id: bytes, size: Any, hashes: Any, *, peer: object = None) -> "Manifest":
        if not isinstance(size, int) or not isinstance(hashes, bytes) or len(hashes) % HASH_SIZE:
            raise BadMessage("malformed blob manifest", peer=peer)
        return cls(blob_id, size, tuple(hashes[i : i + HASH_SIZE] for i in range(0, len(hashes), HASH_SIZE)))


def _check_id(blob_id: Any) -> bytes:
    if not isinstance(blob_id, bytes) or len(blob_id) != HASH_SIZE:
        raise LocalError("a blob id is 32 bytes")
    return blob_id


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the store ---------------------------------------------------------------------


@dataclass
class Partial:
    """A download in progress: its verified manifest and the chunks already on disk."""

    manifest: Manifest
    path: Path
    have: set[int] = field(default_factory=set)

    def missing(self) -> list[int]:
        return [i for i in range(len(self.manifest.hashes)) if i not in self.have]


class BlobStore:
    """Blobs on disk under ``root``. Methods named ``*_sync`` block (run them in a
    thread or at start-up); the async ones move disk-heavy work to a worker thread."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._objects = self.root / "objects"
        self._partial = self.root / "partial"
        self._tmp = self.root / "tmp"
        for d in (self._objects, self._partial, self._tmp):
            d.mkdir(parents=True, exist_ok=True)
        # Leftovers of writes cut short by a crash; the data directory's lock means
        # no other process is writing here.
        for leftover in self._tmp.iterdir():
            leftover.unlink(missing_ok=True)
        self._partials: dict[bytes, Partial] = {}
        self._manifests: dict[bytes, Manifest] = {}

    # paths
    def path(self, blob_id: bytes) -> Path:
        h = _check_id(blob_id).hex()
        return self._objects / h[:2] / f"{h}.blob"

    def _hashes_path(self, blob_id: bytes) -> Path:
        return self.path(blob_id).with_suffix(".chunks")

    def has(self, blob_id: bytes) -> bool:
        return self.path(blob_id).is_file()

    def size(self, blob_id: bytes) -> int:
        try:
            return self.path(blob_id).stat().st_size
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {blob_id.hex()}") from None

    def list(self) -> list[bytes]:
        return sorted(bytes.fromhex(p.stem) for p in self._objects.glob("*/*.blob"))

    # writing
    def _write_atomic(self, target: Path, parts: Iterable[bytes]) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp / f"{target.name}.{secrets.token_hex(8)}"
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)

    def put_sync(self, data: bytes) -> bytes:
        hashes = chunk_hashes(data)
        blob_id = merkle_root_of_hashes(hashes)
        if not self.has(blob_id):
            # Hash list first: a blob file that exists always has its list or can rebuild it.
            self._write_atomic(self._hashes_path(blob_id), [b"".join(hashes)])
            self._write_atomic(self.path(blob_id), [data])
        self._manifests[blob_id] = Manifest(blob_id, len(data), tuple(hashes))
        return blob_id

    async def put(self, data: bytes) -> bytes:
        """Store ``data``; return its blob id. Durable when this returns."""
        return await trio.to_thread.run_sync(self.put_sync, bytes(data))

    def put_file_sync(self, source: Path) -> bytes:
        hashes: list[bytes] = []
        tmp = self._tmp / f"import.{secrets.token_hex(8)}"
        size = 0
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            while chunk := src.read(CHUNK_SIZE):
                hashes.append(leaf_hash(chunk))
                dst.write(chunk)
                size += len(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        blob_id = merkle_root_of_hashes(hashes)
        if self.has(blob_id):
            tmp.unlink()
        else:
            self._write_atomic(self._hashes_path(blob_id), [b"".join(hashes)])
            target = self.path(blob_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        self._manifests[blob_id] = Manifest(blob_id, size, tuple(hashes))
        return blob_id

    async def put_file(self, source: Path) -> bytes:
        """Copy a file into the store without loading it whole; return its blob id."""
        return await trio.to_thread.run_sync(self.put_file_sync, Path(source))

    # reading
    async def get(self, blob_id: bytes) -> bytes:
        path = self.path(blob_id)
        try:
            return await trio.to_thread.run_sync(path.read_bytes)
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {blob_id.hex()}") from None

    def manifest_sync(self, blob_id: bytes) -> Manifest:
        cached = self._manifests.get(blob_id)
        if cached is not None:
            return cached
        size = self.size(blob_id)
        try:
            raw = self._hashes_path(blob_id).read_bytes()
            manifest = Manifest.decode(blob_id, size, raw)
            manifest.check()
        except (FileNotFoundError, PeerError):
            with open(self.path(blob_id), "rb") as f:
                hashes = []
                while chunk := f.read(CHUNK_SIZE):
                    hashes.append(leaf_hash(chunk))
            manifest = Manifest(blob_id, size, tuple(hashes))
            self._write_atomic(self._hashes_path(blob_id), [manifest.encode_hashes()])
        if len(self._manifests) > 4096:
            self._manifests.clear()
        self._manifests[blob_id] = manifest
        return manifest

    async def manifest(self, blob_id: bytes) -> Manifest:
        if blob_id in self._manifests:
            await trio.lowlevel.checkpoint()
            return self._manifests[blob_id]
        return await trio.to_thread.run_sync(self.manifest_sync, blob_id)

    def verify_sync(self, blob_id: bytes) -> bool:
        """Re-hash a stored blob; False if its bytes no longer match its id."""
        with open(self.path(blob_id), "rb") as f:
            return merkle_root_of_hashes(chunk_hashes(f.read())) == blob_id

    def delete(self, blob_id: bytes) -> None:
        for p in (self.path(blob_id), self._hashes_path(blob_id)):
            p.unlink(missing_ok=True)
        self._manifests.pop(blob_id, None)

    # partial downloads
    def _partial_paths(self, blob_id: bytes) -> tuple[Path, Path]:
        h = blob_id.hex()
        return self._partial / f"{h}.part", self._partial / f"{h}.chunks"

    def open_partial_sync(self, blob_id: bytes) -> Partial | None:
        """The download in progress for ``blob_id``, if any; after a restart its
        chunks are re-hashed, so only bytes that match count."""
        if blob_id in self._partials:
            return self._partials[blob_id]
        part, hashes_file = self._partial_paths(blob_id)
        if not (part.is_file() and hashes_file.is_file()):
            return None
        raw = hashes_file.read_bytes()
        size_bytes, raw = raw[:8], raw[8:]
        try:
            manifest = Manifest.decode(blob_id, int.from_bytes(size_bytes, "big"), raw)
            manifest.check()
        except PeerError:
            part.unlink(missing_ok=True)
            hashes_file.unlink(missing_ok=True)
            return None
        partial = Partial(manifest, part)
        with open(part, "rb") as f:
            for i, expected in enumerate(manifest.hashes):
                f.seek(i * CHUNK_SIZE)
                if leaf_hash(f.read(manifest.chunk_length(i))) == expected:
                    partial.have.add(i)
        self._partials[blob_id] = partial
        return partial

    def begin_partial_sync(self, manifest: Manifest) -> Partial:
        part, hashes_file = self._partial_paths(manifest.blob_id)
        self._write_atomic(hashes_file, [manifest.size.to_bytes(8, "big"), manifest.encode_hashes()])
        with open(part, "wb") as f:
            f.truncate(manifest.size)
        partial = Partial(manifest, part)
        self._partials[manifest.blob_id] = partial
        return partial

    def finish_partial_sync(self, partial: Partial) -> None:
        if partial.missing():
            raise LocalError("partial blob still misses chunks")
        blob_id = partial.manifest.blob_id
        with open(partial.path, "rb+") as f:
            os.fsync(f.fileno())
        self._write_atomic(self._hashes_path(blob_id), [partial.manifest.encode_hashes()])
        target = self.path(blob_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial.path, target)
        _fsync_dir(target.parent)
        self._partial_paths(blob_id)[1].unlink(missing_ok=True)
        self._partials.pop(blob_id, None)
        self._manifests[blob_id] = partial.manifest


# -- the transfer protocol ---------------------------------------------------------


def _runs(indices: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """Contiguous (start, count) runs of sorted ``indices``, each at most ``limit`` long."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][0] + runs[-1][1] == i and runs[-1][1] < limit:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


class BlobService:
    """Serves the local store over ``BLOB_PROTOCOL`` and fetches blobs from peers."""

    def __init__(self, store: BlobStore, host: Any) -> None:
        self.store = store
        self.host = host
        self._locks: dict[bytes, trio.Lock] = {}
        host.handle(BLOB_PROTOCOL, self._serve, BLOB_LIMITS)

    # serving
    async def _serve(self, framed: FramedStream) -> None:
        files: dict[bytes, Any] = {}
        try:
            while True:
                request = await framed.receive_next(first_timeout=BLOB_LIMITS.idle_timeout)
                if request is None:
                    return
                await self._answer(framed, request, files)
        finally:
            for f in files.values():
                f.close()

    async def _answer(self, framed: FramedStream, raw: bytes, files: dict[bytes, Any]) -> None:
        request = unpack(raw, peer=framed.peer_id)
        if not isinstance(request, dict) or request.get("op") not in ("manifest", "chunks"):
            raise BadMessage("unknown blob request", peer=framed.peer_id)
        blob_id = request.get("id")
        if not isinstance(blob_id, bytes) or len(blob_id) != HASH_SIZE:
            raise BadMessage("blob request without a 32-byte id", peer=framed.peer_id)
        if not self.store.has(blob_id):
            await framed.send_obj({"ok": False, "error": "not found"})
            return
        manifest = await self.store.manifest(blob_id)
        if request["op"] == "manifest":
            await framed.send_obj({"ok": True, "size": manifest.size, "hashes": manifest.encode_hashes()})
            return
        start, count = request.get("start"), request.get("count")
        n = len(manifest.hashes)
        if not (
            isinstance(start, int)
            and isinstance(count, int)
            and 0 <= start < n
            and 1 <= count <= MAX_CHUNKS_PER_REQUEST
            and start + count <= n
        ):
            raise BadMessage(f"bad chunk range {start!r}+{count!r} of {n}", peer=framed.peer_id)
        f = files.get(blob_id)
        if f is None:
            if len(files) >= 8:
                files.pop(next(iter(files))).close()
            f = files[blob_id] = open(self.store.path(blob_id), "rb")
        for i in range(start, start + count):
            # A 256 KiB read from the page cache; short enough for the event loop.
            chunk = os.pread(f.fileno(), manifest.chunk_length(i), i * CHUNK_SIZE)
            await framed.send(_INDEX.pack(i) + chunk)

    # fetching
    async def fetch(self, peer: ID, blob_id: bytes) -> Path:
        """Fetch ``blob_id`` from ``peer`` into the store (resuming a partial download);
        return its path. A wrong manifest or chunk raises ``BlobCorrupt`` naming the
        peer and the chunk, and nothing from that chunk on is kept."""
        _check_id(blob_id)
        lock = self._locks.setdefault(blob_id, trio.Lock())
        async with lock:
            if self.store.has(blob_id):
                await trio.lowlevel.checkpoint()
                return self.store.path(blob_id)
            framed = await self.host.open_stream(peer, BLOB_PROTOCOL, BLOB_LIMITS)
            try:
                await self._fetch_on(framed, blob_id)
            except PeerError as error:
                self.host.metrics.peer_error(error)
                await framed.reset()
                raise
            finally:
                await framed.close()
                if not lock.statistics().tasks_waiting:
                    self._locks.pop(blob_id, None)
            return self.store.path(blob_id)

    async def fetch_from_any(self, peers: Sequence[ID], blob_id: bytes) -> Path:
        """Try ``peers`` in order, each failure (corrupt data included) moving to the next."""
        errors: list[str] = []
        for peer in peers:
            try:
                return await self.fetch(peer, blob_id)
            except PeerError as error:
                log.info("fetching blob %s: %s", blob_id.hex()[:16], error)
                errors.append(str(error))
        raise BlobNotFound(f"no peer delivered blob {blob_id.hex()}: {'; '.join(errors) or 'no peers'}")

    async def _fetch_on(self, framed: FramedStream, blob_id: bytes) -> None:
        peer = framed.peer_id
        partial = await trio.to_thread.run_sync(self.store.open_partial_sync, blob_id)
        if partial is None:
            await framed.send_obj({"op": "manifest", "id": blob_id})
            answer = await framed.receive_obj()
            if not isinstance(answer, dict) or "ok" not in answer:
                raise BadMessage("malformed manifest answer", peer=peer)
            if not answer["ok"]:
                raise RemoteError(f"peer has no blob {blob_id.hex()[:16]}…: {answer.get('error')!s:.200}", peer=peer)
            manifest = Manifest.decode(blob_id, answer.get("size"), answer.get("hashes"), peer=peer)
            manifest.check(peer=peer)
            if manifest.size == 0:
                await trio.to_thread.run_sync(self.store.put_sync, b"")
                return
            partial = await trio.to_thread.run_sync(self.store.begin_partial_sync, manifest)
        manifest = partial.manifest
        fd = os.open(partial.path, os.O_WRONLY)
        try:
            for start, count in _runs(partial.missing(), MAX_CHUNKS_PER_REQUEST):
                await framed.send_obj({"op": "chunks", "id": blob_id, "start": start, "count": count})
                for i in range(start, start + count):
                    frame = await framed.receive(max_frame=_INDEX.size + CHUNK_SIZE)
                    if len(frame) < _INDEX.size or _INDEX.unpack_from(frame)[0] != i:
                        raise BadMessage(f"expected chunk {i}", peer=peer)
                    chunk = memoryview(frame)[_INDEX.size :]
                    if len(chunk) != manifest.chunk_length(i) or leaf_hash(bytes(chunk)) != manifest.hashes[i]:
                        raise BlobCorrupt(f"chunk {i} of blob {blob_id.hex()[:16]}… does not match its hash", peer=peer)
                    os.pwrite(fd, chunk, i * CHUNK_SIZE)
                    partial.have.add(i)
                    self.host.metrics.blob_bytes_fetched.inc(len(chunk))
        finally:
            os.close(fd)
        await trio.to_thread.run_sync(self.store.finish_partial_sync, partial)


__all__ = [
    "BLOB_PROTOCOL",
    "CHUNK_SIZE",
    "BlobService",
    "BlobStore",
    "Manifest",
    "blob_id_of",
    "chunk_hashes",
]
