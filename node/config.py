"""Node settings: declared once in ``SETTINGS``, read from ``config.toml``, overridden
on the command line. Every path the node uses derives from one ``Config``.

Adding a setting is one line in the table: the TOML file written by ``gavel node
init``, the type checks on load, the ``gavel node start`` flag and the attribute
``config.<name>`` all follow from it.
"""
from __future__ import annotations

import argparse
import copy
import json
import tomllib
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError

ROLES = ("provider", "auditor", "client")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True)
class Setting:
    name: str
    type: type  # str, int, float, bool or list (of str)
    default: Any
    help: str
    flag: str | None = None  # the `gavel node start` option, if any
    choices: tuple[str, ...] | None = None  # for str, or each item of a list


SETTINGS: tuple[Setting, ...] = (
    Setting("listen", str, "/ip4/127.0.0.1/tcp/0", "libp2p multiaddr to listen on", "--listen"),
    Setting("bootstrap", list, [], "peers to stay connected to: multiaddrs ending in /p2p/<peer id>", "--bootstrap"),
    Setting("roles", list, [], "roles this node plays", "--role", ROLES),
    Setting("chain", str, "embedded", "settlement chain: 'embedded' (in-process EVM) or a JSON-RPC URL", "--chain"),
    Setting("contract", str, "", "settlement contract address; empty: this process's embedded one, or the canonical dev deployment on a URL chain", "--contract"),
    Setting("settlement", str, "1", "version of the settlement contract the node plays: 1 (today's roles) or 2 (commit-reveal, the claim game, demands: docs/economics.md, docs/roles-v2.md)", "--settlement", ("1", "2")),
    Setting("stake", str, "10", "ether a provider or auditor stakes when it registers", "--stake"),
    Setting("price_per_step", str, "0", "provider: the least ether per training step it takes a job for", "--price-per-step"),
    Setting("capacity", int, 1, "provider: jobs it trains at once", "--capacity"),
    Setting("device", str, "auto", "provider and auditor: where training runs", "--device", ("auto", "cpu", "gpu")),
    Setting("train_workers", int, 1, "provider: worker processes that share each batch of a job it trains (gloo on 127.0.0.1; the same bits for any number)", "--train-workers"),
    Setting("memory_capacity_mb", float, 0.0, "provider: the most MiB one step of a job may need (the step graph's peak estimate) for it to take the job; 0: no limit", "--memory-capacity-mb"),
    Setting("cheat", str, "", "provider: deviate from every job on purpose, with this strategy of node.cheats (tests only)", "--cheat"),
    # a job setting: protocol.settings.JobSettings declares it (this row is checked against it by
    # tests/node/test_job_settings.py; importing protocol here would slow every command)
    Setting("audit_rate", float, 1.0, "auditor: fraction of each provider's checkpoint intervals it replays (1: all)", "--audit-rate"),
    Setting("audit_jobs", float, 1.0, "auditor: fraction of announced jobs it audits", "--audit-jobs"),
    Setting("advert_interval", float, 2.0, "provider: seconds between two gossip adverts of its capacity and price; client: adverts count for three of these (30 s at least)"),
    Setting("regossip_interval", float, 10.0, "client and provider: seconds between repeats of a job's announcement and of a commitment notice, while auditors may still need them (gossip can lose one)"),
    Setting("metrics_listen", str, "127.0.0.1:0", "host:port of the Prometheus endpoint; empty to disable", "--metrics-listen"),
    Setting("log_level", str, "info", "level of gavel's own log", "--log-level", LOG_LEVELS),
    Setting("libp2p_log_level", str, "critical", "level of libp2p's log (noisy below 'error')", "--libp2p-log-level", LOG_LEVELS),
    Setting("log_file", str, "", "log to this file (relative to the data directory) instead of stderr", "--log-file"),
    Setting("peer_target", int, 8, "peers to keep connected: below this the node dials peers it has heard of, beyond its bootstrap list"),
    Setting("dial_timeout", float, 5.0, "seconds one dial may take"),
    Setting("request_timeout", float, 10.0, "seconds one request/response exchange may take"),
    Setting("gossip_heartbeat", float, 1.0, "GossipSub heartbeat in seconds"),
    Setting("gossip_degree", int, 6, "GossipSub mesh degree D (kept between 2D/3 and 2D): a message reaches a node about D times"),
    Setting("gossip_publish_interval", float, 0.005, "minimum seconds between two of our gossip publishes"),
)
_BY_NAME = {s.name: s for s in SETTINGS}

