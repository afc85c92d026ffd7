"""The data directory: created by ``init``, locked by a running node, read by ``status``.

Layout (names in ``node.config``)::

    config.toml    settings (see node.config.SETTINGS)
    key            the node's 32-byte Ed25519 seed, mode 0600 (node.keyfile format)
    repo_version   layout version of this directory
    repo.lock      flock()ed by the running node
    api            JSON: pid, peer id, listen and metrics addresses; only while running
    gavel.db       SQLite (node.storage)
    blobs/         content-addressed blobs (node.blobs)
"""
from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .atomic_file import write_atomic
from .config import CONFIG_FILE, VERSION_FILE, Config, load_config, make_config, render_toml
from .errors import ConfigError, DataDirError

REPO_VERSION = 1


def _missing(data_dir: Path) -> DataDirError:
    return DataDirError(f"no gavel data directory at {data_dir}; run: gavel node init --data-dir {data_dir}")


def init_datadir(data_dir: Path, values: Mapping[str, Any] = {}) -> Config:
    """Create config, key and version file. Refuses a directory that already has a config."""
    from .keyfile import create_key_file

    data_dir = Path(data_dir)
    config = make_config(data_dir, values)  # checks the values before touching the disk
    if config.config_file.exists() or config.key_file.exists():
        raise DataDirError(f"{data_dir} is already initialised (has {CONFIG_FILE} or a key)")
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    create_key_file(config.key_file)
    write_atomic(config.config_file, render_toml(config.values()))
    write_atomic(config.version_file, f"{REPO_VERSION}\n")
    return config


def open_datadir(data_dir: Path, overrides: Mapping[str, Any] = {}) -> Config:
    """The config of an initialised data directory, with ``overrides`` applied."""
    data_dir = Path(data_dir)
    if not (data_dir / CONFIG_FILE).is_file():
        raise _missing(data_dir)
    try:
        version = int((data_dir / VERSION_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        raise DataDirError(f"{data_dir}: missing or unreadable {VERSION_FILE}") from None
    if version != REPO_VERSION:
        raise DataDirError(f"{data_dir}: layout version {version}, this gavel reads {REPO_VERSION}")
    try:
        return load_config(data_dir, overrides)
    except ConfigError as error:
        raise DataDirError(str(error)) from None


def peer_id_text(public_key: bytes) -> str:
    """The libp2p PeerID of an Ed25519 public key, without importing libp2p (slow):
    base58 of the identity multihash of the key's protobuf encoding."""
    import base58

    encoded = b"\x08\x01\x12\x20" + public_key  # KeyType Ed25519, 32-byte data
    return base58.b58encode(b"\x00" + bytes([len(encoded)]) + encoded).decode()


def load_seed(config: Config) -> bytes:
    from .keyfile import KeyFileError, read_key_file

    try:
        return read_key_file(config.key_file).seed
    except KeyFileError as error:
        raise DataDirError(str(error)) from None


class DataDirLock:
    """An exclusive ``flock`` on the lock file, held while a node runs.

    The kernel drops the lock when the process dies, however it dies, so a lock
    file nobody holds is stale by definition."""

    def __init__(self, config: Config) -> None:
        self.path = config.lock_file
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DataDirError(f"{self.path.parent} is in use by another gavel node (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Safe to call twice. The file stays: removing it could race a starting node."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DataDirLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lock_is_held(config: Config) -> bool:
    """Whether some process holds the data directory's lock right now."""
    try:
        fd = os.open(config.lock_file, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing also drops a lock we just took
    return False


@dataclass(frozen=True)
class ApiInfo:
    """What a running node tells local tools about itself."""

    pid: int
    peer_id: str
    addrs: list[str]
    metrics: str
    roles: list[str]
    started: float


def write_api(config: Config, info: ApiInfo) -> None:
    write_atomic(config.api_file, json.dumps(info.__dict__, indent=1) + "\n")


def read_api(config: Config) -> ApiInfo | None:
    try:
        raw = json.loads(config.api_file.read_text())
        return ApiInfo(**{k: raw[k] for k in ApiInfo.__dataclass_fields__})
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        raise DataDirError(f"{config.api_file}: malformed") from None


def remove_api(config: Config) -> None:
    config.api_file.unlink(missing_ok=True)


def clear_stale(config: Config) -> bool:
    """Remove the api and lock files if no process holds the lock; True if any was removed."""
    if lock_is_held(config):
        return False
    removed = False
    for path in (config.api_file, config.lock_file):
        if path.exists():
            path.unlink(missing_ok=True)
            removed = True
    return removed
