"""Errors said in one line: an exception group names what it holds."""
from __future__ import annotations

from node.errors import PeerTimeout, describe_failure, leaves


def test_a_nursery_error_is_described_by_its_leaves():
    timeout = PeerTimeout("opening /gavel/job-data/2.0.0 took over 14.2 s")
    group = ExceptionGroup("Exceptions from Trio nursery", [ExceptionGroup("inner", [timeout, KeyError("seat")])])
    assert leaves(group) == [timeout, group.exceptions[0].exceptions[1]]
    # The group's own message says only how many it holds; the description says what failed.
    assert describe_failure(group) == "PeerTimeout: opening /gavel/job-data/2.0.0 took over 14.2 s; KeyError: 'seat'"
    assert describe_failure(ValueError("bad")) == "ValueError: bad"
