"""Malformed and hostile peers on the job and dispute protocols: each is disconnected or
refused (or loses its dispute), and the node keeps serving everyone else."""
from __future__ import annotations

import os
import struct
import time

import pytest
import trio

from contracts import JobStatus
from node.errors import PeerError, RemoteError
from node.framing import pack, unpack
from node.host import open_host
from node.roles.client import SubmitOptions
from node.roles.job_protocols import DISPUTE_LIMITS, DISPUTE_PROTOCOL, JOB_LIMITS, JOB_PROTOCOL, DisputeMessage
from protocol import DisputeRules, Envelope, Identity, JobOffer, OpenDispute, commit_trace, decode_envelope
from protocol import NEVER, JobTerms, SignedJobTerms

from .conftest import counter_value, read_until_closed, trio_test
from .test_roles_support import advance_embedded_chain, role, start_node, wait_for, write_job


def _forged_offer(identity: Identity) -> bytes:
    """A well-formed JobOffer for a job that exists nowhere (signed by ``identity``)."""
    rules = DisputeRules(move_timeout_ms=1000, clock_ms=10_000)
    terms = JobTerms(client=identity.node_id, config_hash=b"\1" * 32, program_root=b"\2" * 32, program_size=5,
                     data_root=b"\3" * 32, initial_state=b"\4" * 32, steps=4, checkpoint_every=2, payment=10**18,
                     stake=10**18, deadline=int(time.time()) + 600, nonce=1, rules=rules)
    signed = SignedJobTerms.sign(identity, terms)
    return Envelope.seal(JobOffer(signed), identity=identity, job_id=signed.job_id, seq=1, deadline=NEVER).encode()


def _offer_request(offer: bytes, client_account: str, contract: str) -> bytes:
    return pack({"op": "offer", "offer": offer, "bundle": b"\5" * 32, "contract": contract,
                 "client_account": client_account, "client_addrs": []})


