"""Blob store and blob transfer: ids, end to end, resume, corrupt and lying peers."""
from __future__ import annotations

import os

import pytest
import trio

from node.blobs import (
    BLOB_LIMITS,
    BLOB_PROTOCOL,
    CHUNK_SIZE,
    BlobService,
    BlobStore,
    Manifest,
    blob_id_of,
    chunk_hashes,
)
from node.errors import BlobCorrupt, BlobNotFound, RemoteError, StreamClosed
from node.framing import pack
from repops_cupy.merkle import leaf_hash, merkle_root

from .conftest import counter_value, running_hosts, trio_test

SIZE = 5 * CHUNK_SIZE + 12345  # six chunks, the last one short


def test_blob_id_is_the_merkle_root_over_chunks(tmp_path):
    data = os.urandom(SIZE)
    chunks = [data[i : i + CHUNK_SIZE] for i in range(0, len(data), CHUNK_SIZE)]
    assert blob_id_of(data) == merkle_root(chunks)
    assert chunk_hashes(data) == [leaf_hash(c) for c in chunks]
    store = BlobStore(tmp_path)
    blob_id = store.put_sync(data)
    assert blob_id == blob_id_of(data) and store.has(blob_id) and store.size(blob_id) == SIZE
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    assert store.put_file_sync(source) == blob_id  # same bytes, same id, stored once
    assert store.list() == [blob_id]
    # A new store over the same directory finds the blob and rebuilds a lost hash list.
    store.path(blob_id).with_suffix(".chunks").unlink()
    again = BlobStore(tmp_path)
    assert again.manifest_sync(blob_id).hashes == tuple(chunk_hashes(data)) and again.verify_sync(blob_id)
    with pytest.raises(BlobNotFound):
        again.size(os.urandom(32))
    assert not list((tmp_path / "tmp").iterdir())  # no temporary files left behind


def test_manifest_check_catches_lies():
    data = os.urandom(2 * CHUNK_SIZE + 1)
    good = Manifest(blob_id_of(data), len(data), tuple(chunk_hashes(data)))
    good.check()
    with pytest.raises(BlobCorrupt, match="blob id"):
        Manifest(good.blob_id, good.size, good.hashes[:2] + (os.urandom(32),)).check()
    with pytest.raises(BlobCorrupt, match="chunk hashes"):
        Manifest(good.blob_id, good.size + CHUNK_SIZE, good.hashes).check()


async def _serving(host, tmp_path, name):
    return BlobService(BlobStore(tmp_path / name), host)


@trio_test()
async def test_blob_transfer_end_to_end(tmp_path):
    async with running_hosts(2) as (a, b):
        server, client = await _serving(a, tmp_path, "a"), await _serving(b, tmp_path, "b")
        data = os.urandom(SIZE)
        blob_id = await server.store.put(data)
        path = await client.fetch(a.peer_id, blob_id)
        assert path.read_bytes() == data and client.store.has(blob_id)
        assert counter_value(b.metrics.blob_bytes_fetched) == SIZE
        # Already there: no second transfer. The empty blob works too.
        await client.fetch(a.peer_id, blob_id)
        assert counter_value(b.metrics.blob_bytes_fetched) == SIZE
        empty = await server.store.put(b"")
        assert (await client.fetch(a.peer_id, empty)).read_bytes() == b""
        with pytest.raises(RemoteError, match="no blob"):
            await client.fetch(a.peer_id, os.urandom(32))


def _evil_server(blob: bytes, *, cut_after: int | None = None, corrupt: int | None = None, lie_manifest=False):
    """A peer speaking the blob protocol dishonestly: it drops the stream after
    ``cut_after`` chunks, flips a byte of chunk ``corrupt``, or sends a manifest
    that does not match the id."""
    hashes = chunk_hashes(blob)
    blob_id = blob_id_of(blob)
    sent = 0

    async def serve(framed):
        nonlocal sent
        while True:
            request = await framed.receive_map("op")
            if request["op"] == "manifest":
                listed = hashes[::-1] if lie_manifest else hashes
                await framed.send_obj({"ok": True, "size": len(blob), "hashes": b"".join(listed)})
                continue
            for i in range(request["start"], request["start"] + request["count"]):
                if cut_after is not None and sent >= cut_after:
                    await framed.reset()
                    return
                chunk = bytearray(blob[i * CHUNK_SIZE : (i + 1) * CHUNK_SIZE])
                if i == corrupt:
                    chunk[100] ^= 0x01
                await framed.send(i.to_bytes(4, "big") + bytes(chunk))
                sent += 1

    return blob_id, serve


