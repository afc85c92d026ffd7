"""Key files: atomic, mode 0600, refused when too open or malformed."""
from __future__ import annotations

import os
import stat

import pytest

from node.keyfile import KeyFileError, create_key_file, read_key_file, write_key_file
from protocol import Identity

SEED = bytes(range(32))


def test_round_trip_with_mode_0600_and_no_leftovers(tmp_path):
    path = tmp_path / "node.key"
    write_key_file(path, Identity(SEED))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_key_file(path) == Identity(SEED)
    assert os.listdir(tmp_path) == ["node.key"]
    assert path.read_text() == f"gavel-ed25519-seed/1\n{SEED.hex()}\n"


def test_mode_is_0600_even_under_a_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        write_key_file(tmp_path / "k", Identity(SEED))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600


def test_existing_files_are_kept_unless_overwrite(tmp_path):
    path = tmp_path / "node.key"
    first = create_key_file(path)
    with pytest.raises(KeyFileError, match="already exists"):
        write_key_file(path, Identity(SEED))
    assert read_key_file(path) == first
    write_key_file(path, Identity(SEED), overwrite=True)
    assert read_key_file(path) == Identity(SEED)
    assert sorted(os.listdir(tmp_path)) == ["node.key"]


def test_too_open_permissions_are_refused(tmp_path):
    path = tmp_path / "node.key"
    write_key_file(path, Identity(SEED))
    os.chmod(path, 0o640)
    with pytest.raises(KeyFileError, match="too open"):
        read_key_file(path)


@pytest.mark.parametrize("text", [
    "", "gavel-ed25519-seed/1\n", "gavel-ed25519-seed/2\n" + "00" * 32 + "\n", "gavel-ed25519-seed/1\nzz\n",
    "gavel-ed25519-seed/1\n" + "00" * 31 + "\n", "gavel-ed25519-seed/1\n" + "00" * 32 + "\nextra\n",
])
def test_malformed_files_are_refused(tmp_path, text):
    path = tmp_path / "bad.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, text.encode())
    os.close(fd)
    with pytest.raises(KeyFileError):
        read_key_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(KeyFileError, match="no key file"):
        read_key_file(tmp_path / "absent.key")
