"""Settings table, TOML file and overrides; the data directory's files and lock."""
from __future__ import annotations

import argparse
import os
import stat
import tomllib

import pytest

from node.config import SETTINGS, add_setting_flags, load_config, make_config, overrides_from_args, render_toml
from node.datadir import (
    ApiInfo,
    DataDirLock,
    clear_stale,
    init_datadir,
    load_seed,
    lock_is_held,
    open_datadir,
    read_api,
    write_api,
)
from node.errors import ConfigError, DataDirError


def test_defaults_render_to_toml_that_reads_back(tmp_path):
    config = make_config(tmp_path)
    text = render_toml(config.values())
    assert tomllib.loads(text) == config.values()
    for s in SETTINGS:
        assert f"# {s.help}" in text
    assert config.listen == "/ip4/127.0.0.1/tcp/0" and config.roles == []
    assert config.db_file == tmp_path.resolve() / "gavel.db" and config.api_file.parent == tmp_path.resolve()


def test_file_values_and_overrides_are_checked(tmp_path):
    (tmp_path / "config.toml").write_text('listen = "/ip4/127.0.0.1/tcp/4001"\nroles = ["provider"]\ndial_timeout = 3\n')
    config = load_config(tmp_path, {"roles": ["auditor", "client"]})
    assert config.listen.endswith("/4001") and config.roles == ["auditor", "client"]
    assert config.dial_timeout == 3.0 and isinstance(config.dial_timeout, float)
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        make_config(tmp_path, {"colour": "red"})
    with pytest.raises(ConfigError, match="must be str"):
        make_config(tmp_path, {"listen": 5})
    with pytest.raises(ConfigError, match="not one of"):
        make_config(tmp_path, {"roles": ["referee"]})
    (tmp_path / "config.toml").write_text("listen = [unclosed\n")
    with pytest.raises(ConfigError, match="config.toml"):
        load_config(tmp_path)


def test_flags_come_from_the_table(tmp_path):
    parser = argparse.ArgumentParser()
    add_setting_flags(parser)
    args = parser.parse_args(["--role", "provider", "--role", "auditor", "--listen", "/ip4/127.0.0.1/tcp/9", "--chain", "http://x"])
    assert overrides_from_args(args) == {"roles": ["provider", "auditor"], "listen": "/ip4/127.0.0.1/tcp/9", "chain": "http://x"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--role", "referee"])


def test_init_writes_config_key_and_version(tmp_path):
    data_dir = tmp_path / "node"
    config = init_datadir(data_dir, {"roles": ["client"]})
    assert stat.S_IMODE(os.stat(config.key_file).st_mode) == 0o600
    assert len(load_seed(config)) == 32
    assert (data_dir / "repo_version").read_text().strip() == "1"
    assert open_datadir(data_dir).roles == ["client"]
    with pytest.raises(DataDirError, match="already initialised"):
        init_datadir(data_dir)
    with pytest.raises(DataDirError, match="run: gavel node init --data-dir"):
        open_datadir(tmp_path / "missing")
    os.chmod(config.key_file, 0o644)
    with pytest.raises(DataDirError, match="too open"):
        load_seed(config)


def test_lock_is_exclusive_and_stale_files_are_cleared(tmp_path):
    config = init_datadir(tmp_path / "node")
    with DataDirLock(config):
        assert lock_is_held(config)
        with pytest.raises(DataDirError, match=f"in use by another gavel node \\(pid {os.getpid()}\\)"):
            DataDirLock(config).acquire()
        write_api(config, ApiInfo(os.getpid(), "peer", ["/ip4/1.2.3.4/tcp/1"], "", [], 0.0))
        assert not clear_stale(config) and read_api(config).peer_id == "peer"
    assert not lock_is_held(config)
    assert clear_stale(config)
    assert read_api(config) is None and not config.lock_file.exists()
