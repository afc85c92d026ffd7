"""GossipSub through the wrapper: delivery to all subscribers, validators, limits."""
from __future__ import annotations

import pytest
import trio

from node.errors import LocalError
from node.gossip import GossipMessage

from .conftest import counter_value, running_hosts, trio_test, wait_until

TOPIC = "gavel-test/announce"


async def _mesh_ready(hosts, topic: str) -> None:
    """Every host knows every other one is subscribed (subscriptions travel asynchronously)."""
    await wait_until(lambda: all(len(h.gossip.peers_on(topic)) == len(hosts) - 1 for h in hosts), timeout=5)


@trio_test(timeout=30)
async def test_gossip_reaches_every_subscriber_and_names_the_origin():
    async with running_hosts(3) as hosts:
        received: dict[int, list[GossipMessage]] = {i: [] for i in range(3)}
        for i, h in enumerate(hosts):

            async def handler(msg, i=i):
                received[i].append(msg)

            await h.gossip.subscribe(TOPIC, handler)
        await _mesh_ready(hosts, TOPIC)
        # Enough messages to overflow libp2p's 32-message subscription buffer if
        # nobody drained it; the wrapper's reader always does.
        for n in range(40):
            await hosts[0].gossip.publish(TOPIC, b"item %d" % n)
        await hosts[2].gossip.publish(TOPIC, b"from two")
        await wait_until(lambda: len(received[1]) == 41 and len(received[2]) == 40 and len(received[0]) == 1)
        # No loss and no duplicates; libp2p validates each message in its own task, so
        # the order is not guaranteed.
        expected = {b"item %d" % n for n in range(40)} | {b"from two"}
        assert sorted(m.data for m in received[1]) == sorted(expected)
        assert sorted(m.data for m in received[2]) == sorted(expected - {b"from two"})
        # Own messages are not delivered back to the publisher.
        assert received[0][0].data == b"from two"
        # The origin is the signer; its key is the 32-byte protocol key of that node.
        assert received[0][0].origin == hosts[2].peer_id
        assert received[0][0].origin_public_key == hosts[2].public_key
        assert counter_value(hosts[1].metrics.gossip_in, topic=TOPIC) == 41


@trio_test(timeout=30)
async def test_validator_drops_messages_everywhere_and_bad_handlers_do_not_stop_delivery():
    async with running_hosts(3) as hosts:
        got: list[bytes] = []

        async def handler(msg):
            if msg.data == b"boom":
                raise RuntimeError("handler bug")
            got.append(msg.data)

        for h in hosts:
            h.gossip.set_validator(TOPIC, lambda m: not m.data.startswith(b"bad"))
        for h in hosts[1:]:
            await h.gossip.subscribe(TOPIC, handler)
        await hosts[0].gossip.subscribe(TOPIC, handler, deliver_own=True)
        await _mesh_ready(hosts, TOPIC)
        for data in (b"bad one", b"boom", b"good"):
            await hosts[0].gossip.publish(TOPIC, data)
        await wait_until(lambda: got.count(b"good") == 3)
        await trio.sleep(0.3)
        assert b"bad one" not in got


@trio_test()
async def test_oversized_gossip_item_is_refused_locally():
    async with running_hosts(1) as (host,):
        with pytest.raises(LocalError, match="stream"):
            await host.gossip.publish(TOPIC, b"x" * (host.gossip.settings.max_message + 1))
        await host.gossip.subscribe(TOPIC, lambda m: trio.sleep(0))
        with pytest.raises(LocalError, match="already"):
            await host.gossip.subscribe(TOPIC, lambda m: trio.sleep(0))


@trio_test()
async def test_a_peer_record_sent_again_unchanged_is_not_checked_again(monkeypatch):
    """py-libp2p puts the sender's signed peer record in every pubsub RPC and checks it on every one
    received; a record accepted from a peer passes unchecked when it comes again unchanged."""
    import libp2p.pubsub.pubsub as libp2p_pubsub
    import libp2p.pubsub.utils as record_utils
    from libp2p.peer.peerstore import env_to_send_in_RPC
    from libp2p.pubsub.pb.rpc_pb2 import RPC

    checked = []
    consume_envelope = record_utils.consume_envelope
    monkeypatch.setattr(record_utils, "consume_envelope", lambda *a: checked.append(a) or consume_envelope(*a))
    consume = libp2p_pubsub.maybe_consume_signed_record  # what pubsub and gossipsub call, as they do
    async with running_hosts(2) as (a, b):
        record, _ = env_to_send_in_RPC(a.libp2p)
        rpc = RPC(senderRecord=record)
        assert consume(rpc, b.libp2p, a.peer_id) and consume(rpc, b.libp2p, a.peer_id)
        assert len(checked) == 1
        assert not consume(rpc, b.libp2p, b.peer_id)  # a's record sent as b's: checked, refused
        forged = RPC(senderRecord=record[:-1] + bytes([record[-1] ^ 1]))  # the signature's last byte
        assert not consume(forged, b.libp2p, a.peer_id) and not consume(forged, b.libp2p, a.peer_id)
        assert len(checked) == 4  # refused records are checked every time
        assert consume(RPC(), b.libp2p, a.peer_id)  # an RPC without a record
