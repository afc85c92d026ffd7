"""A client's job life as one table (node/roles/client_job.py): every path, and the one place state changes."""
from __future__ import annotations

import pytest

from node.errors import LocalError
from node.roles.client_job import (
    DONE_STATES, FAILED, HANDED, JOB_FINALIZED, JOB_LIFE, JOB_MISSING, JOB_OPENED, JOB_REFUNDED, LOST, OPENED,
    REFUNDED, REPORTS_IN, RESULT_CHECKED, SEATS_FILLED, SEATS_UNFILLED, SETTLED, SUBMITTED, UNFILLED, VERIFIED,
    VERIFYING, ClientJob, ended,
)


def _job(state: str = SUBMITTED) -> ClientJob:
    return ClientJob(b"\1" * 32, {}, state)


def _walk(*events: str) -> tuple[str, list[bool]]:
    job, over = _job(), []
    for event in events:
        over.append(job.apply(event))
    return job.state, over


def test_every_path_of_a_job_from_submission_to_its_end():
    assert _walk(JOB_OPENED, SEATS_FILLED, REPORTS_IN, RESULT_CHECKED, JOB_FINALIZED) == (SETTLED, [False] * 4 + [True])
    assert _walk(JOB_OPENED, SEATS_FILLED, REPORTS_IN, RESULT_CHECKED, JOB_REFUNDED) == (REFUNDED, [False] * 4 + [True])
    assert _walk(JOB_OPENED, SEATS_UNFILLED, JOB_REFUNDED) == (REFUNDED, [False, False, True])
    assert _walk(JOB_MISSING) == (FAILED, [True])
    assert _walk(JOB_OPENED, SEATS_FILLED, JOB_MISSING) == (LOST, [False, False, True])  # the chain restarted


def test_a_job_the_chain_closed_while_its_client_was_away_can_be_moved_there_from_any_state():
    for state in set(JOB_LIFE):
        job = _job(state)
        assert job.apply(JOB_REFUNDED) and job.state == REFUNDED


def test_how_a_job_ended():
    assert [ended(SETTLED, {}), ended(REFUNDED, {}), ended(REFUNDED, {"unfilled": True}), ended(FAILED, {}),
            ended(LOST, {})] == ["finalized", "refunded", "unfilled", "failed", "failed"]


def test_the_table_names_only_its_own_states_and_every_state_is_reached():
    states = {SUBMITTED, OPENED, HANDED, VERIFYING, VERIFIED, UNFILLED, *DONE_STATES}
    targets = {after for row in JOB_LIFE.values() for after in row.values()}
    assert set(JOB_LIFE) <= states and targets | {SUBMITTED} == states
    assert not set(DONE_STATES) & set(JOB_LIFE) and UNFILLED in JOB_LIFE  # an unfilled job waits for its refund


@pytest.mark.parametrize("state, event", [(SUBMITTED, SEATS_FILLED), (HANDED, JOB_FINALIZED), (SETTLED, JOB_REFUNDED),
                                          (FAILED, JOB_OPENED), (VERIFIED, "nonsense")])
def test_an_event_its_state_has_no_row_for_changes_nothing_and_is_an_error(state, event):
    job = _job(state)
    with pytest.raises(LocalError):
        job.apply(event)
    assert job.state == state