Settings = make_dataclass(
    "Settings",
    [(s.name, s.type, field(default_factory=lambda d=s.default: copy.deepcopy(d))) for s in SETTINGS],
    frozen=True,
)
Settings.__doc__ = "One value per entry of SETTINGS."

# File names inside the data directory.
CONFIG_FILE = "config.toml"
KEY_FILE = "key"
VERSION_FILE = "repo_version"
LOCK_FILE = "repo.lock"
API_FILE = "api"
DB_FILE = "gavel.db"
BLOBS_DIR = "blobs"


def setting_default(name: str) -> Any:
    """The default value of setting ``name``."""
    return _BY_NAME[name].default


def check_value(setting: Setting, value: Any) -> Any:
    """``value`` converted to the setting's type, or ConfigError."""
    kind = setting.type
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"setting {setting.name!r} must be a list of strings, not {value!r}")
        items = value
    else:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"setting {setting.name!r} must be {kind.__name__}, not {value!r}")
        items = [value] if kind is str else []
    if setting.choices is not None:
        for item in items:
            if item not in setting.choices:
                raise ConfigError(f"setting {setting.name!r}: {item!r} is not one of {', '.join(setting.choices)}")
    return value


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write {value!r} to TOML")


def render_toml(values: Mapping[str, Any]) -> str:
    lines = ["# gavel node configuration. Command-line flags override these values.", ""]
    for s in SETTINGS:
        lines.append(f"# {s.help}" + (f" ({', '.join(s.choices)})" if s.choices else ""))
        lines.append(f"{s.name} = {_toml_value(values.get(s.name, s.default))}")
        lines.append("")
    return "\n".join(lines)


@dataclass(frozen=True)
class Config:
    """The settings of one node and every path under its data directory."""

    data_dir: Path
    settings: Any  # a Settings instance

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not fields: the settings themselves.
        if name in _BY_NAME:
            return getattr(self.settings, name)
        raise AttributeError(name)

    @property
    def config_file(self) -> Path:
        return self.data_dir / CONFIG_FILE

    @property
    def key_file(self) -> Path:
        return self.data_dir / KEY_FILE

    @property
    def version_file(self) -> Path:
        return self.data_dir / VERSION_FILE

    @property
    def lock_file(self) -> Path:
        return self.data_dir / LOCK_FILE

    @property
    def api_file(self) -> Path:
        return self.data_dir / API_FILE

    @property
    def db_file(self) -> Path:
        return self.data_dir / DB_FILE

    @property
    def blobs_dir(self) -> Path:
        return self.data_dir / BLOBS_DIR

    @property
    def log_path(self) -> Path | None:
        return self.data_dir / self.settings.log_file if self.settings.log_file else None

    def values(self) -> dict[str, Any]:
        return {s.name: getattr(self.settings, s.name) for s in SETTINGS}


def make_config(data_dir: Path, values: Mapping[str, Any] = {}, overrides: Mapping[str, Any] = {}) -> Config:
    """Defaults, then ``values`` (from the file), then ``overrides`` (from flags); all checked."""
    merged: dict[str, Any] = {}
    for source in (values, overrides):
        for name, value in source.items():
            setting = _BY_NAME.get(name)
            if setting is None:
                raise ConfigError(f"unknown setting {name!r}")
            merged[name] = check_value(setting, value)
    return Config(Path(data_dir).resolve(), Settings(**merged))


def load_config(data_dir: Path, overrides: Mapping[str, Any] = {}) -> Config:
    path = Path(data_dir) / CONFIG_FILE
    try:
        with open(path, "rb") as f:
            values = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: {error}") from None
    try:
        return make_config(data_dir, values, overrides)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One option per setting that has a flag; unset options stay None (no override)."""
    for s in SETTINGS:
        if s.flag is None:
            continue
        dest = f"setting_{s.name}"
        if s.type is list:
            parser.add_argument(s.flag, dest=dest, action="append", choices=s.choices, help=f"{s.help} (repeatable)")
        elif s.type is bool:
            parser.add_argument(s.flag, dest=dest, action=argparse.BooleanOptionalAction, help=s.help)
        else:
            parser.add_argument(s.flag, dest=dest, type=s.type, choices=s.choices, help=s.help)


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for s in SETTINGS:
        value = getattr(args, f"setting_{s.name}", None)
        if value is not None:
            out[s.name] = value
    return out
