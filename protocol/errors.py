"""The protocol's two error kinds, under one base.

`LocalProtocolError`: the caller misused the library (an impossible transition, a
value out of range for a message it builds, time running backwards). Fix the caller.

`RemoteProtocolError`: the peer misbehaved (bytes that do not parse, a bad
signature, a replayed or expired message, a move the game does not allow now). The
receive path turns *every* failure on untrusted input into this kind and raises
nothing else, so a network layer can catch exactly one exception per message.
"""
from __future__ import annotations


class ProtocolError(Exception):
    """Base of every error this package raises on purpose."""


class LocalProtocolError(ProtocolError):
    """The caller misused the library."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something malformed, forged, stale or out of turn."""
