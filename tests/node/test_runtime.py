"""The assembled node in-process: two nodes from real data directories."""
from __future__ import annotations

import os

import trio

from node.datadir import init_datadir, load_seed, open_datadir, read_api
from node.runtime import ROLE_RUNNERS, Node
from node.storage import Job

from .conftest import trio_test, wait_until


@trio_test(timeout=30)
async def test_two_nodes_find_each_other_share_blobs_and_record_peers(tmp_path, monkeypatch):
    started_roles = []

    async def provider(node: Node) -> None:
        started_roles.append(node.peer_id)
        await trio.sleep_forever()

    monkeypatch.setitem(ROLE_RUNNERS, "provider", provider)
    config_a = init_datadir(tmp_path / "a", {"roles": ["provider"]})
    init_datadir(tmp_path / "b")
    async with trio.open_nursery() as nursery:
        a: Node = await nursery.start(Node(config_a, load_seed(config_a)).run)
        config_b = open_datadir(tmp_path / "b", {"bootstrap": a.host.listen_addrs, "metrics_listen": ""})
        b = Node(config_b, load_seed(config_b))
        b.record_interval = 0.1
        await nursery.start(b.run)
        assert started_roles == [a.peer_id]
        assert read_api(config_a).addrs == a.host.listen_addrs and read_api(config_b).metrics == ""
        await wait_until(lambda: b.host.is_connected(a.peer_id))
        rtt, card = await b.host.ping(a.peer_id)
        assert card.roles == ["provider"] and card.info == {"chain": "embedded"}

        data = os.urandom(700_000)
        blob_id = await a.blobs.store.put(data)
        assert (await b.blobs.fetch(a.peer_id, blob_id)).read_bytes() == data

        await b.storage.run(b.storage.put_job, Job(b"j" * 32, b"spec", "client", "submitted"))
        await wait_until(lambda: b.storage.get_peer(str(a.peer_id)) is not None)
        assert a.host.listen_addrs[0] in b.storage.get_peer(str(a.peer_id)).addrs  # dialable as stored
        await wait_until(lambda: b.metrics.jobs.labels("submitted")._value.get() == 1)
        nursery.cancel_scope.cancel()
    assert read_api(config_a) is None and read_api(config_b) is None
