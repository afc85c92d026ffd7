"""/gavel/evidence/2.0.0: a defender hands its evidence for a node claim to the claim's referee (§8.2).

One request, one answer: the request is the `ClaimEvidence`'s canonical encoding (its keccak is
the `evidenceHash` the defender posts on chain); the answer is empty when the referee took it,
or a refusal with its reason. The referee's side decodes strictly (malformed bytes are refused
with the decoder's reason, never raised into the node) and hands the evidence to `accept`, which
checks it against the chain and may refuse it with `RequestRefused`.

The referee's peer is found from its account: the Ed25519 node key it registered on chain is
its libp2p identity (`node.peer_identity.peer_id_of_key`).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from libp2p.peer.id import ID

from protocol import RemoteProtocolError
from protocol.claim_evidence import MAX_EVIDENCE_SIZE, ClaimEvidence

from ...peer_identity import peer_id_of_key
from ...streams import RequestRefused, StreamLimits

EVIDENCE_PROTOCOL = "/gavel/evidence/2.0.0"
# A frame holds a whole evidence blob (a node's input tensors) and the refusal's reason.
EVIDENCE_LIMITS = StreamLimits(max_frame=MAX_EVIDENCE_SIZE + 1024, read_timeout=60.0, write_timeout=60.0)

EvidenceSink = Callable[[ID, ClaimEvidence], Awaitable[None]]


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


def evidence_sender(ctx: Any) -> Callable[[str, ClaimEvidence], Awaitable[None]]:
    """A node's way to hand evidence to a referee by its account (the defender's `send_evidence`):
    the account's registered key names its peer, reached as the data service reaches a seat."""

    async def send(referee: str, evidence: ClaimEvidence) -> None:
        await ctx.job_data.peer_of_seat(referee)  # connected, from what the node knows of its addresses
        key = await ctx.chain.run(ctx.chain.key_of_sync, referee)
        await send_evidence(ctx.host, key, evidence, timeout=ctx.config.request_timeout)

    return send


__all__ = ["EVIDENCE_LIMITS", "EVIDENCE_PROTOCOL", "EvidenceSink", "evidence_sender", "serve_evidence",
           "send_evidence"]
