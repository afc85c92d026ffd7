"""Typed errors of the node layer, all under one base.

Two kinds, as in h11: ``LocalError`` means this node was asked to do something it
cannot (a missing blob, a locked data directory); ``PeerError`` means a remote peer
misbehaved or went away (garbage bytes, an oversized frame, a timeout, a wrong blob
chunk). Code that talks to peers catches ``PeerError``, closes the stream or drops
the peer, and keeps serving everyone else.
"""
from __future__ import annotations


def leaves(group: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions of a (nested) exception group, flattened."""
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def describe_failure(error: BaseException) -> str:
    """An error in one line, ``Type: message``; an exception group says its leaves' (a task's
    error inside a nursery is wrapped in one, which says only how many it holds)."""
    errors = leaves(error) if isinstance(error, BaseExceptionGroup) else [error]  # a group is never empty
    return "; ".join(f"{type(e).__name__}: {e}" for e in errors)


class NodeError(Exception):
    """Base of every error raised by the node layer."""


class LocalError(NodeError):
    """This node cannot do what it was asked (bad argument, missing file, busy)."""


class PeerError(NodeError):
    """A remote peer misbehaved, stalled or disconnected. ``peer`` names it when known."""

    def __init__(self, message: str, *, peer: object = None) -> None:
        self.peer = peer
        super().__init__(f"{message} (peer {peer})" if peer is not None else message)


class FrameTooLarge(PeerError):
    """A frame header announced more bytes than the protocol allows."""


class BadMessage(PeerError):
    """A frame arrived but its content does not decode or breaks the protocol."""


class PeerTimeout(PeerError):
    """The peer did not send (or accept) bytes within the allowed time."""


class StreamClosed(PeerError):
    """The stream ended (EOF or reset). ``clean`` is true at a frame boundary."""

    def __init__(self, message: str, *, peer: object = None, clean: bool = False) -> None:
        self.clean = clean
        super().__init__(message, peer=peer)


class PeerUnreachable(PeerError):
    """Dialing the peer, or opening a stream to it, failed."""


class ProtocolNotSupported(PeerUnreachable):
    """The peer is reachable but does not speak the requested stream protocol."""


class RemoteError(PeerError):
    """The peer answered a request with an error message instead of a result."""


class BlobCorrupt(PeerError):
    """A blob manifest or chunk from a peer does not match the blob id."""


class BlobNotFound(LocalError):
    """The blob is not in the local store (or the peer said it has not got it)."""


class DataDirError(LocalError):
    """The data directory is missing, malformed or in use by another process."""


class ConfigError(LocalError):
    """A setting has an unknown name or a value of the wrong type."""


def is_transient(error: BaseException) -> bool:
    """Whether trying again may help: the peer was out of reach, slow or cut off, not wrong."""
    return isinstance(error, (PeerUnreachable, PeerTimeout, StreamClosed)) and not isinstance(
        error, ProtocolNotSupported)
