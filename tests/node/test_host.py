"""Hosts on loopback: identity, Noise-only security, dialing, request/response, reconnection."""
from __future__ import annotations

import os
import time

import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import Ed25519PublicKey
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport
from multiaddr import Multiaddr
from nacl.signing import VerifyKey

from node.datadir import peer_id_text
from node.errors import LocalError, PeerTimeout, PeerUnreachable, ProtocolNotSupported, RemoteError
from node import host as host_module
from node.host import NodeHost, open_host
from node.peer_identity import identity_from_seed, peer_id_from_seed, peer_id_of_key, public_key_of
from node.streams import RequestRefused

from .conftest import running_hosts, trio_test, wait_until

ECHO = "/gavel-test/echo/1"


def test_one_seed_gives_peer_id_and_signing_key():
    seed = os.urandom(32)
    signing_key, key_pair = identity_from_seed(seed)
    peer_id = peer_id_from_seed(seed)
    assert public_key_of(peer_id) == bytes(signing_key.verify_key)
    message = b"signed root"
    # A PyNaCl signature verifies under the libp2p public key, and the other way round.
    assert Ed25519PublicKey.from_bytes(public_key_of(peer_id)).verify(message, signing_key.sign(message).signature)
    VerifyKey(public_key_of(peer_id)).verify(message, key_pair.private_key.sign(message))
    assert peer_id_from_seed(seed) == peer_id
    assert peer_id_text(bytes(signing_key.verify_key)) == str(peer_id)  # the libp2p-free version
    assert peer_id_of_key(bytes(signing_key.verify_key)) == peer_id
    assert peer_id_from_seed(os.urandom(32)) != peer_id
    with pytest.raises(LocalError):
        identity_from_seed(b"short")


async def _echo(peer, request: bytes) -> bytes:
    await trio.lowlevel.checkpoint()
    if request == b"refuse":
        raise RequestRefused("no thanks")
    return str(peer).encode() + b"|" + request


@trio_test()
async def test_two_hosts_dial_and_exchange_requests():
    async with running_hosts(2, connect=False) as (a, b):
        a.handle_requests(ECHO, _echo)
        start = time.perf_counter()
        peer = await b.connect(a.listen_addrs[0])
        dial_ms = (time.perf_counter() - start) * 1000
        assert peer == a.peer_id and b.is_connected(a.peer_id)
        # The server names the client by the identity on the muxed connection.
        assert await b.request(a.peer_id, ECHO, b"hi") == str(b.peer_id).encode() + b"|hi"
        with pytest.raises(RemoteError, match="no thanks"):
            await b.request(a.peer_id, ECHO, b"refuse")
        with pytest.raises(ProtocolNotSupported):
            await b.request(a.peer_id, "/gavel-test/nobody/1", b"x")
        async with await b.open_channel(a.peer_id, ECHO) as channel:
            start = time.perf_counter()
            for i in range(50):
                assert (await channel.request(b"%d" % i)).endswith(b"|%d" % i)
            rtt_ms = (time.perf_counter() - start) * 1000 / 50
            with pytest.raises(RemoteError):
                await channel.request(b"refuse")
            assert (await channel.request(b"after")).endswith(b"|after")  # still in step
        print(f"dial {dial_ms:.1f} ms, kept-stream request round trip {rtt_ms:.2f} ms")
        rtt, card = await b.ping(a.peer_id)
        assert card.peer_id == str(a.peer_id) and card.addrs == a.listen_addrs
        assert isinstance(rtt, float) and rtt > 0  # a round trip in seconds; how long it took is no test


@trio_test()
async def test_a_connection_on_which_no_stream_opens_is_dropped_and_redialled():
    from libp2p.network.exceptions import SwarmException

    async with running_hosts(2, connect=False) as (a, b):
        a.handle_requests(ECHO, _echo)
        await b.connect(a.listen_addrs[0])
        real_new_stream = b.libp2p.new_stream

        async def failing_once(peer, protocols):
            b.libp2p.new_stream = real_new_stream
            raise SwarmException("failed to open a stream to peer")

        b.libp2p.new_stream = failing_once
        with pytest.raises(PeerUnreachable):
            await b.request(a.peer_id, ECHO, b"lost")
        assert not b.is_connected(a.peer_id)
        await b.connect(a.listen_addrs[0])
        assert await b.request(a.peer_id, ECHO, b"again") == str(b.peer_id).encode() + b"|again"


@trio_test()
async def test_three_hosts_serve_each_other_concurrently():
    async with running_hosts(3) as hosts:
        for h in hosts:
            h.handle_requests(ECHO, _echo)
        answers = {}

        async def ask(src, dst):
            answers[(src, dst)] = await hosts[src].request(hosts[dst].peer_id, ECHO, b"%d>%d" % (src, dst))

        async with trio.open_nursery() as nursery:
            for src in range(3):
                for dst in range(3):
                    if src != dst:
                        nursery.start_soon(ask, src, dst)
        assert len(answers) == 6
        for (src, dst), answer in answers.items():
            assert answer == str(hosts[src].peer_id).encode() + b"|%d>%d" % (src, dst)


