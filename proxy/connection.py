"""One client connection and its upstream connection: all per-connection state lives here.

Client to broker: a ``FrameReader`` splits the stream into frames. When no filter hooks any
request of this cluster, frames are only peeked at for bookkeeping and the bytes go out as
the chunk that arrived. Otherwise each frame a hook wants is decoded and run through the
chain; frames nobody wants go out as their original bytes.

Every request that expects an answer becomes an ``Exchange`` in ``pending`` (the order the
client must get answers in). Forwarded ones also wait in ``upstream_waiting`` (the order the
broker answers in). A response is matched to the head of ``upstream_waiting``, processed
(address rewrite, topic-name learning, response hooks) and stored on its exchange; ``_flush``
writes answers from the head of ``pending`` as soon as they are ready. Answers kgate makes
itself (a filter's ``respond``) take their place in the same queue, so order always holds.

Suspension: a hook that awaits suspends only its own message. Requests behind a suspended
request wait in ``backlog`` (forwarding them first would reorder them at the broker);
reading from the client pauses while the backlog is over its limit. A response hook that
awaits only delays delivery: later responses are processed and wait in ``pending``.

Flow control uses the transports' water marks: when one side's write buffer is full, reading
from the other side pauses (``ReadGate``), and resumes when it drains.

Bad input closes only this connection, with a log line naming the peer and the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from kgate.api import ConnectionInfo
from kgate.codec.framing import FrameReader
from kgate.proxy.exchange import Exchange, close_upstream_gently
from kgate.proxy.flow import ReadGate
from kgate.proxy.held_bytes import HELD
from kgate.proxy.own_listeners import OWN_LISTENERS
from kgate.proxy.request_path import RequestPath
from kgate.proxy.response_path import ResponsePath
from kgate.proxy.sasl import SaslState
from kgate.proxy.timeouts import Snapshot

if TYPE_CHECKING:
    from kgate.proxy.cluster import VirtualCluster

log = logging.getLogger("kgate.connection")


class UpstreamProtocol(asyncio.Protocol):
    """The broker side of a ``ClientConnection``; it only relays events to it.

    Its loss is relayed only once the connection has been adopted (``adopted``): a connection
    kgate drops while choosing a target (one of its own listeners, or one the broker closed at
    once) must not close the client, since the next target may serve it.
    """

    __slots__ = ("adopted", "conn")

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self.adopted = False

    def data_received(self, data: bytes) -> None:
        self.conn.upstream_data(data)

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.conn.gate.pause("upstream-buffer-full")

    def resume_writing(self) -> None:
        self.conn.gate.resume("upstream-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.adopted:
            self.conn.upstream_lost(exc)


class ClientConnection(RequestPath, ResponsePath, asyncio.Protocol):
    """A client connection, its upstream, and the exchanges in flight between them."""

    def __init__(self, cluster: VirtualCluster, node_id: int | None) -> None:
        self.cluster = cluster
        self.chain = cluster.chain
        self.node_id = node_id
        settings = cluster.settings
        self.settings = settings
        self.reader = FrameReader(settings.max_frame_bytes)
        self.upstream_reader = FrameReader(settings.max_frame_bytes)
        self.gate = ReadGate()  # pauses reading from the client
        self.upstream_gate = ReadGate()  # pauses reading from the broker
        self.pending: deque[Exchange] = deque()  # answers owed to the client, in request order
        self.upstream_waiting: deque[Exchange] = deque()  # forwarded, in the order the broker answers
        self.backlog: deque[memoryview] = deque()  # requests behind a suspended one
        self.suspended_request = False
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.info = ConnectionInfo(client_address="?", virtual_cluster=cluster.name)
        self.sasl = SaslState()
        self.closed = False
        self.client_gone = False  # the client left while requests it sent were still queued in kgate
        # raw mode forwards request bytes as they arrive; validation must see each request whole first
        self._raw_requests = not self.chain.has_request_hooks and not settings.validate_requests
        self._connect_task: asyncio.Task[None] | None = None
        self._early: list[bytes | memoryview] = []  # client bytes received before the upstream connected
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stream_left = 0  # bytes of a cut-through response still to forward
        self._req_skip = 0  # bytes of a tracked request still to pass through (raw mode)
        self._req_stream_left = 0  # bytes of a peeked Produce still to pass through (filter mode)
        self._acks0: deque[int] = deque(maxlen=256)  # correlation ids of recent acks=0 Produce
        self._held: list[bytes] = []  # start of a request that cannot be tracked yet (raw mode)
        self._held_len = 0
        self._held_need = 0  # bytes to collect before trying again
        self.rx_chunks = 0  # reads from the client so far (the timeout sweep compares it between sweeps)
        self.up_chunks = 0  # reads from the broker so far
        self.frames_in = 0  # request frames started so far
        self._backlog_bytes = 0  # bytes of the frames in backlog
        self._held_reported = 0  # what proxy/held_bytes.py was last told this connection holds

    @property
    def peer(self) -> str:
        return self.info.client_address

    def begin_drain(self) -> None:
        self.gate.pause("draining")

    @property
    def drained(self) -> bool:
        """Owes the client nothing: no answer pending, nothing queued, nothing streaming."""
        return (
            not self.pending
            and not self.backlog
            and not self._stream_left
            and not self._req_stream_left
            and not self.suspended_request
        )

    @property
    def inflight_count(self) -> int:
        return len(self.pending) + len(self.backlog) + (1 if self._stream_left else 0)

    def timeout_snapshot(self) -> Snapshot:
        """What the timeout sweep needs (proxy/timeouts.py); read once per sweep interval."""
        mid_frame = (
            self.rx_chunks == 0
            or bool(self._held)
            or self._req_skip > 0
            or self._req_stream_left > 0
            or self.reader.buffered > 0
        )
        return Snapshot(
            rx=self.rx_chunks,
            up_rx=self.up_chunks,
            frames=self.frames_in,
            mid_frame=mid_frame,
            owes=not self.drained,
            reading_paused=self.gate.paused,
            upstream_paused=self.upstream_gate.paused,
            head=self.upstream_waiting[0] if self.upstream_waiting else None,
        )

    # -- client side -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self.info.client_address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if not self.cluster.admit(self.node_id, self.info.client_address):
            self.closed = True  # never admitted: nothing to tear down but the socket
            transport.close()
            return
        s = self.settings
        transport.set_write_buffer_limits(high=s.high_water_bytes, low=s.low_water_bytes)  # type: ignore[attr-defined]
        self.gate.pause("connecting")  # before attach: attach also re-pauses after uvloop starts reading
        self.gate.attach(transport)  # type: ignore[arg-type]
        self.cluster.connections.add(self)
        self.cluster.metrics.connections.inc()
        self.cluster.metrics.connections_total.inc()
        self._connect_task = asyncio.get_running_loop().create_task(self._connect_upstream())
        self._connect_task.add_done_callback(self._connect_done)

    def _connect_done(self, task: asyncio.Task[None]) -> None:
        """A bug in connecting closes this connection with a log line; it never leaves it hanging."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("connecting upstream for %s failed", self.peer, exc_info=task.exception())
        self.close("internal error while connecting upstream", error="internal")

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        settings = self.settings
        metrics = self.cluster.metrics
        errors = []
        for host, port in self.cluster.upstream_targets(self.node_id):
            if OWN_LISTENERS.known_self_target(host, port):
                metrics.self_connections_refused.inc()
                errors.append(f"{host}:{port}: leads back to one of kgate's own listeners, refusing to connect")
                continue
            try:
                transport, protocol = await asyncio.wait_for(
                    loop.create_connection(lambda: UpstreamProtocol(self), host, port),
                    settings.connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                metrics.upstream_connect_failures.inc()
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if transport.is_closing():
                # The broker closed (or reset) the connection before kgate could use it.
                metrics.upstream_connect_failures.inc()
                errors.append(f"{host}:{port}: closed by the broker right after connecting")
                continue
            if OWN_LISTENERS.connected_to_self(transport):
                # A loop: kgate's own listener would accept this and connect again, without end.
                transport.abort()
                OWN_LISTENERS.mark_self_target(host, port)
                metrics.self_connections_refused.inc()
                metrics.upstream_connect_failures.inc()
                errors.append(f"{host}:{port}: is one of kgate's own listeners, refusing to connect to itself")
                continue
            if self.closed:
                # The client left while kgate was connecting: what it sent before leaving still goes
                # (a broker would have processed it; acks=0 Produce data must not be lost).
                if self._early:
                    transport.writelines(self._early)
                    self._early.clear()
                transport.close()
                return
            transport.set_write_buffer_limits(high=settings.high_water_bytes, low=settings.low_water_bytes)
            protocol.adopted = True
            self.upstream = transport
            self.upstream_gate.attach(transport)
            if self._early:
                transport.writelines(self._early)
                self._early.clear()
            self.gate.resume("connecting")
            return
        self.close(f"no upstream reachable ({'; '.join(errors)})", error="upstream-unreachable")

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.upstream_gate.pause("client-buffer-full")

    def resume_writing(self) -> None:
        self.upstream_gate.resume("client-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed and (self.suspended_request or self.backlog) and self.upstream is not None:
            # Requests kgate has read but not sent yet (behind a suspended filter) still go: a broker
            # processes what it has read from a client that left, and acks=0 data must not be lost.
            log.debug("client %s went away; finishing %d request(s) read from it", self.peer, len(self.backlog) + 1)
            self.client_gone = True
            self.transport = None
            self.gate.pause("client-gone")
            return
        if not self.closed and self.pending:
            log.debug("client %s went away with %d request(s) in flight", self.peer, len(self.pending))
        self._teardown()

    def finish_if_client_gone(self) -> None:
        """After a suspended request: once the client has left and nothing read from it is left, close."""
        if self.client_gone and not self.suspended_request and not self.backlog and not self.closed:
            self._teardown()

    # -- broker side -----------------------------------------------------------------------

    def upstream_lost(self, exc: Exception | None) -> None:
        self.upstream = None
        if not self.closed:
            reason = f"broker closed the connection ({exc})" if exc else "broker closed the connection"
            self.close(reason)

    # -- teardown --------------------------------------------------------------------------
    def close(self, reason: str, error: str | None = None) -> None:
        """Close both sides; answers already written to the client are flushed first."""
        if self.closed:
            return
        if error is not None:
            log.warning("closing client %s (cluster %s): %s", self.peer, self.cluster.name, reason)
            self.cluster.metrics.closed_on_error(error)
        else:
            log.debug("closing client %s (cluster %s): %s", self.peer, self.cluster.name, reason)
        self._flush()
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self._teardown()

    def _teardown(self) -> None:
        self.closed = True
        if self._connect_task is not None and not self._connect_task.done() and not self._early:
            self._connect_task.cancel()  # with early bytes pending, the connect finishes to deliver them
        for task in list(self._tasks):
            task.cancel()
        if self.upstream is not None:
            close_upstream_gently(self.upstream)
            self.upstream = None
        self.backlog.clear()
        self._backlog_bytes = 0
        if self._held_reported:
            self._held_reported = 0
            HELD.release(self)
        if self in self.cluster.connections:
            self.cluster.connections.discard(self)
            self.cluster.metrics.connections.dec()
            self.cluster.release(self.node_id)
