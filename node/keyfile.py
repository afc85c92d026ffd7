"""Key files: a node's identity on disk (`protocol.Identity`'s seed).

A key file holds an identity's 32-byte seed as two text lines::

    gavel-ed25519-seed/1
    <64 hex digits>

It is written atomically (a temporary file in the same directory, fsynced, then
renamed or linked into place) with mode 0600 from the start, so a crash never leaves
a half-written key and the secret is never readable by others, not even briefly.
Reading refuses a file that group or others may read, as ssh does.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from protocol.identity import SEED_SIZE, Identity

from .errors import LocalError

KEY_FILE_HEADER = "gavel-ed25519-seed/1"
KEY_FILE_MODE = 0o600


class KeyFileError(LocalError):
    """A key file that is missing, malformed, too widely readable, or already exists."""


def write_key_file(path: str | os.PathLike, identity: Identity, *, overwrite: bool = False) -> None:
    """Write `identity`'s seed to `path` atomically with mode 0600."""
    path = Path(path)
    data = f"{KEY_FILE_HEADER}\n{identity.seed.hex()}\n".encode()
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_FILE_MODE)
    try:
        try:
            os.fchmod(fd, KEY_FILE_MODE)  # the umask may have cleared bits we asked for; never more
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if `path` exists: no clobbering, still atomic
            except FileExistsError:
                raise KeyFileError(f"{path}: a key file already exists") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_directory(path.parent)


def read_key_file(path: str | os.PathLike) -> Identity:
    """The identity stored in `path`; refuses files readable by group or others."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no key file") from None
    try:
        mode = os.fstat(fd).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeyFileError(f"{path}: permissions {stat.S_IMODE(mode):04o} are too open; use 0600")
        raw = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        header, seed_hex, *rest = raw.decode("ascii").split("\n")
        seed = bytes.fromhex(seed_hex)
    except (UnicodeDecodeError, ValueError):
        raise KeyFileError(f"{path}: not a gavel key file") from None
    if header != KEY_FILE_HEADER or len(seed) != SEED_SIZE or any(rest):
        raise KeyFileError(f"{path}: not a {KEY_FILE_HEADER} key file")
    return Identity(seed)


def create_key_file(path: str | os.PathLike) -> Identity:
    """Generate a fresh identity and write it to `path`, which must not exist yet."""
    identity = Identity.generate()
    write_key_file(path, identity)
    return identity


def _fsync_directory(directory: Path) -> None:
    # the rename is durable only once the directory entry is on disk
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
