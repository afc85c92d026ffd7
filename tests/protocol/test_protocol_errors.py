"""The two error kinds under one base."""
from __future__ import annotations

import pytest

from protocol import LocalProtocolError, ProtocolError, RemoteProtocolError, decode_envelope


def test_both_kinds_share_a_base_and_are_distinct():
    assert issubclass(LocalProtocolError, ProtocolError) and issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
    assert not issubclass(RemoteProtocolError, LocalProtocolError)


def test_the_receive_path_reports_remote_errors():
    for data in (b"", b"\x80", bytes(100), "text"):
        with pytest.raises(RemoteProtocolError):
            decode_envelope(data)  # type: ignore[arg-type]
