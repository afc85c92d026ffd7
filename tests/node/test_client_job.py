"""A client's job life as one table (node/roles/client_job.py): every path, and the one place state changes."""
from __future__ import annotations

import pytest

from node.errors import LocalError
from node.roles.client_job import (
    CLOSED, DONE_STATES, FAILED, HANDED, JOB_LIFE, JOB_MISSING, JOB_OPENED, OPENED, REPORTS_IN, RESULT_CHECKED,
    SEATS_FILLED, SEATS_UNFILLED, SETTLED, SUBMITTED, UNFILLED, VERIFIED, VERIFYING, ClientJob,
)


def _job(state: str = SUBMITTED) -> ClientJob:
    return ClientJob(b"\1" * 32, {}, state)


def _walk(*events: str) -> tuple[str, list[bool]]:
    job, over = _job(), []
    for event in events:
        over.append(job.apply(event))
    return job.state, over


def test_every_path_of_a_job_from_submission_to_its_end():
    assert _walk(JOB_OPENED, SEATS_FILLED, REPORTS_IN, RESULT_CHECKED, CLOSED) == (SETTLED, [False] * 4 + [True])
    assert _walk(JOB_OPENED, SEATS_UNFILLED, CLOSED) == (UNFILLED, [False, False, True])  # refunded
    assert _walk(JOB_MISSING) == (FAILED, [True])


def test_the_table_names_only_its_own_states_and_every_state_is_reached():
    states = {SUBMITTED, OPENED, HANDED, VERIFYING, VERIFIED, *DONE_STATES}
    targets = {after for row in JOB_LIFE.values() for after in row.values()}
    assert set(JOB_LIFE) <= states and targets | {SUBMITTED} == states
    assert {s for s in DONE_STATES if s in JOB_LIFE} == {UNFILLED}  # an unfilled job still refunds


@pytest.mark.parametrize("state, event", [(SUBMITTED, SEATS_FILLED), (HANDED, CLOSED), (SETTLED, CLOSED),
                                          (FAILED, JOB_OPENED), (VERIFIED, "nonsense")])
def test_an_event_its_state_has_no_row_for_changes_nothing_and_is_an_error(state, event):
    job = _job(state)
    with pytest.raises(LocalError):
        job.apply(event)
    assert job.state == state
