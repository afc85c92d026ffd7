"""Prometheus metrics of one node, served as text on a loopback HTTP port.

Each node has its own registry (several nodes can share a process in tests), and the
endpoint is a tiny trio responder rather than prometheus-client's thread server, so
it lives and dies inside the node's nursery like everything else.
"""
from __future__ import annotations

import logging
from typing import Any

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .errors import PeerError

log = logging.getLogger(__name__)

MAX_REQUEST = 8192
REQUEST_TIMEOUT = 2.0


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.peers = Gauge("gavel_peers_connected", "Peers with an open connection", registry=r)
        self.bytes_in = Counter("gavel_stream_bytes_in", "Bytes read on gavel stream protocols", registry=r)
        self.bytes_out = Counter("gavel_stream_bytes_out", "Bytes written on gavel stream protocols", registry=r)
        self.gossip_in = Counter("gavel_gossip_received", "Gossip messages delivered to handlers", ["topic"], registry=r)
        self.gossip_out = Counter("gavel_gossip_published", "Gossip messages published", ["topic"], registry=r)
        self.gossip_dropped = Counter(
            "gavel_gossip_dropped", "Gossip messages dropped because a handler fell behind", ["topic"], registry=r
        )
        self.peer_errors = Counter("gavel_peer_errors", "Streams dropped for peer misbehaviour", ["kind"], registry=r)
        self.blob_bytes_fetched = Counter("gavel_blob_bytes_fetched", "Verified blob bytes fetched from peers", registry=r)
        self.jobs = Gauge("gavel_jobs", "Jobs known to this node", ["state"], registry=r)
        self.disputes = Gauge("gavel_disputes", "Disputes known to this node", ["state"], registry=r)

    def follow(self, storage: Any) -> None:
        """Make the job and dispute gauges follow ``storage``'s state moves (``Storage.watch_states``):
        counted from its rows once, then each write that moves a row's state moves its gauges
        with it. Once per NodeMetrics."""
        gauges = {"jobs": self.jobs, "disputes": self.disputes}
        for table, counts in storage.watch_states(self._moved).items():
            for state, n in counts.items():
                gauges[table].labels(state).inc(n)

    def _moved(self, table: str, old: str | None, new: str) -> None:
        gauge = self.jobs if table == "jobs" else self.disputes
        if old is not None:
            gauge.labels(old).dec()
        gauge.labels(new).inc()

    # The framing layer's Traffic protocol.
    def count_in(self, n: int) -> None:
        self.bytes_in.inc(n)

    def count_out(self, n: int) -> None:
        self.bytes_out.inc(n)

    def peer_error(self, error: PeerError) -> None:
        self.peer_errors.labels(type(error).__name__).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def _answer(metrics: NodeMetrics, conn: trio.SocketStream) -> None:
    async with conn:
        request = b""
        with trio.move_on_after(REQUEST_TIMEOUT):
            while b"\r\n\r\n" not in request and len(request) < MAX_REQUEST:
                data = await conn.receive_some(MAX_REQUEST)
                if not data:
                    break
                request += data
        line = request.split(b"\r\n", 1)[0].split()
        if len(line) >= 2 and line[0] == b"GET" and line[1].split(b"?")[0] in (b"/metrics", b"/"):
            status, ctype, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), metrics.render()
        else:
            status, ctype, body = b"404 Not Found", b"text/plain", b"only GET /metrics here\n"
        head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
            status,
            ctype,
            len(body),
        )
        with trio.move_on_after(REQUEST_TIMEOUT):
            await conn.send_all(head + body)


async def serve_metrics(
    metrics: NodeMetrics, host: str = "127.0.0.1", port: int = 0, *, task_status=trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``GET /metrics`` until cancelled; ``task_status.started`` gets (host, port)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[:2]
    task_status.started(bound)

    async def handle(conn: trio.SocketStream) -> None:
        try:
            await _answer(metrics, conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            log.debug("metrics client went away: %r", error)

    await trio.serve_listeners(handle, listeners)