@pytest.mark.slow
@trio_test(timeout=300)
async def test_hostile_peers_on_the_job_and_dispute_protocols(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        client = await start_node(nursery, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
        provider_role = await role(provider, "provider")
        client_role = await role(client, "client")
        contract, account = provider_role.ctx.chain.address, provider_role.ctx.chain.account
        mallory_id = Identity.generate()
        async with open_host(mallory_id.seed) as mallory:
            await mallory.connect(provider.host.listen_addrs[0])
            await mallory.connect(client.host.listen_addrs[0])

            # Garbage, then a header announcing 2 GiB, on both protocols: the stream is dropped at once,
            # for the garbage, not after a read timeout (10 s on these protocols, within the bound that
            # stops a hung test). The node counts the reason before it resets the stream.
            errors = provider.metrics.peer_errors
            for protocol in (JOB_PROTOCOL, DISPUTE_PROTOCOL):
                stream = await mallory.libp2p.new_stream(provider.peer_id, [protocol])
                await stream.write(struct.pack(">I", 9) + b"\xc1garbage!" + struct.pack(">I", 1 << 31) + os.urandom(32))
                bad, timeouts = counter_value(errors, kind="BadMessage"), counter_value(errors, kind="PeerTimeout")
                await read_until_closed(stream, timeout=30)
                assert counter_value(errors, kind="BadMessage") == bad + 1
                assert counter_value(errors, kind="PeerTimeout") == timeouts
            stream = await mallory.libp2p.new_stream(provider.peer_id, [JOB_PROTOCOL])
            await stream.write(struct.pack(">I", 64 << 20))  # beyond the job protocol's frame limit
            await read_until_closed(stream, timeout=5)
            await wait_for(lambda: counter_value(provider.metrics.peer_errors, kind="FrameTooLarge") >= 1, timeout=5)
            assert counter_value(provider.metrics.peer_errors, kind="BadMessage") >= 2

            # Well-formed msgpack that breaks the protocol: unknown op, missing fields, wrong types.
            for request in ({"op": "steal"}, {"op": "offer"}, {"op": "trace", "job": "not bytes"}, [1, 2, 3],
                            {"env": 5}):
                with pytest.raises(PeerError):
                    await mallory.request(provider.peer_id, JOB_PROTOCOL, pack(request), limits=JOB_LIMITS, timeout=5)
            with pytest.raises(RemoteError, match="does not serve 'commitment'"):
                await mallory.request(provider.peer_id, JOB_PROTOCOL, pack({"op": "commitment"}), timeout=5)

            # Wrong signatures: a flipped signature byte, and an offer whose envelope is not
            # signed by the job's client.
            forged = _forged_offer(mallory_id)
            broken = forged[:-1] + bytes([forged[-1] ^ 1])
            with pytest.raises(PeerError):
                await mallory.request(provider.peer_id, JOB_PROTOCOL, _offer_request(broken, account, contract), timeout=5)
            other = Identity.generate()
            body = decode_envelope(forged).body
            stolen = Envelope.seal(body, identity=other, job_id=decode_envelope(forged).job_id, seq=1, deadline=NEVER)
            with pytest.raises(PeerError):
                await mallory.request(provider.peer_id, JOB_PROTOCOL,
                                      _offer_request(stolen.encode(), account, contract), timeout=5)
            # A validly signed offer for a job that is not on chain is refused, not taken.
            with pytest.raises(RemoteError, match="NONE on chain"):
                await mallory.request(provider.peer_id, JOB_PROTOCOL, _offer_request(forged, account, contract), timeout=30)
            assert provider.storage.jobs() == []

            # A real job goes through meanwhile.
            options = SubmitOptions(providers=1, accept_within=60, commit_within=60, challenge_within=30,
                                    move_timeout=5, clock=20)
            job_id = await client_role.submit(job_file, options)
            cj = client_role.jobs[job_id]
            await wait_for(lambda: provider.storage.get_job(job_id).state == "delivered", timeout=120)

            # Replayed messages: the client's offer again changes nothing (same seat, same answer).
            offer = pack(client_role._offer(cj).to_wire())
            assert unpack(await mallory.request(provider.peer_id, JOB_PROTOCOL, offer, timeout=30)) == {"account": account}
            assert len(provider.storage.jobs()) == 1
            report = unpack(await mallory.request(provider.peer_id, JOB_PROTOCOL, pack({"op": "trace", "job": job_id})))
            # The provider's own trace report, replayed to the client by someone else: a harmless repeat.
            report["op"] = "commitment"
            assert unpack(await mallory.request(client.peer_id, JOB_PROTOCOL, pack(report))) == {}
            # ... tampered with: its state hashes no longer hash to the signed root.
            tampered = dict(report, trace=[b"\0" * 32] + report["trace"][1:])
            with pytest.raises(PeerError):
                await mallory.request(client.peer_id, JOB_PROTOCOL, pack(tampered), timeout=5)
            assert len(client.storage.commitments(job_id)) == 1

            # Dispute moves from someone who is not the job's referee are refused; a dispute
            # opened at the client without a chain dispute behind it is refused too.
            mine = commit_trace(mallory_id, job_id=job_id, role="provider", checkpoint_states=[b"\7" * 32] * 4)
            theirs = decode_envelope(report["commitment"]).body.root
            opened = Envelope.seal(OpenDispute(mine, theirs), identity=mallory_id, job_id=job_id, seq=1, deadline=NEVER)
            with pytest.raises(RemoteError):
                await mallory.request(client.peer_id, DISPUTE_PROTOCOL, pack(DisputeMessage(opened.encode(), 1).to_wire()),
                                      limits=DISPUTE_LIMITS, timeout=10)
            from protocol import RevealRequest

            fake = Envelope.seal(RevealRequest(b"\x09" * 32, 1, 0, 4), identity=mallory_id, job_id=job_id, seq=1,
                                 deadline=NEVER)
            with pytest.raises(RemoteError, match="no such dispute"):
                await mallory.request(provider.peer_id, DISPUTE_PROTOCOL, pack(DisputeMessage(fake.encode()).to_wire()),
                                      limits=DISPUTE_LIMITS, timeout=10)
            # A commitment envelope is no dispute move.
            with pytest.raises(PeerError):
                await mallory.request(provider.peer_id, DISPUTE_PROTOCOL,
                                      pack(DisputeMessage(report["commitment"]).to_wire()), timeout=5)

            # A peer that asks and asks and never reads the answers is dropped; others are served.
            stream = await mallory.libp2p.new_stream(provider.peer_id, [JOB_PROTOCOL])
            ask = pack({"op": "trace", "job": job_id})
            await stream.write((struct.pack(">I", len(ask)) + ask) * 8000)  # answers: megabytes
            for _ in range(3):
                await client.host.request(provider.peer_id, JOB_PROTOCOL, ask, timeout=5)
            await wait_for(lambda: counter_value(provider.metrics.peer_errors, kind="PeerTimeout") >= 1, timeout=30)
            await stream.reset()

        # None of it disturbed the job: it settles and the provider is paid.
        await wait_for(lambda: cj.state == "verified", timeout=60)
        advance_embedded_chain(300)
        result = await client_role.wait(job_id)
        assert result["status"] == JobStatus.FINALIZED.name
        assert [seat["outcome"] for seat in result["providers"].values()] == ["paid"]
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@pytest.mark.parametrize("strategy, reason", [("stall", "timeout"), ("lie-in-bisection", "invalid-move")])
@trio_test(timeout=300)
async def test_a_provider_that_stalls_or_lies_in_the_game_loses_its_dispute(tmp_path, strategy, reason):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client = await start_node(nursery, tmp_path / "client", ["client"])
        hub = client.host.listen_addrs
        honest = await start_node(nursery, tmp_path / "honest", ["provider"], bootstrap=hub)
        cheater = await start_node(nursery, tmp_path / "cheater", ["provider"], bootstrap=hub, cheat=strategy)
        client_role = await role(client, "client")
        await role(honest, "provider")
        await role(cheater, "provider")
        # a move may wait seconds on a loaded machine: the opening of a dispute outlived a 3 s timeout once
        options = SubmitOptions(providers=2, accept_within=60, commit_within=60, challenge_within=60,
                                move_timeout=10, clock=30)
        job_id = await client_role.submit(job_file, options)
        cj = client_role.jobs[job_id]
        await wait_for(lambda: cj.state == "verified", timeout=180)
        advance_embedded_chain(300)
        result = await client_role.wait(job_id)
        cheater_key = cheater.storage.commitments(job_id)[0].signer.hex()
        (verdict,) = result["verdicts"]
        assert [(f["party"], f["reason"]) for f in verdict["faults"]] == [(cheater_key, reason)]
        assert verdict["recorded"] and result["providers"][cheater_key]["outcome"] == "slashed"
        assert result["result_from"] != cheater_key
        nursery.cancel_scope.cancel()