@trio_test(timeout=30)
async def test_download_resumes_from_verified_chunks_after_a_disconnect(tmp_path):
    data = os.urandom(SIZE)
    async with running_hosts(3) as (good, flaky, client_host):
        honest = await _serving(good, tmp_path, "good")
        blob_id = await honest.store.put(data)
        blob_id_evil, serve = _evil_server(data, cut_after=3)
        assert blob_id_evil == blob_id
        flaky.handle(BLOB_PROTOCOL, serve, BLOB_LIMITS)
        client = await _serving(client_host, tmp_path, "client")
        with pytest.raises(StreamClosed):
            await client.fetch(flaky.peer_id, blob_id)
        # The reset may overtake the last chunk sent before it (the transport drops what the
        # reader had not taken yet): what was kept is a verified prefix.
        partial = client.store.open_partial_sync(blob_id)
        kept = sorted(partial.have)
        assert kept == list(range(len(kept))) and 1 <= len(kept) <= 3
        fetched_before = counter_value(client_host.metrics.blob_bytes_fetched)
        assert fetched_before == len(kept) * CHUNK_SIZE
        # The honest peer is asked only for the missing chunks.
        path = await client.fetch(good.peer_id, blob_id)
        assert path.read_bytes() == data
        assert counter_value(client_host.metrics.blob_bytes_fetched) == SIZE
        assert client.store.open_partial_sync(blob_id) is None


@trio_test(timeout=30)
async def test_resume_after_restart_rehashes_the_partial_file(tmp_path):
    data = os.urandom(SIZE)
    async with running_hosts(2) as (flaky, client_host):
        blob_id, serve = _evil_server(data, cut_after=4)
        flaky.handle(BLOB_PROTOCOL, serve, BLOB_LIMITS)
        client = await _serving(client_host, tmp_path, "client")
        with pytest.raises(StreamClosed):
            await client.fetch(flaky.peer_id, blob_id)
        kept = sorted(client.store.open_partial_sync(blob_id).have)  # a prefix; the reset may overtake chunk 3
        assert kept == list(range(len(kept))) and 2 <= len(kept) <= 4
    # A new store over the same directory (as after a crash) trusts only bytes that hash right.
    part = next((tmp_path / "client" / "partial").glob("*.part"))
    with open(part, "r+b") as f:
        f.seek(CHUNK_SIZE + 7)
        f.write(b"\xff")  # chunk 1 damaged on disk
    reopened = BlobStore(tmp_path / "client")
    assert sorted(reopened.open_partial_sync(blob_id).have) == [i for i in kept if i != 1]
    async with running_hosts(2) as (good, client_host):
        honest = await _serving(good, tmp_path, "good")
        await honest.store.put(data)
        client = BlobService(reopened, client_host)
        assert (await client.fetch(good.peer_id, blob_id)).read_bytes() == data
        assert counter_value(client_host.metrics.blob_bytes_fetched) == SIZE - (len(kept) - 1) * CHUNK_SIZE


@trio_test(timeout=30)
async def test_corrupted_chunk_is_rejected_and_named(tmp_path):
    data = os.urandom(SIZE)
    async with running_hosts(3) as (good, evil, client_host):
        honest = await _serving(good, tmp_path, "good")
        await honest.store.put(data)
        blob_id, serve = _evil_server(data, corrupt=2)
        evil.handle(BLOB_PROTOCOL, serve, BLOB_LIMITS)
        client = await _serving(client_host, tmp_path, "client")
        with pytest.raises(BlobCorrupt, match="chunk 2 ") as caught:
            await client.fetch(evil.peer_id, blob_id)
        assert caught.value.peer == evil.peer_id
        assert counter_value(client_host.metrics.peer_errors, kind="BlobCorrupt") == 1
        # Nothing from the bad chunk on was kept.
        assert sorted(client.store.open_partial_sync(blob_id).have) == [0, 1]
        # Trying peers in order: the corrupt one fails, the honest one completes it.
        path = await client.fetch_from_any([evil.peer_id, good.peer_id], blob_id)
        assert path.read_bytes() == data


@trio_test()
async def test_manifest_that_does_not_match_the_id_is_rejected(tmp_path):
    data = os.urandom(SIZE)
    async with running_hosts(2) as (evil, client_host):
        blob_id, serve = _evil_server(data, lie_manifest=True)
        evil.handle(BLOB_PROTOCOL, serve, BLOB_LIMITS)
        client = await _serving(client_host, tmp_path, "client")
        with pytest.raises(BlobCorrupt, match="blob id"):
            await client.fetch(evil.peer_id, blob_id)
        assert client.store.open_partial_sync(blob_id) is None
        with pytest.raises(BlobNotFound, match="no peer delivered"):
            await client.fetch_from_any([evil.peer_id], blob_id)


@trio_test()
async def test_blob_server_rejects_bad_ranges(tmp_path):
    async with running_hosts(2) as (a, b):
        server = await _serving(a, tmp_path, "a")
        blob_id = await server.store.put(os.urandom(CHUNK_SIZE * 2))
        framed = await b.open_stream(a.peer_id, BLOB_PROTOCOL, BLOB_LIMITS)
        async with framed:
            await framed.send(pack({"op": "chunks", "id": blob_id, "start": 1, "count": 5}))
            with pytest.raises(StreamClosed):
                await framed.receive()
        await trio.sleep(0.05)
        assert counter_value(a.metrics.peer_errors, kind="BadMessage") == 1
