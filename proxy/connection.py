"""One client connection and its upstream connection: the per-connection state lives here.

Data path, client to broker: frames are split by a ``FrameReader`` only to learn each
request's (api key, version, correlation id) for the in-flight queue; the bytes themselves
are forwarded as the chunk that arrived, without copying or re-encoding. Broker to client:
each response is matched against the head of the in-flight queue (Kafka answers in request
order on a connection) and, if it may carry broker addresses, decoded and rewritten.

Flow control uses the transports' own water marks: when one side's write buffer is full,
reading from the other side pauses (``ReadGate``), and resumes when it drains.

Bad input closes only this connection, with a log line naming the peer and the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from codec import api
from codec.framing import FrameReader
from codec.headers import HeaderError, parse_request_header, peek_correlation_id, peek_request, produce_acks
from proxy import rewrite
from proxy.flow import ReadGate

if TYPE_CHECKING:
    from proxy.cluster import VirtualCluster

log = logging.getLogger("kgate.connection")

PRODUCE = 0
SASL_HANDSHAKE = 17
RAW_SASL = -1  # in-flight marker: a bare SASL token after SaslHandshake v0


def _plausible_request(frame: memoryview) -> bool:
    """Whether a frame after SaslHandshake v0 looks like a Kafka request rather than a raw token."""
    if len(frame) < 14:
        return False
    api_key, version, _cid = peek_request(frame)
    info = api.API_INFO.get(api_key)
    return info is not None and 0 <= version <= info.max_version


def _handshake_mechanism(frame: memoryview) -> str:
    """The mechanism named in a SaslHandshake v0 request ("" if unreadable)."""
    try:
        header = parse_request_header(frame, 1)
        msg = api.decode_request(SASL_HANDSHAKE, 0, frame[header.body_offset :])
    except (HeaderError, api.CodecError, ValueError):
        return ""
    return str(msg.mechanism).upper()


class UpstreamProtocol(asyncio.Protocol):
    """The broker side of a ``ClientConnection``; it only relays events to it."""

    __slots__ = ("conn", "transport")

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.conn.upstream_data(data)

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.conn.gate.pause("upstream-buffer-full")

    def resume_writing(self) -> None:
        self.conn.gate.resume("upstream-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.upstream_lost(exc)


class ClientConnection(asyncio.Protocol):
    """A client connection, its upstream, and the queue of requests awaiting a response."""

    def __init__(self, cluster: VirtualCluster, node_id: int | None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        settings = cluster.settings
        self.reader = FrameReader(settings.max_frame_bytes)
        self.upstream_reader = FrameReader(settings.max_frame_bytes)
        self.gate = ReadGate()  # pauses reading from the client
        self.upstream_gate = ReadGate()  # pauses reading from the broker
        # (correlation id, api key, api version) of each request awaiting its response
        self.inflight: deque[tuple[int, int, int]] = deque()
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._sasl_raw: str | None = None  # mechanism, while bare SASL tokens are expected
        self._sasl_requested = ""  # mechanism of the last SaslHandshake v0 request
        self._sasl_tokens = 0
        self._connect_task: asyncio.Task[None] | None = None
        self._early: list[bytes] = []  # client bytes received before the upstream connected

    @property
    def inflight_count(self) -> int:
        return len(self.inflight)

    # -- client side -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        s = self.cluster.settings
        transport.set_write_buffer_limits(high=s.high_water_bytes, low=s.low_water_bytes)
        self.gate.attach(transport)
        self.gate.pause("connecting")
        self.cluster.connections.add(self)
        self.cluster.metrics.connections.inc()
        self.cluster.metrics.connections_total.inc()
        self._connect_task = asyncio.get_running_loop().create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        settings = self.cluster.settings
        errors = []
        for host, port in self.cluster.upstream_targets(self.node_id):
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: UpstreamProtocol(self), host, port),
                    settings.connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                self.cluster.metrics.upstream_connect_failures.inc()
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if self.closed:
                transport.close()
                return
            transport.set_write_buffer_limits(high=settings.high_water_bytes, low=settings.low_water_bytes)
            self.upstream = transport  # type: ignore[assignment]
            self.upstream_gate.attach(transport)  # type: ignore[arg-type]
            if self._early:
                transport.writelines(self._early)
                self._early.clear()
            self.gate.resume("connecting")
            return
        self.close(f"no upstream reachable ({'; '.join(errors)})", error="upstream-unreachable")

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        try:
            for frame in reader.feed(data):
                self._track_request(frame)
        except HeaderError as exc:
            self.close(f"malformed request: {exc}", error="malformed-request")
            return
        if reader.error is not None:
            self.close(f"bad frame from client: {reader.error}", error="bad-frame")
            return
        # No filter changes requests yet: the chunk goes out exactly as it came, partial tail
        # included (the reader keeps its own copy of the tail for bookkeeping).
        if self.upstream is not None:
            self.upstream.write(data)
        else:
            # Reading is paused until the upstream connects, but a transport may still deliver
            # what it had already read; hold it (bounded by one read) until then.
            self._early.append(data)

    def _track_request(self, frame: memoryview) -> None:
        if self._sasl_raw is not None and self._is_sasl_token(frame):
            self.inflight.append((0, RAW_SASL, 0))
            return
        api_key, version, cid = peek_request(frame)
        self.cluster.metrics.request(api_key).inc()
        if api_key == PRODUCE:
            header = parse_request_header(frame, 2 if version >= 9 else 1)
            if produce_acks(frame, header.body_offset, version) == 0:
                return  # acks=0: the broker sends no response, so nothing waits for one
        elif api_key == SASL_HANDSHAKE and version == 0:
            self._sasl_requested = _handshake_mechanism(frame)
        self.inflight.append((cid, api_key, version))

    def _is_sasl_token(self, frame: memoryview) -> bool:
        """After SaslHandshake v0, tokens travel without Kafka headers until auth completes.

        PLAIN is exactly one token (whose first bytes could pass for a header); for other
        mechanisms the exchange ends at the first frame that parses as a Kafka request.
        """
        if self._sasl_raw == "PLAIN":
            is_token = self._sasl_tokens == 0
        else:
            is_token = not _plausible_request(frame)
        if not is_token:
            self._sasl_raw = None
            return False
        self._sasl_tokens += 1
        return True

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.upstream_gate.pause("client-buffer-full")

    def resume_writing(self) -> None:
        self.upstream_gate.resume("client-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed and self.inflight:
            log.debug("client %s went away with %d request(s) in flight", self.peer, len(self.inflight))
        self._teardown()

    # -- broker side -----------------------------------------------------------------------
    def upstream_data(self, data: bytes) -> None:
        frames = self.upstream_reader.feed(data)
        transport = self.transport
        for frame in frames:
            out = self._on_response(frame)
            if out is None:
                return
            if transport is not None:
                transport.write(out)
        if self.upstream_reader.error is not None:
            self.close(f"bad frame from broker: {self.upstream_reader.error}", error="bad-upstream-frame")

    def _on_response(self, frame: memoryview) -> memoryview | bytes | None:
        if not self.inflight:
            self.close("broker sent a response nobody asked for", error="unexpected-response")
            return None
        cid, api_key, version = self.inflight.popleft()
        if api_key == RAW_SASL:
            return frame
        try:
            got = peek_correlation_id(frame)
        except HeaderError as exc:
            self.close(f"malformed response from broker: {exc}", error="bad-upstream-frame")
            return None
        if got != cid:
            self.close(f"broker answered correlation id {got}, expected {cid}", error="out-of-order")
            return None
        if api_key == SASL_HANDSHAKE and version == 0:
            self._after_sasl_handshake_v0(frame)
            return frame
        if not rewrite.needs_rewrite(api_key, version):
            return frame
        try:
            if api_key == rewrite.API_VERSIONS:
                new = rewrite.cap_api_versions(frame, version)
            else:
                new = rewrite.rewrite_addresses(frame, api_key, version, self.cluster.client_address)
        except rewrite.RewriteError as exc:
            self.close(str(exc), error="undecodable-response")
            return None
        if new is None:
            return frame
        self.cluster.metrics.rewrite(api_key).inc()
        return new

    def _after_sasl_handshake_v0(self, frame: memoryview) -> None:
        try:
            msg = api.decode_response(SASL_HANDSHAKE, 0, frame[8:])
        except (api.CodecError, ValueError):
            return
        if msg.error_code == 0:
            self._sasl_raw = self._sasl_requested
            self._sasl_tokens = 0

    def upstream_lost(self, exc: Exception | None) -> None:
        self.upstream = None
        if not self.closed:
            reason = f"broker closed the connection ({exc})" if exc else "broker closed the connection"
            self.close(reason)

    # -- teardown --------------------------------------------------------------------------
    def close(self, reason: str, error: str | None = None) -> None:
        """Close both sides; pending writes to the client are flushed first."""
        if self.closed:
            return
        self.closed = True
        if error is not None:
            log.warning("closing client %s (cluster %s): %s", self.peer, self.cluster.name, reason)
            self.cluster.metrics.closed_on_error(error)
        else:
            log.debug("closing client %s (cluster %s): %s", self.peer, self.cluster.name, reason)
        if self.transport is not None:
            self.transport.close()
        if self.upstream is not None:
            self.upstream.close()
        self._teardown()

    def _teardown(self) -> None:
        self.closed = True
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None
        if self in self.cluster.connections:
            self.cluster.connections.discard(self)
            self.cluster.metrics.connections.dec()
