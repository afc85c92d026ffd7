"""/gavel/evidence/2.0.0: a defender hands its evidence for a node claim to the claim's referee (§8.2);
/gavel/evidence-of/2.0.0: the referee asks a seat for the evidence it posted.

One request, one answer: the request is the `ClaimEvidence`'s canonical encoding (its keccak is
the `evidenceHash` the defender posts on chain); the answer is empty when the referee took it,
or a refusal with its reason. The referee's side decodes strictly (malformed bytes are refused
with the decoder's reason, never raised into the node) and hands the evidence to `accept`, which
checks it against the chain and may refuse it with `RequestRefused`.

The second is the same evidence the other way: the request is the claim's 32-byte id, the
answer the evidence's canonical encoding (or a refusal). The defender pushes; on a congested
network its pushes can fail for as long as the referee's window lasts, and an honest referee that
holds nothing when its ruling is due rules the defenders wrong (and loses its bond if an appeal
overturns it). So the referee also pulls what was posted and has not arrived (`RefereeDuty.pull`).
The referee checks what it pulls like what is pushed: its keccak must be a hash posted on chain.

The referee's peer is found from its account: the Ed25519 node key it registered on chain is
its libp2p identity (`node.peer_identity.peer_id_of_key`).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from libp2p.peer.id import ID

from protocol import RemoteProtocolError
from protocol.claim_evidence import MAX_EVIDENCE_SIZE, ClaimEvidence

from ...errors import BadMessage
from ...peer_identity import peer_id_of_key
from ...streams import RequestRefused, StreamLimits

EVIDENCE_PROTOCOL = "/gavel/evidence/2.0.0"
# A frame holds a whole evidence blob (a node's input tensors) and the refusal's reason.
EVIDENCE_LIMITS = StreamLimits(max_frame=MAX_EVIDENCE_SIZE + 1024, read_timeout=60.0, write_timeout=60.0)

EVIDENCE_OF_PROTOCOL = "/gavel/evidence-of/2.0.0"

EvidenceSink = Callable[[ID, ClaimEvidence], Awaitable[None]]
EvidenceStore = Callable[[bytes], ClaimEvidence | None]  # claim id -> the evidence this node posted for it


def serve_evidence(host: Any, accept: EvidenceSink) -> None:
    """Answer /gavel/evidence/2.0.0 on `host`: decode, then `await accept(peer, evidence)`."""

    async def respond(peer: ID, request: bytes) -> bytes:
        try:
            evidence = ClaimEvidence.decode(request)
        except RemoteProtocolError as error:
            raise RequestRefused(f"malformed evidence: {error}") from None
        await accept(peer, evidence)
        return b""

    host.handle_requests(EVIDENCE_PROTOCOL, respond, EVIDENCE_LIMITS)


async def send_evidence(host: Any, referee_key: bytes, evidence: ClaimEvidence, *, timeout: float | None = None) -> None:
    """Send `evidence` to the referee whose registered node key is `referee_key`; a refusal or an
    unreachable referee raises the host's typed `PeerError`."""
    await host.request(peer_id_of_key(referee_key), EVIDENCE_PROTOCOL, evidence.encode(), timeout=timeout,
                       limits=EVIDENCE_LIMITS)


def serve_evidence_of(host: Any, evidence_of: EvidenceStore) -> None:
    """Answer /gavel/evidence-of/2.0.0 on `host` with the evidence `evidence_of(claim id)` holds."""

    async def respond(peer: ID, request: bytes) -> bytes:
        if len(request) != 32:
            raise RequestRefused(f"a request is a claim id of 32 bytes, not {len(request)}")
        evidence = evidence_of(bytes(request))
        if evidence is None:
            raise RequestRefused(f"no evidence of claim {bytes(request).hex()} here")
        return evidence.encode()

    host.handle_requests(EVIDENCE_OF_PROTOCOL, respond, EVIDENCE_LIMITS)


async def fetch_evidence(host: Any, seat_key: bytes, claim_id: bytes, *, timeout: float | None = None) -> ClaimEvidence:
    """The evidence the seat whose registered node key is `seat_key` posted for `claim_id`; a refusal,
    an unreachable seat or undecodable bytes raise the host's typed `PeerError`."""
    answer = await host.request(peer_id_of_key(seat_key), EVIDENCE_OF_PROTOCOL, claim_id, timeout=timeout,
                                limits=EVIDENCE_LIMITS)
    try:
        return ClaimEvidence.decode(answer)
    except RemoteProtocolError as error:
        raise BadMessage(f"evidence of claim {claim_id.hex()[:12]}: {error}") from None


def evidence_sender(ctx: Any) -> Callable[[str, ClaimEvidence], Awaitable[None]]:
    """A node's way to hand evidence to a referee by its account (the defender's `send_evidence`):
    the account's registered key names its peer, reached as the data service reaches a seat."""

    async def send(referee: str, evidence: ClaimEvidence) -> None:
        await ctx.job_data.peer_of_seat(referee)  # connected, from what the node knows of its addresses
        key = await ctx.chain.run(ctx.chain.key_of_sync, referee)
        await send_evidence(ctx.host, key, evidence, timeout=ctx.config.request_timeout)

    return send


def evidence_fetcher(ctx: Any) -> Callable[[str, bytes], Awaitable[ClaimEvidence]]:
    """A node's way to ask a seat by its account for the evidence it posted (the referee's `fetch`)."""

    async def fetch(seat: str, claim_id: bytes) -> ClaimEvidence:
        await ctx.job_data.peer_of_seat(seat)
        key = await ctx.chain.run(ctx.chain.key_of_sync, seat)
        return await fetch_evidence(ctx.host, key, claim_id, timeout=ctx.config.request_timeout)

    return fetch


__all__ = ["EVIDENCE_LIMITS", "EVIDENCE_OF_PROTOCOL", "EVIDENCE_PROTOCOL", "EvidenceSink", "EvidenceStore",
           "evidence_fetcher", "evidence_sender", "fetch_evidence", "send_evidence", "serve_evidence",
           "serve_evidence_of"]
