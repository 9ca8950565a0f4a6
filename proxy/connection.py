"""One client connection on asyncio: the sockets around a ``ConnectionCore`` (proxy/core.py).

The core holds every protocol decision and no I/O; this module carries out its actions on the
two transports (write, pause and resume reading, await a suspended hook run, report held bytes,
close) and feeds it the transports' events. It also owns what only sockets have: connecting
upstream (trying targets, refusing kgate's own listeners), the client's bytes that arrive
before the upstream is connected, flow control by the transports' water marks (``ReadGate``:
when one side's write buffer is full, reading from the other side pauses, and resumes when it
drains), and the teardown (the broker side half-closed gently so it can finish acks=0 data).

The client transport calls ``core.receive_client`` directly (``data_received`` is the core's
bound method), so the data path pays no extra call for this split.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kgate.api import ConnectionInfo
from kgate.filters.chain import Decision, settle
from kgate.proxy.close_reason import CloseReason
from kgate.proxy.core import ConnectionCore, Suspension
from kgate.proxy.flow import ReadGate
from kgate.proxy.held_bytes import HELD
from kgate.proxy.own_listeners import OWN_LISTENERS
from kgate.proxy.timeouts import Snapshot

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from kgate.proxy.cluster import VirtualCluster

log = logging.getLogger("kgate.connection")
UPSTREAM_CLOSE_GRACE_S = 2.0


def close_upstream_gently(upstream: asyncio.Transport) -> None:
    """Half-close the broker side, then close it after a grace period.

    A broker may still be working through requests the client sent just before leaving (acks=0
    Produce especially); some brokers (Tansu) drop those once the peer has closed fully. Sending
    FIN first and reading on briefly lets them finish; the answers have nowhere to go and are
    discarded.
    """
    if upstream.is_closing():
        return
    try:
        if upstream.can_write_eof():
            upstream.write_eof()
            asyncio.get_running_loop().call_later(UPSTREAM_CLOSE_GRACE_S, upstream.close)
            return
    except (OSError, RuntimeError):
        pass
    upstream.close()


class UpstreamProtocol(asyncio.Protocol):
    """The broker side of a ``ClientConnection``; it only relays events to it.

    Its loss is relayed only once the connection has been adopted (``adopted``): a connection
    kgate drops while choosing a target (one of its own listeners, or one the broker closed at
    once) must not close the client, since the next target may serve it.
    """

    __slots__ = ("adopted", "conn", "data_received")

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self.adopted = False
        self.data_received = conn.core.receive_broker  # type: ignore[method-assign]

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.conn.gate.pause("upstream-buffer-full")

    def resume_writing(self) -> None:
        self.conn.gate.resume("upstream-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.adopted:
            self.conn.upstream_lost(exc)


class ClientConnection(asyncio.Protocol):
    """A client connection and its upstream: carries out a ``ConnectionCore``'s actions."""

    def __init__(self, cluster: VirtualCluster, node_id: int | None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.settings = cluster.settings
        self.info = ConnectionInfo(client_address="?", virtual_cluster=cluster.name)
        self.gate = ReadGate()  # pauses reading from the client
        self.upstream_gate = ReadGate()  # pauses reading from the broker
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.core = ConnectionCore(cluster, self.info, self)
        self.data_received = self.core.receive_client  # type: ignore[method-assign]
        self._connect_task: asyncio.Task[None] | None = None
        self._early: list[bytes | memoryview] = []  # client bytes received before the upstream connected
        self._tasks: set[asyncio.Task[Any]] = set()
        self._held_reported = 0  # what proxy/held_bytes.py was last told this connection holds
        self._torn_down = False

    # -- what the rest of kgate asks of a connection -----------------------------------------
    @property
    def peer(self) -> str:
        return self.info.client_address

    @property
    def closed(self) -> bool:
        return self.core.closed

    @property
    def client_gone(self) -> bool:
        return self.core.client_gone

    @property
    def drained(self) -> bool:
        return self.core.drained

    @property
    def inflight_count(self) -> int:
        return self.core.inflight_count

    def begin_drain(self) -> None:
        self.gate.pause("draining")

    def close(self, reason: CloseReason, detail: str = "") -> None:
        self.core.close(reason, detail)

    def timeout_snapshot(self) -> Snapshot:
        """What the timeout sweep needs (proxy/timeouts.py); read once per sweep interval."""
        core = self.core
        return Snapshot(
            rx=core.rx_chunks,
            up_rx=core.up_chunks,
            frames=core.frames_in,
            mid_frame=core.mid_frame,
            owes=not core.drained,
            reading_paused=self.gate.paused,
            upstream_paused=self.upstream_gate.paused,
            head=core.upstream_waiting[0] if core.upstream_waiting else None,
        )

    def held_cap_pause(self) -> None:
        self.gate.pause("held-cap")

    def held_cap_resume(self) -> None:
        self.gate.resume("held-cap")

    # -- the core's actions (proxy.core.Actions) ---------------------------------------------
    def send_upstream(self, data: bytes | memoryview) -> None:
        upstream = self.upstream
        if upstream is not None:
            upstream.write(data)
        elif not self.core.closed:
            # Reading is paused until the upstream connects, but a transport may still deliver
            # what it had already read; hold it (bounded by one read) until then.
            self._early.append(data)

    def send_client(self, data: bytes | memoryview) -> None:
        transport = self.transport
        if transport is not None:
            transport.write(data)

    def pause_client(self, reason: str) -> None:
        self.gate.pause(reason)

    def resume_client(self, reason: str) -> None:
        self.gate.resume(reason)

    def pause_broker(self, reason: str) -> None:
        self.upstream_gate.pause(reason)

    def resume_broker(self, reason: str) -> None:
        self.upstream_gate.resume(reason)

    def spawn(self, pending: Awaitable[Decision], suspension: Suspension) -> None:
        task = asyncio.get_running_loop().create_task(self._settle(pending, suspension))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(self, pending: Awaitable[Decision], suspension: Suspension) -> None:
        decision = await settle(pending, self.settings.filter_timeout_s, suspension.message)
        try:
            self.core.hook_done(suspension, decision)
        except Exception:  # a bug in kgate: this connection only, never the process
            log.exception("finishing a suspended message for %s failed", self.peer)
            self.core.close(CloseReason.INTERNAL, "internal error after a suspended filter")

    def report_held(self, held: int) -> None:
        if self.core.closed:
            return  # torn down (and released) while this read was processed: never re-enter the account
        self._held_reported = held
        HELD.update(self, held)

    def close_sockets(self, reason: CloseReason) -> None:
        transport = self.transport
        if transport is not None:
            self.transport = None
            transport.close()  # what was written (the answers the core flushed) still goes out first
        self._teardown()

    # -- client side -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self.info.client_address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if not self.cluster.admit(self.node_id, self.info.client_address):
            self.core.close(CloseReason.REFUSED, "over max_connections")
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
        self.core.close(CloseReason.INTERNAL, "internal error while connecting upstream")

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
                # asyncio.timeout, not wait_for: wait_for wraps the connect in one more task per connection
                async with asyncio.timeout(settings.connect_timeout_s):
                    transport, protocol = await loop.create_connection(lambda: UpstreamProtocol(self), host, port)
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
            if self.core.closed:
                # The client left while kgate was connecting: what it sent before leaving still goes
                # (a broker would have processed it; acks=0 Produce data must not be lost).
                if self._early:
                    transport.writelines(self._early)
                    self._early.clear()
                close_upstream_gently(transport)  # a full close right away can make Tansu drop the last frame
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
        self.core.close(CloseReason.UPSTREAM_UNREACHABLE, f"no upstream reachable ({'; '.join(errors)})")

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.upstream_gate.pause("client-buffer-full")

    def resume_writing(self) -> None:
        self.upstream_gate.resume("client-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.core.closed:
            self._teardown()
        elif self.upstream is None:
            self.core.close(CloseReason.CLIENT_LEFT, "client left before the upstream was connected")
        else:
            self.core.client_closed()  # requests read from it and not sent yet still go

    # -- broker side -------------------------------------------------------------------------
    def upstream_lost(self, exc: Exception | None) -> None:
        self.upstream = None
        detail = f"broker closed the connection ({exc})" if exc else "broker closed the connection"
        self.core.close(CloseReason.BROKER_CLOSED, detail)

    # -- teardown ----------------------------------------------------------------------------
    def _teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        if self._connect_task is not None and not self._connect_task.done() and not self._early:
            self._connect_task.cancel()  # with early bytes pending, the connect finishes to deliver them
        for task in list(self._tasks):
            task.cancel()
        if self.upstream is not None:
            close_upstream_gently(self.upstream)
            self.upstream = None
        if self._held_reported:
            self._held_reported = 0
            HELD.release(self)
        if self in self.cluster.connections:
            self.cluster.connections.discard(self)
            self.cluster.metrics.connections.dec()
            self.cluster.release(self.node_id)
