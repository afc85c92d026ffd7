"""Roles in one trio process: real libp2p hosts on loopback, one embedded EVM, real training."""
from __future__ import annotations

import pytest
import trio

from contracts import JobStatus
from node.errors import PeerTimeout, StreamClosed
from node.framing import unpack
from node.roles.client import SubmitOptions

from .conftest import trio_test
from .test_roles_support import advance_embedded_chain, role, start_node, wait_for, write_job


@trio_test(timeout=240)
async def test_a_job_goes_from_submission_to_payment(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        client = await start_node(nursery, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
        client_role = await role(client, "client")
        provider_role = await role(provider, "provider")
        # The network cuts off the client's first blob fetch (the result): it tries again.
        fetches = []
        fetch = client_role.ctx.blobs.fetch

        async def fetch_cut_off_once(peer, blob_id, *args, **kwargs):
            fetches.append(blob_id)
            if len(fetches) == 1:
                raise StreamClosed("the network cut the stream", peer=peer)
            return await fetch(peer, blob_id, *args, **kwargs)

        client_role.ctx.blobs.fetch = fetch_cut_off_once
        options = SubmitOptions(providers=1, accept_within=60, commit_within=60, challenge_within=30,
                                move_timeout=20, clock=60)
        job_id = await client_role.submit(job_file, options)
        cj = client_role.jobs[job_id]
        await wait_for(lambda: cj.state == "verified", timeout=120)
        advance_embedded_chain(300)
        result = await client_role.wait(job_id)
        assert result["status"] == JobStatus.FINALIZED.name
        (key, seat), = result["providers"].items()
        assert seat["outcome"] == "paid" and key == provider_role.ctx.identity.node_id.hex()
        weights = (tmp_path / "client" / "results" / job_id.hex() / "weights.safetensors").read_bytes()
        run_dir = tmp_path / "provider" / "jobs" / job_id.hex() / "run"
        assert weights == max(run_dir.glob("step-*.safetensors")).read_bytes()
        assert fetches[0] == fetches[1]  # the cut-off fetch was tried again
        assert result["verdicts"] == []
        await wait_for(lambda: provider.storage.get_job(job_id).state == "settled", timeout=30)
        nursery.cancel_scope.cancel()


@trio_test(timeout=420)
async def test_a_cheating_provider_loses_its_dispute_and_its_stake(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client = await start_node(nursery, tmp_path / "client", ["client"])
        hub = client.host.listen_addrs
        honest = await start_node(nursery, tmp_path / "honest", ["provider"], bootstrap=hub)
        cheater = await start_node(nursery, tmp_path / "cheater", ["provider"], bootstrap=hub, cheat="perturb-weight")
        auditor = await start_node(nursery, tmp_path / "auditor", ["auditor"], bootstrap=hub)
        client_role = await role(client, "client")
        for node, name in ((honest, "provider"), (cheater, "provider"), (auditor, "auditor")):
            await role(node, name)
        # The network stalls the auditor's first audit: it audits again a little later.
        auditor_role = await role(auditor, "auditor")
        audits = []
        audit = auditor_role.audit

        async def audit_stalled_once(audited_job, key):
            audits.append(key)
            if len(audits) == 1:
                raise PeerTimeout("the network stalled")
            return await audit(audited_job, key)

        auditor_role.audit = audit_stalled_once
        options = SubmitOptions(providers=2, accept_within=90, commit_within=90, challenge_within=60,
                                move_timeout=30, clock=120)
        job_id = await client_role.submit(job_file, options)
        cj = client_role.jobs[job_id]
        await wait_for(lambda: cj.state == "verified", timeout=240)

        def audited() -> bool:
            row = auditor.storage.get_job(job_id)
            return row is not None and row.state == "audited"

        await wait_for(audited, timeout=120)
        entries = unpack(auditor.storage.get_job(job_id).spec)["audits"]
        assert audits.count(audits[0]) == 2 and "failed" not in {e["state"] for e in entries.values()}
        await wait_for(lambda: all(s.recorded for s in cj.sessions), timeout=60)
        advance_embedded_chain(600)
        result = await client_role.wait(job_id)

        honest_key = honest_role_key = context_key(honest)
        cheater_key = context_key(cheater)
        assert result["status"] == JobStatus.FINALIZED.name
        assert result["providers"][honest_key]["outcome"] == "paid"
        assert result["providers"][cheater_key]["outcome"] == "slashed"
        assert result["verdicts"] and all(v["faults"][0]["party"] == cheater_key for v in result["verdicts"])
        assert all(v["faults"][0]["reason"] == "wrong-result" and v["recorded"] for v in result["verdicts"])
        assert result["result_from"] == honest_role_key
        weights = (tmp_path / "client" / "results" / job_id.hex() / "weights.safetensors").read_bytes()
        run_dir = tmp_path / "honest" / "jobs" / job_id.hex() / "run"
        assert weights == max(run_dir.glob("step-*.safetensors")).read_bytes()
        # The dispute rows: the parties know they won and lost.
        honest_disputes = honest.storage.disputes(job_id=job_id)
        cheater_disputes = cheater.storage.disputes(job_id=job_id)
        assert {d.status for d in honest_disputes} <= {"won"} and {d.status for d in cheater_disputes} == {"lost"}
        nursery.cancel_scope.cancel()


def context_key(node) -> str:
    from node.roles.context import context_of

    return context_of(node).identity.node_id.hex()


@pytest.mark.slow
@trio_test(timeout=400)
async def test_a_client_restarted_mid_dispute_resumes_refereeing_it(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client_scope = trio.CancelScope()
        client_started = trio.Event()
        nodes = {}

        async def run_client(task_status=trio.TASK_STATUS_IGNORED) -> None:
            with client_scope:
                async with trio.open_nursery() as inner:
                    nodes["client"] = await start_node(inner, tmp_path / "client", ["client"])
                    client_started.set()
                    task_status.started()
                    await trio.sleep_forever()

        await nursery.start(run_client)
        client = nodes["client"]
        hub = client.host.listen_addrs
        honest = await start_node(nursery, tmp_path / "honest", ["provider"], bootstrap=hub)
        # It answers a move or three, then falls silent: the referee waits out its clock.
        staller = await start_node(nursery, tmp_path / "staller", ["provider"], bootstrap=hub, cheat="stall")
        client_role = await role(client, "client")
        await role(honest, "provider")
        await role(staller, "provider")
        options = SubmitOptions(providers=2, accept_within=60, commit_within=60, challenge_within=60,
                                move_timeout=10, clock=40)
        job_id = await client_role.submit(job_file, options)
        await wait_for(lambda: any(d.status == "refereeing" for d in client.storage.disputes(job_id=job_id)),
                       timeout=180)
        client_scope.cancel()  # the client goes down in the middle of the game
        await trio.sleep(0.5)

        from node.datadir import load_seed, open_datadir
        from node.runtime import Node

        config = open_datadir(tmp_path / "client", {"listen": hub[0].split("/p2p/")[0]})
        restarted = Node(config, load_seed(config))
        await nursery.start(restarted.run)
        client_role = await role(restarted, "client")
        with trio.fail_after(60):
            await client_role.ready.wait()  # its jobs are read back from its database before it is ready
        cj = client_role.jobs[job_id]
        await wait_for(lambda: cj.state == "verified", timeout=180)
        advance_embedded_chain(600)
        result = await client_role.wait(job_id)
        staller_key = staller.storage.commitments(job_id)[0].signer.hex()
        (verdict,) = result["verdicts"]
        assert [(f["party"], f["reason"]) for f in verdict["faults"]] == [(staller_key, "timeout")]
        assert verdict["recorded"] and result["providers"][staller_key]["outcome"] == "slashed"
        nursery.cancel_scope.cancel()


@trio_test(timeout=30)
async def test_the_peers_table_keeps_a_peer_whose_addresses_the_node_does_not_know(tmp_path):
    # A client that dialled a provider is, to the provider, a peer connected inbound only:
    # libp2p's peerstore raises a KeyError for its addresses, which must not stop the node.
    from libp2p.peer.id import ID

    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, tmp_path / "node", [])
        inbound_only = ID.from_base58("12D3KooWQ5RJasdPQmmAVe4KjgLEu9RuCQG7NLaaSQaFf3QF4zn6")
        node.host.connected_peers = lambda: [inbound_only]
        await wait_for(lambda: node.storage.get_peer(str(inbound_only)) is not None, timeout=10)
        assert node.storage.get_peer(str(inbound_only)).addrs == []
        nursery.cancel_scope.cancel()
