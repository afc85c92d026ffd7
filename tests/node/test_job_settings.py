"""The node's job settings follow protocol's one table (protocol.settings.JobSettings)."""
from __future__ import annotations

from dataclasses import fields

from node.config import SETTINGS
from node.roles.client import SubmitOptions
from protocol.settings import CLIENT_SETTINGS, DEFAULT_JOB_SETTINGS, job_setting


def test_the_auditors_audit_rate_setting_is_the_tables():
    (row,) = [s for s in SETTINGS if s.name == "audit_rate"]
    table = job_setting("audit_rate")
    assert (row.default, row.help, row.flag) == (table.default, table.meaning, table.flag)


def test_submit_options_carry_every_client_setting_and_take_the_tables_defaults():
    names = {f.name for f in fields(SubmitOptions)}
    assert set(CLIENT_SETTINGS) <= names
    options = SubmitOptions()
    assert all(getattr(options, name) is None for name in CLIENT_SETTINGS)  # None: the table's
    settings = options.job_settings(0)
    assert (settings.move_timeout, settings.clock) == (DEFAULT_JOB_SETTINGS.move_timeout, DEFAULT_JOB_SETTINGS.clock)
    assert SubmitOptions(clock=60, move_timeout=20).job_settings(0).rules.ruling_period == 260


def test_gavel_submit_has_a_flag_for_every_client_setting_and_leaves_its_default_to_the_table():
    from node.cli.submit import _parser

    actions = {a.dest: a for a in _parser()._actions}
    for name in CLIENT_SETTINGS:
        row = job_setting(name)
        assert row.flag in actions[name].option_strings and actions[name].default is None
        assert row.meaning in actions[name].help


def test_the_testnet_overrides_the_table_in_one_place():
    from node.testnet.plan import TESTNET_JOB_SETTINGS, TestnetOptions

    options = TestnetOptions()
    for f in fields(TESTNET_JOB_SETTINGS):
        assert getattr(options, f.name) == getattr(TESTNET_JOB_SETTINGS, f.name)
    assert TESTNET_JOB_SETTINGS.audit_rate == DEFAULT_JOB_SETTINGS.audit_rate
