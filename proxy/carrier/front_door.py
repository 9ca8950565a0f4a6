"""The first moments of a connection on a TLS or PROXY-protocol listener, before kgate proper.

A listener with neither feature hands every accepted socket straight to a ``ClientConnection``
(proxy/carrier/connection.py), as it always has: this module costs plaintext listeners nothing.

**TLS only**: a ``FrontDoor`` takes the socket and runs ``loop.start_tls`` with the current
context at once (uvloop's TLS: the same transport an asyncio TLS server would make; see
``_begin_tls`` for why its first step runs inside ``connection_made``). Not a TLS server
(``create_server(ssl=...)``): there a failed handshake (a plaintext client, a wrong CA, an
expired certificate) vanishes inside the event loop, which logs it only in debug mode and tells
the protocol nothing; here each failure is logged
(rate-limited, with the peer and OpenSSL's reason) and counted in
``kgate_tls_handshake_failures_total{side="client"}`` and ``kgate_connections_refused_total``.
It costs each TLS connection a little more CPU than the TLS server did, at set-up only, and
nothing per request (docs/performance.md, "front door", at the end of "The audit log").

**PROXY protocol** (with or without TLS): a ``FrontDoor`` takes the socket first. The peer must be
a trusted source (else refused at once, logged, counted); the header is read **exactly** (a
``BufferedProtocol`` offering only as many bytes as cannot overrun it, proxy/carrier/proxy_protocol.py),
so a client's TLS ClientHello stays in the socket for ``loop.start_tls`` with the current context,
whose failure (no or untrusted client certificate, wrong protocol) is logged with the peer. The
header's source becomes the connection's client address. The socket (or its TLS transport) then
goes to a ``ClientConnection``, whose data path is the same whatever came before. Header and
handshake are bounded by ``frame_timeout_s``; a front door still waiting is closed at shutdown;
any failure closes only this connection.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any, Protocol

from kgate.proxy.carrier.connection import CarrierCluster, ClientConnection
from kgate.proxy.carrier.proxy_protocol import ProxyProtocolError, parse, safe_read_size
from kgate.proxy.carrier.tls import principal_of

if TYPE_CHECKING:
    from kgate.config.model import ProxyProtocolConfig
    from kgate.proxy.carrier.proxy_protocol import SourceFilter
    from kgate.proxy.carrier.tls import ReloadingContext

log = logging.getLogger("kgate.connection")
LOG_EVERY_S = 10.0  # refusals of one kind: one warning per cluster per this, with the count since


class RefusalLog:
    """Refusals logged at most once per ``LOG_EVERY_S`` per kind: a scan or a misconfigured balancer
    must not flood the log. The first of each burst is logged with its peer and reason."""

    __slots__ = ("_last", "_since")

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def refused(self, cluster: str, kind: str, peer: str, why: str, now: float) -> None:
        if now - self._last.get(kind, -LOG_EVERY_S) >= LOG_EVERY_S:
            more = self._since.pop(kind, 0)
            since = f" ({more} more since the last report)" if more else ""
            log.warning("cluster %s: %s from %s: %s%s", cluster, kind, peer, why, since)
            self._last[kind] = now
        else:
            self._since[kind] = self._since.get(kind, 0) + 1


def adopt_tls_principal(conn: ClientConnection, transport: asyncio.BaseTransport) -> None:
    """The client certificate's principal becomes the connection's, and stays it unless SASL wins.

    It is also the SASL state's starting principal: the core copies that state's principal into
    ``info`` after every SASL step, and the state changes it only once an exchange succeeds. So a
    completed SASL exchange replaces the certificate's name (as on a Kafka SASL_SSL listener),
    while an exchange in progress or failed leaves the certificate's name in place.
    """
    conn.info.principal = conn.core.own_sasl().principal = principal_of(transport)


class ListenerCluster(CarrierCluster, Protocol):
    """What a ``FrontDoor`` reads of its cluster (``VirtualCluster``; a protocol: no import cycle)."""

    @property
    def stopping(self) -> bool: ...
    @property
    def doors(self) -> set[FrontDoor]: ...
    @property
    def client_tls(self) -> ReloadingContext | None: ...
    @property
    def proxy_protocol(self) -> ProxyProtocolConfig | None: ...
    @property
    def proxy_sources(self) -> SourceFilter: ...
    @property
    def refusals(self) -> RefusalLog: ...


class FrontDoor(asyncio.BufferedProtocol):
    """Reads a PROXY header if the cluster wants one, then the TLS handshake if the cluster has TLS,
    then hands over (module doc)."""

    def __init__(self, cluster: ListenerCluster, node_id: int | None, loop: asyncio.AbstractEventLoop) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.address = "?"  # the client's address: the peer's, or the PROXY header's source
        #: no PROXY header to read: TLS only, the handshake starts at once
        self._tls_only = cluster.proxy_protocol is None
        self._mode = cluster.proxy_protocol.mode if cluster.proxy_protocol is not None else ""
        self._buf = bytearray()
        self._scratch = bytearray(256)
        self._need = 0
        self._timer: asyncio.TimerHandle | None = None
        #: ``start_tls`` under way: its coroutine, stepped by hand (``_begin_tls``); None before and after
        self._starting: Any = None
        self._tls_begun = False
        self.done = False

    # -- accept ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        cluster = self.cluster
        if cluster.stopping:
            transport.close()
            return
        cluster.doors.add(self)
        self._timer = self.loop.call_later(cluster.settings.frame_timeout_s, self._expired)
        if self._tls_only:  # the TLS layer takes the socket before anything is read from it
            self._begin_tls()
            return
        host = peer[0] if isinstance(peer, tuple) else ""
        if not cluster.proxy_sources.trusted(host):
            self._refuse(
                "proxy_protocol_untrusted",
                "PROXY protocol connection from a source outside proxy_protocol.trusted_sources; refused",
            )
            return
        self._need = safe_read_size(b"", self._mode)

    # -- PROXY header ------------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._scratch)[: max(self._need, 1)]

    def buffer_updated(self, nbytes: int) -> None:
        if self.done:
            return
        self._buf += self._scratch[:nbytes]
        try:
            self._need = safe_read_size(self._buf, self._mode)
            if self._need:
                if self._need > len(self._scratch):
                    self._scratch = bytearray(self._need)
                return
            header = parse(bytes(self._buf), self._mode)
        except ProxyProtocolError as exc:
            self._refuse("proxy_protocol_malformed", f"bad PROXY protocol header: {exc}")
            return
        assert header is not None
        assert header.length == len(self._buf)
        transport = self.transport
        assert transport is not None
        transport.pause_reading()
        if header.source_text is not None:
            self.address = header.source_text
        log.debug("cluster %s: %s is %s (PROXY v%d)", self.cluster.name, self.peer, self.address, header.version)
        if self.cluster.client_tls is not None:
            self._begin_tls()
        else:
            self._hand_over(transport, None)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done:
            self._finish()

    # -- TLS ---------------------------------------------------------------------------------
    def _begin_tls(self) -> None:
        """Start the handshake: ``start_tls``'s first step runs here, synchronously.

        That step makes the TLS layer the socket's protocol. Done now, not on a task's first turn:
        uvloop starts reading an accepted socket right after ``connection_made`` returns (whatever
        it paused), and the ClientHello read by this door would be lost to the handshake (seen:
        "bad PROXY protocol header ... b'\\x16'"). Bytes that reach the TLS layer before its own
        ``connection_made`` wait in its input buffer. The rest of ``start_tls`` runs on a task.
        """
        tls = self.cluster.client_tls
        transport = self.transport
        assert tls is not None
        assert transport is not None
        conn = ClientConnection(self.cluster, self.node_id, self.loop)
        starting = self.loop.start_tls(
            transport, conn, tls.current, server_side=True, ssl_handshake_timeout=self.cluster.settings.frame_timeout_s
        )
        self._tls_begun = True
        try:
            waiter = starting.send(None)  # runs up to its ``await waiter`` and yields that future
        except Exception as exc:  # StopIteration included: it cannot finish before a handshake
            self._handshake_failed(exc)
            return
        self._starting = starting
        # resumed from the waiter's callback, as a task awaiting start_tls would be: one loop turn
        # after the handshake, before the client's first request can be delivered to ``conn``
        waiter.add_done_callback(lambda _done: self._handshake_done(conn))

    def _handshake_done(self, conn: ClientConnection) -> None:
        """The handshake ended: finish ``start_tls`` (its TLS transport, or its error)."""
        starting, self._starting = self._starting, None
        if starting is None:
            return  # given up already (front-door timeout, shutdown)
        try:
            starting.send(None)
        except StopIteration as done:
            tls_transport = done.value
        except (Exception, asyncio.CancelledError) as exc:  # every handshake failure: logged and counted
            self._handshake_failed(exc)
            return
        else:  # start_tls awaits once only: not reached
            starting.close()
            self._handshake_failed(RuntimeError("start_tls did not finish"))
            return
        if tls_transport is None or self.done or tls_transport.is_closing():
            if tls_transport is not None:
                tls_transport.close()
            self._finish()
            return
        self._hand_over(tls_transport, conn)

    def _stop_tls(self) -> None:
        """Give up a handshake under way: ``start_tls`` closes its TLS transport on the way out."""
        starting, self._starting = self._starting, None
        if starting is not None:
            starting.close()

    def _handshake_failed(self, exc: BaseException) -> None:
        """One failed client handshake: counted, logged (rate-limited, with the peer), closed."""
        self.cluster.metrics.tls_handshake_failed("client")
        if isinstance(exc, OSError | ssl.SSLError | ConnectionError | TimeoutError | EOFError):
            self._refuse("tls_handshake", f"TLS handshake failed: {_handshake_problem(exc)}")
            return
        log.error("cluster %s: TLS handshake with %s failed", self.cluster.name, self.peer, exc_info=exc)
        self._refuse("tls_handshake", "TLS handshake failed (internal error)")

    # -- hand-over and failure ---------------------------------------------------------------
    def _hand_over(self, transport: asyncio.Transport, conn: Any) -> None:
        self._finish()
        if self.cluster.stopping:
            transport.close()
            return
        if conn is None:
            conn = ClientConnection(self.cluster, self.node_id, self.loop)
            transport.set_protocol(conn)
        else:
            adopt_tls_principal(conn, transport)
            if conn.closed:
                # The TLS layer delivers what arrived with the handshake before start_tls returns;
                # the core may already have refused it (a bad first frame): nothing to start.
                transport.close()
                return
        conn.start(transport, self.address)
        if not conn.closed and not conn.gate.paused:
            transport.resume_reading()

    def _refuse(self, kind: str, why: str) -> None:
        self.cluster.metrics.refused_connection(kind)
        self.cluster.refusals.refused(self.cluster.name, kind.replace("_", " "), self.address, why, self.loop.time())
        transport = self.transport
        self._finish()
        if transport is not None:
            transport.abort()

    def _expired(self) -> None:
        self._timer = None
        if not self.done:
            what = "TLS handshake" if self._tls_begun else "PROXY protocol header"
            if self._tls_begun:
                self.cluster.metrics.tls_handshake_failed("client")
            self._refuse("front_door_timeout", f"no complete {what} within frame_timeout_s")
            self._stop_tls()

    def close(self) -> None:
        """At shutdown: a connection still at the door goes."""
        if not self.done:
            transport = self.transport
            self._finish()
            self._stop_tls()
            if transport is not None:
                transport.abort()

    def _finish(self) -> None:
        self.done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.cluster.doors.discard(self)


def _handshake_problem(exc: BaseException) -> str:
    """A short reason an operator can act on (OpenSSL's reason code, not its whole error string)."""
    reason = getattr(exc, "reason", None)
    if isinstance(exc, ssl.SSLError) and reason:
        if reason in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_REQUIRED"):
            return f"{reason} (client_auth: required and the client sent no certificate)"
        return reason
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
