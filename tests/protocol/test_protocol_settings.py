"""The job settings table and what protocol derives from it: dispute rules, sized windows, the ruling period."""
from __future__ import annotations

from dataclasses import fields

import pytest

from protocol import DisputeRules, LocalProtocolError
from protocol.jobs import RULING_MARGIN_MS
from protocol.settings import (
    CLIENT_SETTINGS, DEFAULT_JOB_SETTINGS, JOB_SETTINGS, WINDOW_FLOOR, WINDOW_MARGIN, JobSettings, job_setting,
)


def test_every_setting_has_a_default_a_unit_and_a_meaning():
    assert [row.name for row in JOB_SETTINGS] == [f.name for f in fields(JobSettings)]
    for row in JOB_SETTINGS:
        assert row.unit in ("s", "fraction") and row.who in ("client", "auditor") and row.meaning
        assert row.flag == "--" + row.name.replace("_", "-")
    assert CLIENT_SETTINGS == ("accept_within", "commit_within", "challenge_within", "move_timeout", "clock")
    assert job_setting("audit_rate").who == "auditor"
    with pytest.raises(LocalProtocolError):
        job_setting("nope")


def test_the_defaults():
    d = DEFAULT_JOB_SETTINGS
    assert (d.accept_within, d.commit_within, d.challenge_within) == (30.0, None, None)
    assert (d.move_timeout, d.clock, d.audit_rate) == (60.0, 600.0, 1.0)
    assert d.rules == DisputeRules(move_timeout_ms=60_000, clock_ms=600_000)


def test_unset_windows_are_sized_for_the_work_and_given_ones_kept():
    assert DEFAULT_JOB_SETTINGS.sized_for(0).commit_within == WINDOW_FLOOR
    sized = DEFAULT_JOB_SETTINGS.sized_for(44.2)  # the MLP job's 200 steps at 0.221 s
    assert (sized.accept_within, sized.commit_within, sized.challenge_within) == (30.0, 75.0, 75.0)
    assert sized.commit_within == WINDOW_MARGIN + 45
    given = JobSettings(commit_within=7.0).sized_for(1000)
    assert (given.commit_within, given.challenge_within) == (7.0, 1030.0)
    assert given.sized_for(5) == given


@pytest.mark.parametrize("bad", [dict(move_timeout=0), dict(clock=-1), dict(accept_within=None), dict(audit_rate=1.5),
                                 dict(commit_within=0.0), dict(clock=True), dict(move_timeout="60")])
def test_settings_refuse_what_no_job_could_run_with(bad):
    with pytest.raises(LocalProtocolError):
        JobSettings(**bad)


def test_rules_are_the_settings_in_milliseconds():
    assert JobSettings(move_timeout=20.5, clock=61.25).rules == DisputeRules(move_timeout_ms=20_500, clock_ms=61_250)


def test_the_ruling_period_covers_both_clocks_a_move_and_the_margin():
    assert RULING_MARGIN_MS == 120_000
    assert DEFAULT_JOB_SETTINGS.rules.ruling_period == 2 * 600 + 60 + 120  # what node computed with a bare + 120
    assert DisputeRules(move_timeout_ms=20_000, clock_ms=60_000).ruling_period == 260
    assert DisputeRules(move_timeout_ms=1, clock_ms=1).ruling_period == 121  # rounded up, never short
    rules = DisputeRules(move_timeout_ms=20_450, clock_ms=61_350)
    assert rules.ruling_period * 1000 >= 2 * rules.clock_ms + rules.move_timeout_ms + RULING_MARGIN_MS
    assert (rules.ruling_period - 1) * 1000 < 2 * rules.clock_ms + rules.move_timeout_ms + RULING_MARGIN_MS
