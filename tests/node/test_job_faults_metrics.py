"""Issue 21: the state gauges say what the database holds, after a job's whole life."""
from __future__ import annotations

import trio

from contracts import JobStatus
from node.roles.client import SubmitOptions
from node.storage import Dispute, Job, Storage

from .conftest import trio_test
from .test_roles_support import advance_embedded_chain, role, start_node, wait_for, write_job


def gauge(metric) -> dict[str, float]:
    """A labelled gauge's values by its one label, the zeros left out."""
    return {s.labels[next(iter(s.labels))]: s.value for m in metric.collect() for s in m.samples if s.value}


def rows(counts: dict[str, int]) -> dict[str, float]:
    return {state: float(n) for state, n in counts.items() if n}


@trio_test(timeout=240)
async def test_the_state_gauges_match_the_database_after_a_jobs_life(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        client = await start_node(nursery, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
        client_role = await role(client, "client")
        await role(provider, "provider")
        options = SubmitOptions(providers=1, accept_within=60, commit_within=60, challenge_within=30,
                                move_timeout=20, clock=60)
        job_id = await client_role.submit(job_file, options)
        await wait_for(lambda: client_role.jobs[job_id].state == "verified", timeout=120)
        advance_embedded_chain(300)
        result = await client_role.wait(job_id)
        assert result["status"] == JobStatus.FINALIZED.name
        await wait_for(lambda: provider.storage.get_job(job_id).state == "settled", timeout=30)
        for node in (provider, client):
            assert gauge(node.metrics.jobs) == rows(node.storage.count_jobs_by_state())
            assert gauge(node.metrics.disputes) == rows(node.storage.count_disputes_by_status())
        # The provider's job went through every state; its gauges say it is settled and nothing else.
        assert gauge(provider.metrics.jobs) == {"settled": 1.0}
        nursery.cancel_scope.cancel()


def test_every_state_move_moves_the_gauges_and_a_reopened_database_starts_them_right(tmp_path):
    from node.metrics import NodeMetrics

    metrics = NodeMetrics()
    with Storage(tmp_path / "db") as db:
        metrics.follow(db)
        db.put_job(Job(b"a" * 32, b"", "provider", "accepted"))
        db.put_job(Job(b"b" * 32, b"", "provider", "accepted"))
        db.set_job_state(b"a" * 32, "trained")
        db.put_job(Job(b"a" * 32, b"", "provider", "trained"))  # no move: no count
        db.set_job_state(b"b" * 32, "failed")
        db.put_dispute(Dispute(b"d" * 32, b"a" * 32, b"", "refereeing"))
        db.put_dispute(Dispute(b"d" * 32, b"a" * 32, b"", "won"))
        assert gauge(metrics.jobs) == {"trained": 1.0, "failed": 1.0} == rows(db.count_jobs_by_state())
        assert gauge(metrics.disputes) == {"won": 1.0}
    reopened = NodeMetrics()
    with Storage(tmp_path / "db") as db:
        reopened.follow(db)
        assert gauge(reopened.jobs) == {"trained": 1.0, "failed": 1.0}
