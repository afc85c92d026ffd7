"""/gavel/node-output/2.0.0: a seat's output tensor of a node picked in its node list, for the
claimant that names a duel's element (docs/onchain-step.md; `challenger`).

The claimant knows the defenders' output of node n only by its hash (entry n of their node
list); a duel names one element where the two outputs differ, and one where they agree loses it.
So it asks a seat covering the list for the tensor. One request, one answer: the request is the
node claim's id; the answer is the tensor (`protocol.messages.TensorPayload`), or a refusal with
its reason. The seat answers only for an open node claim on a node list it covers (read from the
chain, so a request may come before its follower handed the pick); the fetcher decodes strictly
and takes the tensor only when it hashes to the list's entry (`BadMessage` otherwise). A seat
that refuses or sends another tensor leaves the claim to the referee path; it gains nothing by it.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

import numpy as np

from protocol import RemoteProtocolError
from protocol.envelope import MAX_TENSOR_MESSAGE_SIZE
from protocol.messages import TensorPayload
from protocol.wire import decode_struct

from ...errors import BadMessage
from ...peer_identity import peer_id_of_key
from ...streams import RequestRefused, StreamLimits

NODE_OUTPUT_PROTOCOL = "/gavel/node-output/2.0.0"
NODE_OUTPUT_LIMITS = StreamLimits(max_frame=MAX_TENSOR_MESSAGE_SIZE + 1024, read_timeout=60.0, write_timeout=60.0)

OutputLookup = Callable[[bytes], Awaitable[np.ndarray]]  # node claim -> our output (LookupError: none)
# (seat account, node claim, the node list's entry) -> the seat's output tensor, checked
NodeOutputSource = Callable[[str, bytes, bytes], Awaitable[np.ndarray]]


def serve_node_outputs(host: Any, lookup: OutputLookup) -> None:
    """Answer /gavel/node-output/2.0.0 on `host` with `await lookup(claim_id)`."""

    async def respond(peer: Any, request: bytes) -> bytes:
        if len(request) != 32:
            raise RequestRefused(f"a node claim id is 32 bytes, not {len(request)}")
        try:
            output = await lookup(request)
        except LookupError as error:
            raise RequestRefused(str(error)) from None
        return TensorPayload.from_array(output).encode()

    host.handle_requests(NODE_OUTPUT_PROTOCOL, respond, NODE_OUTPUT_LIMITS)


async def fetch_node_output(host: Any, seat_key: bytes, claim_id: bytes, entry: bytes, *,
                            timeout: float | None = None) -> np.ndarray:
    """The output tensor of the node claimed in `claim_id` from the seat whose registered node key is
    `seat_key`, checked against `entry` (its node list's); the host's typed `PeerError` otherwise."""
    peer = peer_id_of_key(seat_key)
    answer = await host.request(peer, NODE_OUTPUT_PROTOCOL, claim_id, timeout=timeout, limits=NODE_OUTPUT_LIMITS)
    try:
        payload = decode_struct(TensorPayload, answer, max_size=NODE_OUTPUT_LIMITS.max_frame)
    except RemoteProtocolError as error:
        raise BadMessage(f"node output of claim {claim_id.hex()[:12]}: {error}", peer=peer) from None
    if payload.tensor_hash() != entry:
        raise BadMessage(f"node output of claim {claim_id.hex()[:12]}: not the tensor of the node list's entry",
                         peer=peer)
    return payload.to_array()


def node_output_source(ctx: Any, reach: Callable[[str], Awaitable[Any]]) -> NodeOutputSource:
    """A node's way to ask a seat (by its account) for its output: `reach(account)` connects to it."""

    async def output_of(seat: str, claim_id: bytes, entry: bytes) -> np.ndarray:
        await reach(seat)
        key = await ctx.chain.run(ctx.chain.key_of_sync, seat)
        return await fetch_node_output(ctx.host, key, claim_id, entry, timeout=ctx.config.request_timeout)

    return output_of


__all__ = ["NODE_OUTPUT_LIMITS", "NODE_OUTPUT_PROTOCOL", "NodeOutputSource", "OutputLookup", "fetch_node_output",
           "node_output_source", "serve_node_outputs"]