@trio_test()
async def test_plaintext_peer_cannot_connect():
    async with open_host(os.urandom(32)) as a:
        _, key_pair = identity_from_seed(os.urandom(32))
        plain = new_host(key_pair=key_pair, sec_opt={PLAINTEXT_PROTOCOL_ID: InsecureTransport(key_pair)})
        async with plain.run([Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            with trio.move_on_after(5):
                with pytest.raises(Exception):
                    await plain.connect(info_from_p2p_addr(Multiaddr(a.listen_addrs[0])))
            assert not a.connected_peers()


@trio_test()
async def test_unreachable_and_bad_addresses_are_typed_errors():
    async with open_host(os.urandom(32), dial_timeout=2) as a:
        # A free port with nobody listening.
        ghost = f"/ip4/127.0.0.1/tcp/1/p2p/{peer_id_from_seed(os.urandom(32))}"
        with pytest.raises(PeerUnreachable):
            await a.connect(ghost)
        with pytest.raises(LocalError, match="/p2p/"):
            await a.connect("/ip4/127.0.0.1/tcp/1")
        with pytest.raises(LocalError):
            await a.connect(a.listen_addrs[0])


@trio_test()
async def test_a_busy_listen_port_is_refused():
    async with open_host(os.urandom(32)) as a:
        port = Multiaddr(a.listen_addrs[0]).value_for_protocol("tcp")
        with pytest.RaisesGroup(pytest.RaisesExc(LocalError, match="in use"), flatten_subgroups=True):
            async with open_host(os.urandom(32), listen=f"/ip4/127.0.0.1/tcp/{port}"):
                pass


@trio_test(timeout=30)
async def test_bootstrap_peer_is_redialled_after_it_restarts():
    seed = os.urandom(32)
    async with trio.open_nursery() as nursery:
        a = await nursery.start(NodeHost(seed).run)
        addr = a.listen_addrs[0]
        b = await nursery.start(NodeHost(os.urandom(32), bootstrap=[addr], reconnect_max=0.5).run)
        await wait_until(lambda: b.is_connected(a.peer_id))
        await a.aclose()
        await a.aclose()  # twice is fine
        port = Multiaddr(addr).value_for_protocol("tcp")
        # The stopped host's listening socket is really closed.
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", int(port))
        await wait_until(lambda: not b.is_connected(a.peer_id))
        # b's redials fail meanwhile and land in libp2p's negative cache, which would
        # refuse the peer for 60 s if the host did not evict it before each dial.
        await trio.sleep(0.5)
        a2 = await nursery.start(NodeHost(seed, listen=f"/ip4/127.0.0.1/tcp/{port}").run)
        await wait_until(lambda: b.is_connected(a2.peer_id), timeout=10)
        await b.ping(a2.peer_id)
        nursery.cancel_scope.cancel()


@trio_test()
async def test_a_host_dials_peers_it_heard_of_up_to_its_peer_target(monkeypatch):
    monkeypatch.setattr(host_module, "PEER_CHECK_INTERVAL", 0.1)
    async with trio.open_nursery() as nursery:
        others = [await nursery.start(NodeHost(os.urandom(32), peer_target=0).run) for _ in range(4)]
        host = await nursery.start(NodeHost(os.urandom(32), peer_target=2).run)
        for other in others:
            address = Multiaddr(other.listen_addrs[0].split("/p2p/")[0])
            host.libp2p.get_peerstore().add_addrs(other.peer_id, [address], 3600)
        await wait_until(lambda: len(host.connected_peers()) == 2)
        # libp2p's own auto-connector, which aims at 200 connections, stays idle
        await host.libp2p.get_network().auto_connector.maybe_connect()
        await trio.sleep(0.5)
        assert len(host.connected_peers()) == 2
        # a peer that leaves is replaced by another, not redialled at once
        lost = host.connected_peers()[0]
        await host.disconnect(lost)
        await wait_until(lambda: len(host.connected_peers()) == 2 and not host.is_connected(lost))
        await trio.sleep(0.5)
        assert not host.is_connected(lost)
        nursery.cancel_scope.cancel()


@trio_test()
async def test_request_to_silent_peer_times_out_while_others_are_served():
    held = []  # the requests a's silent handler holds, by the bound b gave them

    async def never(peer, request):
        held.append(request)
        await trio.sleep_forever()

    async with running_hosts(3) as (a, b, c):
        a.handle_requests("/gavel-test/silent/1", never)
        a.handle_requests(ECHO, _echo)
        timed_out = []

        async def stuck(timeout: float):
            with pytest.raises(PeerTimeout, match=f"no answer within {timeout:g} s"):
                await b.request(a.peer_id, "/gavel-test/silent/1", b"%g" % timeout, timeout=timeout)
            timed_out.append(timeout)

        async with trio.open_nursery() as nursery:
            # One silent request that times out, and one whose bound outlasts the test:
            # one sure to be pending while c asks.
            nursery.start_soon(stuck, 1.0)
            nursery.start_soon(stuck, 600.0)
            await wait_until(lambda: b"600" in held, timeout=15)
            for _ in range(5):
                assert (await c.request(a.peer_id, ECHO, b"x")).endswith(b"|x")
            # c was served while a held b's silent request.
            assert 600.0 not in timed_out
            # The other one ended on its own bound (pytest.raises above checks the reason).
            await wait_until(lambda: 1.0 in timed_out, timeout=15)
            nursery.cancel_scope.cancel()
