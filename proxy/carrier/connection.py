"""One client connection on asyncio: the sockets around a ``ConnectionCore`` (proxy/sansio/core.py).

The core holds every protocol decision and no I/O; this module carries out its actions on the
two transports (write, pause and resume reading, await a suspended hook run, report held bytes,
close) and feeds it the transports' events. It also owns what only sockets have: connecting
upstream (trying targets, refusing kgate's own listeners), the client's bytes that arrive
before the upstream is connected, flow control by the transports' water marks (``ReadGate``:
when one side's write buffer is full, reading from the other side pauses, and resumes when it
drains), and the teardown (the broker side half-closed gently so it can finish acks=0 data).

A client that half-closes (its FIN) keeps its transport open for writing (``eof_received``
returns True) and the core answers what it read (``ConnectionCore.client_eof``), then closes. The
FIN is not passed on to the broker: kgate knows itself that no request follows and closes the
broker connection once the last answer is through, while a broker that read the FIN early might
end the connection before writing answers it owes (Kafka answers what it read either way: it
reads a connection's next request only once it answered the last). Over TLS asyncio cannot keep a
transport half-open, so there a FIN stays a full close.

The client transport calls ``core.receive_client`` directly (``data_received`` is the core's
bound method), so the data path pays no extra call for this split.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol

from kgate.filters.chain import Decision
from kgate.proxy.carrier.carrier_states import Phase, Step, advance
from kgate.proxy.carrier.client_info import ClientInfo
from kgate.proxy.carrier.flow import ReadGate
from kgate.proxy.carrier.held_bytes import HELD
from kgate.proxy.carrier.own_listeners import OWN_LISTENERS
from kgate.proxy.carrier.settle import settle
from kgate.proxy.carrier.timeouts import Snapshot
from kgate.proxy.carrier.tls import tls_problem
from kgate.proxy.control.logs import CONNECTION_LINES, LeanRecords
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.cluster_port import ClusterPort
from kgate.proxy.sansio.core import ConnectionCore, Suspension

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from kgate.proxy.carrier.connect_deadlines import ConnectDeadlines
    from kgate.proxy.carrier.gentle_close import GentleCloser
    from kgate.proxy.carrier.tls import ReloadingContext
    from kgate.proxy.control.metrics import ClusterMetrics
    from kgate.proxy.sansio.chain_handover import RetiredChain

log: Final = logging.getLogger("kgate.connection")
# phases and steps as Final names: compiled, an enum member read through its class is a getattr
_IDLE: Final = Phase.IDLE
_CONNECTING: Final = Phase.CONNECTING
_CONNECTED: Final = Phase.CONNECTED
_TORN_DOWN: Final = Phase.TORN_DOWN
_FIRST_BYTES: Final = Step.FIRST_BYTES
_ADOPTED: Final = Step.ADOPTED
_UPSTREAM_LOST: Final = Step.UPSTREAM_LOST
_TEARDOWN: Final = Step.TEARDOWN
_close_lines: Final = LeanRecords(log)  # the close line, without Logger.info's record making


class CarrierCluster(ClusterPort, Protocol):
    """What a ``ClientConnection`` asks of its cluster beyond what its core does (``VirtualCluster``:
    a protocol, so this module does not import proxy/runtime/cluster.py, which makes connections)."""

    @property
    def metrics(self) -> ClusterMetrics: ...
    @property
    def connections(self) -> set[ClientConnection]: ...
    @property
    def gentle(self) -> GentleCloser: ...
    @property
    def connect_deadlines(self) -> ConnectDeadlines: ...
    @property
    def upstream_tls(self) -> ReloadingContext | None: ...
    @property
    def upstream_server_hostname(self) -> str | None: ...
    def admit(self, node_id: int | None, peer: str) -> bool: ...
    def release(self, node_id: int | None) -> None: ...
    def upstream_targets(self, node_id: int | None) -> Sequence[tuple[str, int]]: ...
    def open_node_listener(self, node_id: int) -> tuple[str, int] | None: ...


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
        self.data_received = conn.broker_reader()  # type: ignore[method-assign, assignment]

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.conn.gate.pause("upstream-buffer-full")

    def resume_writing(self) -> None:
        self.conn.gate.resume("upstream-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        # after the teardown (the usual order: the client left, then the gentle close ended) there
        # is nothing left to close
        if self.adopted and self.conn.phase is not _TORN_DOWN:
            self.conn.upstream_lost(exc)


class ClientConnection(asyncio.Protocol):
    """A client connection and its upstream: carries out a ``ConnectionCore``'s actions."""

    # one per client connection: slots, and the rarely used containers made on first use, keep
    # an idle connection small (docs/deployment.md sizes memory per connection). No __weakref__:
    # compiled, mypyc's deallocator leaves weak references dangling (a test crashed on one)
    __slots__ = (
        "_close_reason",
        "_connect_task",
        "_early",
        "_held_reported",
        "_opened",
        "_tasks",
        "_timed_out",
        "cluster",
        "core",
        "data_received",
        "gate",
        "info",
        "loop",
        "node_id",
        "phase",
        "settings",
        "transport",
        "upstream",
        "upstream_gate",
    )

    def __init__(
        self, cluster: CarrierCluster, node_id: int | None, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.cluster = cluster
        self.loop = loop  # the listener's loop, looked up once (on 3.11 each lookup is a getpid syscall)
        self.node_id = node_id
        self.settings = cluster.settings
        # (client_address, virtual_cluster) by position: keywords cost a class call more per connection
        self.info = info = ClientInfo("?", cluster.name)
        self.gate = info.gate = ReadGate()  # pauses reading from the client
        #: pauses reading from the broker; made at its first pause (``_broker_gate``), as most
        #: connections never pause their broker: one object fewer to build and for the collector
        self.upstream_gate: ReadGate | None = None
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.core = ConnectionCore(cluster, self.info, self)
        self.data_received = self.client_reader()  # type: ignore[method-assign, assignment]
        self._connect_task: asyncio.Task[None] | None = None
        self._early: list[bytes | memoryview] | None = None  # client bytes received before the upstream connected
        self._tasks: set[asyncio.Task[Any]] | None = None  # pending filter decisions (made on first use)
        self._held_reported = 0  # what proxy/carrier/held_bytes.py was last told this connection holds
        self.phase = _IDLE  # the broker connection's phase (proxy/carrier/carrier_states.py)
        self._timed_out = False  # the connect timer (not a teardown) cancelled the connecting task
        self._opened = 0.0  # loop time the connection was admitted
        self._close_reason = CloseReason.CLIENT_LEFT

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

    # -- the core's events, with the time while it observes exchanges --------------------------
    def client_reader(self) -> Callable[[bytes], None]:
        """What the client transport calls with each read: the core itself, unless it needs the time.

        Unobserved (the common case) the core's own bound method, so a read costs no extra call;
        observed, a wrapper that hands the core the time first (the core reads no clock).
        """
        return self._timed_client_data if self.core.observed else self.core.receive_client

    def broker_reader(self) -> Callable[[bytes], None]:
        """As ``client_reader``, for the broker side."""
        return self._timed_broker_data if self.core.observed else self.core.receive_broker

    def _timed_client_data(self, data: bytes) -> None:
        core = self.core
        core.now_ns = time.monotonic_ns()
        core.receive_client(data)

    def _timed_broker_data(self, data: bytes) -> None:
        core = self.core
        core.now_ns = time.monotonic_ns()
        core.receive_broker(data)

    def _rebind_readers(self) -> None:
        """After the core's observer may have changed (a reload): point both transports at the right reader."""
        if self.phase is _TORN_DOWN:
            return
        reader = self.client_reader()
        if reader == self.data_received:
            return  # unchanged (the common reload: observation stays as it was)
        self.data_received = reader  # type: ignore[method-assign, assignment]
        # uvloop reads a protocol's data_received once, when the protocol is set: set it again
        transport = self.transport
        if transport is not None:
            transport.set_protocol(self)
        upstream = self.upstream
        if upstream is not None:
            protocol = upstream.get_protocol()
            if isinstance(protocol, UpstreamProtocol):
                protocol.data_received = self.broker_reader()  # type: ignore[method-assign, assignment]
                upstream.set_protocol(protocol)

    def _tick(self) -> None:
        """The time, for an event other than a read, while the core observes exchanges."""
        core = self.core
        if core.observed:
            core.now_ns = time.monotonic_ns()

    def switch_chain(self, retired: RetiredChain | None) -> None:
        """A reload (VirtualCluster.replace_chain): the core reads the next request with the new chain."""
        self._tick()
        self.core.switch_chain(retired)
        self._rebind_readers()

    def begin_drain(self) -> None:
        self.gate.pause("draining")

    def close(self, reason: CloseReason, detail: str = "") -> None:
        self._tick()
        self.core.close(reason, detail)

    def timeout_snapshot(self) -> Snapshot | None:
        """What the timeout sweep needs (proxy/carrier/timeouts.py), read once per sweep interval; None
        once closed or the client has left (nothing to time): one call per connection, not three."""
        core = self.core
        if core.closed or core.client_gone:
            return None
        waiting = core.upstream_waiting
        upstream_gate = self.upstream_gate
        # by position (Snapshot's field order), as keywords cost a class call more: once per
        # connection per sweep, every second, for every connection kgate holds
        return Snapshot(
            core.rx_chunks,
            core.up_chunks,
            core.frames_in,
            core.mid_frame,
            not core.drained,
            self.gate.paused,
            upstream_gate is not None and upstream_gate.paused,
            waiting[0] if waiting else None,
        )

    def held_cap_pause(self) -> None:
        self.gate.pause("held-cap")

    def held_cap_resume(self) -> None:
        self.gate.resume("held-cap")

    # -- the core's actions (proxy.sansio.core.Actions) ---------------------------------------------
    def send_upstream(self, data: bytes | memoryview) -> None:
        upstream = self.upstream
        if upstream is not None:
            upstream.write(data)
        elif not self.core.closed:
            # Held until the upstream connects. Reading pauses only once a second read arrives
            # meanwhile (bounded by two reads): a Kafka client sends ApiVersions and waits, so a
            # pause at the first bytes was a read stop and restart (two syscalls) per connection.
            early = self._early
            if early is None:
                self._early = [data]
                return
            early.append(data)
            if self.phase is _CONNECTING:
                self.gate.pause("connecting")

    def send_client(self, data: bytes | memoryview) -> None:
        transport = self.transport
        if transport is not None:
            transport.write(data)

    def pause_client(self, reason: str) -> None:
        self.gate.pause(reason)

    def resume_client(self, reason: str) -> None:
        self.gate.resume(reason)

    def pause_broker(self, reason: str) -> None:
        self._broker_gate().pause(reason)

    def resume_broker(self, reason: str) -> None:
        gate = self.upstream_gate
        if gate is not None:  # none yet: nothing was paused
            gate.resume(reason)

    def _broker_gate(self) -> ReadGate:
        """The broker side's read gate, made at its first pause (attached to the broker's transport
        if it is there already; else when it is adopted)."""
        gate = self.upstream_gate
        if gate is None:
            gate = self.upstream_gate = ReadGate()
            if self.upstream is not None:
                gate.attach(self.upstream, self.loop or self._loop())
        return gate

    def spawn(self, pending: Awaitable[Decision], suspension: Suspension) -> None:
        task = self._loop().create_task(self._settle(pending, suspension))
        tasks = self._tasks
        if tasks is None:
            tasks = self._tasks = set()
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _settle(self, pending: Awaitable[Decision], suspension: Suspension) -> None:
        direction = "request" if suspension.exchange is None else "response"
        metrics = self.cluster.metrics
        metrics.suspended[direction] += 1
        loop = self._loop()
        began = loop.time()
        try:
            decision = await settle(pending, self.settings.filter_timeout_s, suspension.message)
        finally:  # also when the connection's teardown cancels the wait
            metrics.suspended[direction] -= 1
            metrics.suspensions[direction].observe(loop.time() - began)
        try:
            self._tick()
            self.core.hook_done(suspension, decision)
        except Exception:  # a bug in kgate: this connection only, never the process
            log.exception("finishing a suspended message for %s failed", self.peer)
            self.core.close(CloseReason.INTERNAL, "internal error after a suspended filter")

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        return loop

    def report_held(self, held: int) -> None:
        if self.core.closed:
            return  # torn down (and released) while this read was processed: never re-enter the account
        self._held_reported = held
        HELD.update(self, held)

    def open_listener(self, node_id: int) -> tuple[str, int] | None:
        return self.cluster.open_node_listener(node_id)  # binds now: the answer naming it goes out after

    def close_sockets(self, reason: CloseReason) -> None:
        self._close_reason = reason
        transport = self.transport
        if transport is not None:
            self.transport = None
            transport.close()  # what was written (the answers the core flushed) still goes out first
        self._teardown()  # and detaches the core (ConnectionCore.detach)

    # -- client side -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.start(transport, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer))

    def start(self, transport: asyncio.BaseTransport, client_address: str) -> None:
        """Begin serving ``transport``: on accept, or after the front door (proxy/carrier/front_door.py) read a
        PROXY header (``client_address`` is then the header's source) or completed a TLS handshake."""
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        self.info.client_address = client_address
        if not self.cluster.admit(self.node_id, client_address):
            self.core.close(CloseReason.REFUSED, "over max_connections")
            return
        s = self.settings
        # (high, low) by position: uvloop takes keywords through a slower call
        transport.set_write_buffer_limits(s.high_water_bytes, s.low_water_bytes)  # type: ignore[attr-defined]
        loop = self.loop or self._loop()  # set by the listener: no call
        self.gate.attach(transport, loop)  # type: ignore[arg-type]
        self.cluster.connections.add(self)
        if self.core.chain is not self.cluster.chain:  # a reload during its TLS handshake / PROXY header
            self._tick()
            self.core.adopt_chain()
            self._rebind_readers()
        metrics = self.cluster.metrics
        metrics.open_connections += 1
        metrics.accepted_connections += 1
        self._opened = loop.time()
        if log.isEnabledFor(logging.DEBUG):  # debug: in a reconnect storm the close lines are plenty
            log.debug(
                "connection from %s opened (cluster %s, %s)",
                self.peer,
                self.cluster.name,
                self._listener(),
                extra={
                    "event": "connection_opened",
                    "cluster": self.cluster.name,
                    "peer": self.peer,
                    "listener": self._listener(),
                },
            )
        # The broker connection waits for the first bytes that go to it: a client that connects and
        # never sends (a port scan, a hostile or stuck client) costs no broker connection and half
        # the memory; a Kafka client sends ApiVersions at once, so it waits one connect at most.
        self._bind_writes()

    def _first_write(self, data: bytes | memoryview) -> None:
        """The first bytes for the broker: hold them and connect now (``send_upstream`` pauses
        reading if more arrive before the broker is there)."""
        core = self.core
        self._step(_FIRST_BYTES)  # from now on held in _early until the upstream is adopted
        if core.closed:
            return
        self.send_upstream(data)
        self._connect_task = (self.loop or self._loop()).create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:  # noqa: C901 - one coroutine per connect, kept whole (see below)
        """Connect to the first reachable target and adopt it; a bug here closes this connection, never
        leaves it hanging.

        One coroutine, not one per step: each nested coroutine was an object and a frame per
        connection, and the resume after the connect passed through every level. The task lets go
        of itself once it ends (``_connect_task``), so a connection alive for hours does not keep a
        finished task, its coroutine and its context in memory for the collector to walk.
        """
        try:
            loop = self.loop or self._loop()
            settings = self.settings
            cluster = self.cluster
            metrics = cluster.metrics
            deadlines = cluster.connect_deadlines
            errors: list[str] = []
            for host, port in cluster.upstream_targets(self.node_id):
                if OWN_LISTENERS.known_self_target(host, port):
                    metrics.self_connections_refused.inc()
                    errors.append(f"{host}:{port}: leads back to one of kgate's own listeners, refusing to connect")
                    continue
                # ``create_connection`` bounded by ``connect_timeout_s``: the cluster's one timer for
                # connects (proxy/carrier/connect_deadlines.py), not ``asyncio.timeout`` (its context
                # manager costs three running-loop lookups, getpid syscalls on 3.11, and a dozen Python
                # calls per connection) nor a timer handle each. Timing out cancels this task;
                # ``_timed_out`` tells that apart from a cancel by teardown.
                task = self._connect_task
                self._timed_out = False
                deadlines.start(self, loop, settings.connect_timeout_s)
                tls = cluster.upstream_tls
                failed: OSError | None = None
                try:
                    if tls is None:
                        transport, protocol = await loop.create_connection(partial(UpstreamProtocol, self), host, port)
                    else:
                        transport, protocol = await loop.create_connection(
                            partial(UpstreamProtocol, self),
                            host,
                            port,
                            ssl=tls.current,
                            server_hostname=cluster.upstream_server_hostname or host,
                            ssl_handshake_timeout=settings.connect_timeout_s,
                        )
                except asyncio.CancelledError:
                    if not (self._timed_out and task is not None and task.uncancel() == 0):
                        raise
                    failed = TimeoutError()
                except (OSError, TimeoutError) as exc:
                    failed = exc
                finally:
                    deadlines.end(self)
                if failed is not None:  # not a ``continue`` in the ``except``: mypyc has none inside try/finally
                    self._connect_failed(host, port, failed, errors)
                    continue
                if transport.is_closing():
                    # The broker closed (or reset) the connection before kgate could use it.
                    metrics.upstream_connect_failures.inc()
                    errors.append(f"{host}:{port}: closed by the broker right after connecting")
                    continue
                # the peer's port is the target's: only a target on one of kgate's ports needs the check
                if OWN_LISTENERS.own_port(port) and OWN_LISTENERS.connected_to_self(transport):
                    # A loop: kgate's own listener would accept this and connect again, without end.
                    transport.abort()
                    OWN_LISTENERS.mark_self_target(host, port)
                    metrics.self_connections_refused.inc()
                    metrics.upstream_connect_failures.inc()
                    errors.append(f"{host}:{port}: is one of kgate's own listeners, refusing to connect to itself")
                    continue
                early = self._early
                self._early = None  # delivered below either way: the list goes with it
                if self.core.closed:
                    # The client left while kgate was connecting: what it sent before leaving still goes
                    # (a broker would have processed it; acks=0 Produce data must not be lost).
                    if early:
                        transport.writelines(early)
                    cluster.gentle.close(transport, loop)  # a full close right away can make Tansu drop the last frame
                    return
                transport.set_write_buffer_limits(settings.high_water_bytes, settings.low_water_bytes)
                protocol.adopted = True
                self.upstream = transport
                metrics.open_upstream_connections += 1
                if self.upstream_gate is not None:  # paused before the broker was there
                    self.upstream_gate.attach(transport, loop)
                if early:
                    transport.writelines(early)
                self._step(_ADOPTED)
                self.gate.resume("connecting")
                return
            self.close(CloseReason.UPSTREAM_UNREACHABLE, f"no upstream reachable ({'; '.join(errors)})")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connecting upstream for %s failed", self.peer)
            self.close(CloseReason.INTERNAL, "internal error while connecting upstream")
        finally:
            self._connect_task = None

    def _connect_failed(self, host: str, port: int, exc: OSError, errors: list[str]) -> None:
        """One target did not connect (refused, unreachable, timed out, its TLS handshake failed)."""
        metrics = self.cluster.metrics
        metrics.upstream_connect_failures.inc()
        if isinstance(exc, ssl.SSLError):
            metrics.tls_handshake_failed("upstream")
        why = tls_problem(exc) if isinstance(exc, ssl.SSLError) else exc or type(exc).__name__
        errors.append(f"{host}:{port}: {why}")

    def connect_timed_out(self) -> None:
        """The upstream connect under way took ``connect_timeout_s`` (proxy/carrier/connect_deadlines.py)."""
        task = self._connect_task
        if task is not None and not task.done():
            self._timed_out = True
            task.cancel()

    def _step(self, step: Step) -> None:
        self.phase = advance(self.phase, step)
        self._bind_writes()

    def _bind_writes(self) -> None:
        """Point the core's two hot writes (``ConnectionCore.write_up`` / ``write_client``) where the
        phase says (proxy/carrier/carrier_states.py): straight at a transport's ``write`` while it is open,
        at this object's wrappers otherwise. The one place that binds them: called on every phase
        change and when the client's transport comes or goes."""
        core = self.core
        transport = self.transport
        core.write_client = self.send_client if transport is None else transport.write
        phase = self.phase
        upstream = self.upstream
        if phase is _CONNECTED and upstream is not None:
            core.write_up = upstream.write
        elif phase is _IDLE:
            core.write_up = self._first_write
        else:
            core.write_up = self.send_upstream

    def eof_received(self) -> bool:
        """The client half-closed: keep its transport open for the answers it is still owed; the
        core closes it once they went (``ConnectionCore.client_eof``).

        Owed nothing (the common end: a client closes between requests), the transport closes as
        before and ``connection_lost`` ends the connection: the close costs one check more."""
        transport = self.transport
        if self.core.drained or transport is None or self.phase is _TORN_DOWN:
            return False
        if transport.get_extra_info("sslcontext") is not None:
            return False  # asyncio's TLS transports cannot stay half-open (True only logs a warning)
        self.gate.detach()  # reading is over: a resume would only read the end of the stream again
        try:
            self._tick()
            self.core.client_eof()
        except Exception:  # a bug in kgate: this connection only, never the process
            log.exception("finishing a half-closed connection for %s failed", self.peer)
            self.core.close(CloseReason.INTERNAL, "internal error after the client half-closed")
        return True

    def pause_writing(self) -> None:
        self.pause_broker("client-buffer-full")

    def resume_writing(self) -> None:
        self.resume_broker("client-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.phase is _TORN_DOWN:
            return  # kgate closed it: the core is detached (and must stay so: see _teardown)
        self._tick()
        self._bind_writes()
        if self.core.closed:
            self._teardown()
        elif self.upstream is None and not self.core.suspended:
            # bytes already held for the broker still go: the connect under way delivers them
            self.core.close(CloseReason.CLIENT_LEFT, "client left before the upstream was connected")
        else:
            # Requests read from it and not sent yet still go; a suspended one may be the first
            # for the broker, and its write then opens the broker connection (``_first_write``).
            self.core.client_closed()

    # -- broker side -------------------------------------------------------------------------
    def upstream_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream = None
            self._step(_UPSTREAM_LOST)
            self.cluster.metrics.open_upstream_connections -= 1
        detail = f"broker closed the connection ({exc})" if exc else "broker closed the connection"
        self._tick()
        self.core.close(CloseReason.BROKER_CLOSED, detail)

    # -- teardown ----------------------------------------------------------------------------
    def _teardown(self) -> None:
        if self.phase is _TORN_DOWN:
            return
        self.phase = advance(self.phase, _TEARDOWN)
        core = self.core  # closed: nothing more is written either way
        if self._connect_task is not None and not self._connect_task.done() and not self._early:
            self._connect_task.cancel()  # with early bytes pending, the connect finishes to deliver them
        if self._tasks:
            for task in list(self._tasks):
                task.cancel()
        if self.upstream is not None:
            if core.broker_owes_nothing:
                self.upstream.close()  # nothing for the broker to finish: no grace, no second read, no timer
            else:
                self.cluster.gentle.close(self.upstream, self.loop or self._loop())
            self.upstream = None
            self.cluster.metrics.open_upstream_connections -= 1
        if self._held_reported:
            self._held_reported = 0
            HELD.release(self)
        if self in self.cluster.connections:
            self.cluster.connections.discard(self)
            self.cluster.metrics.open_connections -= 1
            self.cluster.release(self.node_id)
            if log.isEnabledFor(logging.INFO):
                self._log_closed()
        self.data_received = core.receive_client  # type: ignore[method-assign]  # not a method of this object (a cycle)
        # Last: the core lets go of this object, so reference counting frees the connection once its
        # transports let go of it (ConnectionCore.detach: not the cycle collector, later).
        core.detach()

    def _listener(self) -> str:
        return "bootstrap" if self.node_id is None else f"node {self.node_id}"

    def _log_closed(self) -> None:
        """The connection's one line at info: who, how long, how many requests, and why it ended.

        Rate limited (proxy/control/logs.py): a reconnect storm must not become a log storm; the next
        line that passes says how many were held back.
        """
        lines = CONNECTION_LINES
        if not lines.allow():
            return
        reason = self._close_reason._value_  # the value itself: ``.value`` is two Python calls (a property)
        core = self.core
        detail = core.close_detail or reason
        duration = (self.loop or self._loop()).time() - self._opened
        requests = core.frames_in
        held_back = lines.take_suppressed()
        more = f" ({held_back} more connection lines held back by the rate limit)" if held_back else ""
        peer = self.info.client_address
        cluster = self.cluster.name
        listener = self._listener()
        _close_lines.info(
            "connection from %s closed after %.1fs and %d request(s) (cluster %s, %s): %s: %s%s",
            (peer, duration, requests, cluster, listener, reason, detail, more),
            {
                "event": "connection_closed",
                "cluster": cluster,
                "connection": peer,
                "principal": self.info.principal,
                "client_id": self.info.client_id,
                "peer": peer,
                "listener": listener,
                "reason": reason,
                "duration_s": round(duration, 3),
                "requests": requests,
                "suppressed": held_back,
            },
        )
