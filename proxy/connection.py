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
import inspect
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from codec import api
from codec.framing import FrameReader
from codec.headers import (
    HeaderError,
    RequestHeader,
    parse_request_header,
    peek_correlation_id,
    peek_request,
    produce_acks,
    response_body_offset,
    response_frame,
)
from codec.headers import (
    frame as make_frame,
)
from filters.api import FORWARD, Close, ConnectionInfo, Drop, Respond
from filters.chain import Outcome, run_hooks
from filters.errors import error_response
from proxy import rewrite
from proxy.context import MessageContext
from proxy.flow import ReadGate
from proxy.metadata_brokers import rewrite_brokers
from proxy.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslState

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from proxy.cluster import VirtualCluster

log = logging.getLogger("kgate.connection")

PRODUCE = 0
FETCH = 1
CREATE_TOPICS = 19
METADATA = 3
# Small Fetch responses (errors, empty long polls) are decoded when filters use topic names, so a
# dead id's error evicts it; large ones stream through undecoded (see _start_stream).
OBSERVE_FETCH_MAX = 64 * 1024
RAW_SASL = -1  # api key marker of a bare SASL token after SaslHandshake v0
REQUEST_TIMED_OUT = 7


UPSTREAM_CLOSE_GRACE_S = 2.0


def _close_upstream_gently(upstream: asyncio.Transport) -> None:
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


class VersionRefused(HeaderError):
    """A request version outside what the filters that must see it handle (fail closed)."""


class Exchange:
    """A request that expects an answer, and the answer once it is ready."""

    __slots__ = ("api_key", "api_version", "cid", "request", "response", "state")

    def __init__(
        self,
        cid: int,
        api_key: int,
        api_version: int,
        request: Any = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.cid = cid
        self.api_key = api_key
        self.api_version = api_version
        self.request = request  # decoded request, when a request hook decoded it
        self.state = state  # the request hooks' per-exchange scratch space, for the response hooks
        self.response: bytes | memoryview | None = None


class UpstreamProtocol(asyncio.Protocol):
    """The broker side of a ``ClientConnection``; it only relays events to it."""

    __slots__ = ("conn",)

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn

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
        self._raw_requests = not self.chain.has_request_hooks
        self._connect_task: asyncio.Task[None] | None = None
        self._early: list[bytes | memoryview] = []  # client bytes received before the upstream connected
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stream_left = 0  # bytes of a cut-through response still to forward
        self._req_skip = 0  # bytes of a tracked request still to pass through (raw mode)
        self._acks0: deque[int] = deque(maxlen=256)  # correlation ids of recent acks=0 Produce
        self._held: list[bytes] = []  # start of a request that cannot be tracked yet (raw mode)
        self._held_len = 0
        self._held_need = 0  # bytes to collect before trying again

    @property
    def peer(self) -> str:
        return self.info.client_address

    def begin_drain(self) -> None:
        self.gate.pause("draining")

    @property
    def drained(self) -> bool:
        """Owes the client nothing: no answer pending, nothing queued, nothing streaming."""
        return not self.pending and not self.backlog and not self._stream_left and not self.suspended_request

    @property
    def inflight_count(self) -> int:
        return len(self.pending) + len(self.backlog) + (1 if self._stream_left else 0)

    # -- client side -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self.info.client_address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        s = self.settings
        transport.set_write_buffer_limits(high=s.high_water_bytes, low=s.low_water_bytes)  # type: ignore[attr-defined]
        self.gate.attach(transport)  # type: ignore[arg-type]
        self.gate.pause("connecting")
        self.cluster.connections.add(self)
        self.cluster.metrics.connections.inc()
        self.cluster.metrics.connections_total.inc()
        self._connect_task = asyncio.get_running_loop().create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        settings = self.settings
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
                # The client left while kgate was connecting: what it sent before leaving still goes
                # (a broker would have processed it; acks=0 Produce data must not be lost).
                if self._early:
                    transport.writelines(self._early)  # type: ignore[attr-defined]
                    self._early.clear()
                transport.close()
                return
            transport.set_write_buffer_limits(high=settings.high_water_bytes, low=settings.low_water_bytes)  # type: ignore[attr-defined]
            self.upstream = transport  # type: ignore[assignment]
            self.upstream_gate.attach(transport)  # type: ignore[arg-type]
            if self._early:
                transport.writelines(self._early)  # type: ignore[attr-defined]
                self._early.clear()
            self.gate.resume("connecting")
            return
        self.close(f"no upstream reachable ({'; '.join(errors)})", error="upstream-unreachable")

    def data_received(self, data: bytes) -> None:
        if self._raw_requests:
            self._raw_data(data)
            return
        reader = self.reader
        try:
            for frame in reader.feed(data):
                if self.closed:
                    return
                if self.suspended_request:
                    self._queue_behind_suspended(frame)
                else:
                    self._request(frame)
        except HeaderError as exc:
            self._refuse(exc)
            return
        if reader.error is not None:
            self.close(f"bad frame from client: {reader.error}", error="bad-frame")

    def _raw_data(self, data: bytes) -> None:
        """No filter hooks requests: bookkeeping from headers only, bytes forwarded as they came.

        A frame is tracked as soon as its header has arrived; the rest of it is skipped, not
        assembled (a 1 MiB Produce is never copied). Only a frame whose header is split across
        reads, or a frame decoded whole (SASL, CreateTopics), is held until it can be read; its
        pieces are kept in a list and joined once, when enough has arrived.
        """
        if self._held:
            self._held.append(data)
            self._held_len += len(data)
            if self._held_len < self._held_need:
                self._send_upstream(data)
                return
            held = self._held_len - len(data)
            buf: bytes | memoryview = b"".join(self._held)
            self._held, self._held_len, self._held_need = [], 0, 0
        else:
            held = 0
            buf = data
        pos = 0
        if self._req_skip:
            pos = min(self._req_skip, len(buf))
            self._req_skip -= pos
        frames: list[memoryview] = []
        tail = len(buf)
        if pos < len(buf):
            frames, tail = self.reader.split(memoryview(buf)[pos:])
            tail += pos
        done = pos  # end of the frames tracked so far, in buf
        try:
            for frame in frames:
                self._track(frame)
                done += len(frame)
            if self.reader.error is None and tail < len(buf):
                head = memoryview(buf)[tail:]
                if self._track_head(head):
                    self._req_skip = int.from_bytes(head[:4], "big", signed=True) + 4 - len(head)
                else:
                    self._hold(head)
        except HeaderError as exc:
            self._forward_prefix(data, done - held)  # whole frames before the bad one still go
            self._refuse(exc)
            return
        if self.reader.error is not None:
            self._forward_prefix(data, done - held)
            self.close(f"bad frame from client: {self.reader.error}", error="bad-frame")
            return
        self._send_upstream(data)

    def _refuse(self, exc: HeaderError) -> None:
        if isinstance(exc, VersionRefused):
            self.close(str(exc), error="refused-version")
        else:
            self.close(f"malformed request: {exc}", error="malformed-request")

    def _forward_prefix(self, data: bytes, end: int) -> None:
        if end > 0:
            self._send_upstream(memoryview(data)[:end])

    def _hold(self, head: memoryview) -> None:
        """Keep the start of a frame that cannot be tracked yet, and how much to wait for."""
        self._held = [bytes(head)]
        self._held_len = len(head)
        if len(head) < 12:
            self._held_need = 12
            return
        size = int.from_bytes(head[:4], "big", signed=True) + 4
        api_key = int.from_bytes(head[4:6], "big", signed=True)
        if self.sasl.raw or api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE, CREATE_TOPICS):
            self._held_need = size  # decoded whole
        else:
            self._held_need = min(size, 2 * len(head))  # header fields still missing: grow geometrically

    def _track_head(self, head: memoryview) -> bool:
        """Track a frame from its first bytes only; False when more of it is needed."""
        if len(head) < 12 or self.sasl.raw:
            return False
        api_key = int.from_bytes(head[4:6], "big", signed=True)
        if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE, CREATE_TOPICS):
            return False  # decoded whole (rare, small)
        try:
            self._track(head)
        except HeaderError:
            return False  # header fields not all here yet
        return True

    def _send_upstream(self, data: bytes | memoryview) -> None:
        if self.upstream is not None:
            self.upstream.write(data)
        elif not self.closed:
            # Reading is paused until the upstream connects, but a transport may still deliver
            # what it had already read; hold it (bounded by one read) until then.
            self._early.append(data)

    def _track(self, frame: memoryview) -> None:
        """Bookkeeping for a request forwarded as is: what answer, if any, to wait for."""
        if self.sasl.raw:
            if self.sasl.is_raw_token(frame):
                ex = Exchange(0, RAW_SASL, 0)
                self.pending.append(ex)
                self.upstream_waiting.append(ex)
                return
            self.info.principal = self.sasl.principal  # bare-token exchange just ended
        api_key, version, cid = peek_request(frame)
        limit = self.cluster.filter_limits.get(api_key)
        if limit is not None and not limit[0] <= version <= limit[1]:
            raise VersionRefused(
                f"{api.API_INFO[api_key].name} v{version} refused: filters handle v{limit[0]}-v{limit[1]} only"
            )
        if api_key == PRODUCE:
            header = parse_request_header(frame, 2 if version >= 9 else 1)
            if produce_acks(frame, header.body_offset, version) == 0:
                self.cluster.metrics.count_request(api_key)
                self._acks0.append(cid)
                return  # acks=0: the broker sends no response, so nothing waits for one
        elif api_key == SASL_HANDSHAKE or api_key == SASL_AUTHENTICATE:
            self._observe_sasl_request(frame, api_key, version)
        self.cluster.metrics.count_request(api_key)
        request = self._decode_quietly(frame, api_key, version) if api_key == CREATE_TOPICS else None
        ex = Exchange(cid, api_key, version, request)
        self.pending.append(ex)
        self.upstream_waiting.append(ex)

    @staticmethod
    def _decode_quietly(frame: memoryview, api_key: int, version: int) -> Any:
        """The decoded request, or None when kgate cannot read it (it is forwarded all the same)."""
        try:
            header = parse_request_header(frame, api.request_header_version(api_key, version))
            return api.decode_request(api_key, version, frame[header.body_offset :])
        except (HeaderError, api.CodecError):
            return None

    def _observe_sasl_request(self, frame: memoryview, api_key: int, version: int) -> None:
        msg = self._decode_quietly(frame, api_key, version)
        if msg is None:
            return
        if api_key == SASL_HANDSHAKE:
            self.sasl.handshake_request(str(msg.mechanism))
        else:
            self.sasl.authenticate_request(bytes(msg.auth_bytes))

    # -- requests through filters ----------------------------------------------------------
    def _request(self, frame: memoryview) -> None:
        if self.sasl.raw:
            if self.sasl.is_raw_token(frame):
                self._forward(frame, Exchange(0, RAW_SASL, 0))
                return
            self.info.principal = self.sasl.principal  # bare-token exchange just ended
        api_key, version, cid = peek_request(frame)
        hooks = self.chain.hooks("request", api_key, version) if api_key in api.API_INFO else ()
        if not hooks:
            self._track(frame)
            self._send_upstream(frame)
            return
        self.cluster.metrics.count_request(api_key)
        try:
            header = parse_request_header(frame, api.request_header_version(api_key, version))
            msg = api.decode_request(api_key, version, frame[header.body_offset :])
        except (HeaderError, api.CodecError) as exc:
            # A filter must see this api key; kgate cannot read this one: never bypass it.
            self.close(
                f"cannot decode {api_key} v{version} request a filter must see: {exc}",
                error="undecodable-request",
            )
            return
        if header.client_id is not None:
            self.info.client_id = header.client_id
        ctx = MessageContext(self.cluster, self.info, api_key, version, cid)
        try:
            outcome = run_hooks(hooks, ctx, msg)
        except Exception as exc:  # a filter bug closes this connection only, never the process
            self._filter_failed(api_key, version, exc)
            return
        if inspect.isawaitable(outcome):
            self.suspended_request = True
            self._spawn(self._finish_suspended_request(outcome, frame, header, ctx, msg))
            return
        try:
            self._apply_request(outcome, frame, header, ctx)  # type: ignore[arg-type]
        except Exception as exc:  # e.g. a filter's answer that does not encode
            self._filter_failed(api_key, version, exc)

    def _filter_failed(self, api_key: int, version: int, exc: Exception) -> None:
        log.error("filter failed on %s v%d for %s", api.API_INFO[api_key].name, version, self.peer, exc_info=exc)
        self.close(f"filter error: {exc}", error="filter-error")

    def _queue_behind_suspended(self, frame: memoryview) -> None:
        self.backlog.append(frame)
        if len(self.backlog) >= self.settings.max_queued_requests:
            self.gate.pause("backlog-full")

    async def _finish_suspended_request(
        self,
        pending: Awaitable[Outcome],
        frame: memoryview,
        header: RequestHeader,
        ctx: MessageContext,
        msg: Any,
    ) -> None:
        try:
            outcome = await asyncio.wait_for(pending, self.settings.filter_timeout_s)
        except TimeoutError:
            outcome = self._timeout_outcome(header, msg)
        except Exception as exc:  # a filter bug must not leave the connection hanging
            log.exception(
                "filter failed on %s v%d from %s",
                api.API_INFO[header.api_key].name,
                header.api_version,
                self.peer,
            )
            outcome = (Close(f"filter error: {exc}"), msg, False)
        if self.closed:
            return
        self.suspended_request = False
        try:
            self._apply_request(outcome, frame, header, ctx)
            while self.backlog and not self.suspended_request and not self.closed:
                self._request(self.backlog.popleft())
        except HeaderError as exc:
            self._refuse(exc)
            return
        except Exception as exc:  # e.g. a filter's answer that does not encode: this connection only
            self._filter_failed(header.api_key, header.api_version, exc)
            return
        if len(self.backlog) < self.settings.max_queued_requests:
            self.gate.resume("backlog-full")

    def _timeout_outcome(self, header: RequestHeader, msg: Any) -> Outcome:
        name = api.API_INFO[header.api_key].name
        log.warning(
            "filter timed out after %.1fs on %s v%d from %s: answering REQUEST_TIMED_OUT",
            self.settings.filter_timeout_s,
            name,
            header.api_version,
            self.peer,
        )
        self.cluster.metrics.closed_on_error("filter-timeout")
        resp = error_response(header.api_key, header.api_version, msg, REQUEST_TIMED_OUT)
        if resp is None:
            return (
                Close(f"filter timed out on {name}, which has no error response kgate can build"),
                msg,
                False,
            )
        return Respond(resp), msg, False

    def _apply_request(self, outcome: Outcome, frame: memoryview, header: RequestHeader, ctx: MessageContext) -> None:
        result, msg, changed = outcome
        api_key, version, cid = header.api_key, header.api_version, header.correlation_id
        state = ctx._state
        acks0 = api_key == PRODUCE and msg.acks == 0
        if result is FORWARD:
            if changed:
                frame = memoryview(make_frame(frame[4 : header.body_offset], msg.encode(version)))
            if acks0:
                self._acks0.append(cid)
                self._send_upstream(frame)
            else:
                self._forward(frame, Exchange(cid, api_key, version, msg, state))
        elif isinstance(result, Respond):
            if acks0:
                return  # the client expects no answer to acks=0
            hv = api.response_header_version(api_key, version)
            ex = Exchange(cid, api_key, version, msg)
            ex.response = response_frame(cid, hv, result.message.encode(version))
            self.pending.append(ex)
            self._flush()
        elif isinstance(result, Drop):
            if not acks0:
                self.close(
                    f"a filter dropped a {api.API_INFO[api_key].name} request that expects an answer",
                    error="filter-drop",
                )
        elif isinstance(result, Close):
            self.close(f"closed by filter: {result.reason}", error="filter-close")

    def _forward(self, frame: memoryview, ex: Exchange) -> None:
        self.pending.append(ex)
        self.upstream_waiting.append(ex)
        self._send_upstream(frame)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.upstream_gate.pause("client-buffer-full")

    def resume_writing(self) -> None:
        self.upstream_gate.resume("client-buffer-full")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed and self.pending:
            log.debug("client %s went away with %d request(s) in flight", self.peer, len(self.pending))
        self._teardown()

    # -- broker side -----------------------------------------------------------------------
    def upstream_data(self, data: bytes | memoryview) -> None:
        if self.closed:
            return  # the client is gone; the broker is only finishing what it had (see _close_upstream_gently)
        if self._stream_left:
            data = self._continue_stream(data)
            if not data:
                return
        reader = self.upstream_reader
        if reader.buffered:
            frames = reader.feed(data)
            tail = len(data)
        else:
            frames, tail = reader.split(data)
        for frame in frames:
            if self.closed:
                return
            self._response(frame)
        if reader.error is not None:
            self.close(f"bad frame from broker: {reader.error}", error="bad-upstream-frame")
            return
        self._flush()
        if tail < len(data) and not self.closed:
            rest = memoryview(data)[tail:]
            if not self._start_stream(rest):
                reader.feed(rest)

    def _start_stream(self, head: memoryview) -> bool:
        """Cut-through: forward a response's first bytes before the rest has arrived.

        Only for a response that nobody needs to decode and that is next in line for the client;
        the rest of its bytes go straight on as they come (``_continue_stream``). This keeps a
        large Fetch response from being held whole in kgate, which would add its transfer time.
        """
        if len(head) < 8 or not self.upstream_waiting or self.transport is None:
            return False
        ex = self.upstream_waiting[0]
        if not self.pending or self.pending[0] is not ex:
            return False  # an earlier answer is still being prepared
        size = int.from_bytes(head[:4], "big", signed=True)
        if size < 4 or size > self.settings.max_frame_bytes:
            return False  # the reader reports the bad size
        if ex.api_key != RAW_SASL:
            if int.from_bytes(head[4:8], "big", signed=True) != ex.cid or self._must_decode(ex):
                return False
        self.upstream_waiting.popleft()
        self.pending.popleft()
        self.transport.write(head)
        self._stream_left = size + 4 - len(head)
        return True

    def _continue_stream(self, data: bytes | memoryview) -> bytes | memoryview:
        """Forward the next bytes of a streamed response; return what follows it in ``data``."""
        assert self.transport is not None or self.closed
        n = self._stream_left
        if len(data) <= n:
            self._stream_left = n - len(data)
            if self.transport is not None:
                self.transport.write(data)
            rest: bytes | memoryview = b""
        else:
            view = memoryview(data)
            if self.transport is not None:
                self.transport.write(view[:n])
            self._stream_left = 0
            rest = view[n:]
        if self._stream_left == 0:
            self._flush()  # answers that queued behind the streamed one
        return rest

    def _must_decode(self, ex: Exchange) -> bool:
        api_key, version = ex.api_key, ex.api_version
        return (
            api_key == rewrite.API_VERSIONS
            or api_key in rewrite.OBSERVED_KEYS
            or rewrite.needs_rewrite(api_key, version)
            or (self.chain.has_response_hooks and bool(self.chain.hooks("response", api_key, version, bool(ex.state))))
        )

    def _response(self, frame: memoryview) -> None:
        head = self.upstream_waiting[0] if self.upstream_waiting else None
        if head is None or head.api_key != RAW_SASL:
            try:
                got = peek_correlation_id(frame)
            except HeaderError as exc:
                self.close(f"malformed response from broker: {exc}", error="bad-upstream-frame")
                return
            if (head is None or got != head.cid) and got in self._acks0:
                # Some brokers (Tansu) answer acks=0 Produce; the client expects nothing: drop it.
                log.debug("dropping the broker's answer to acks=0 Produce %d from %s", got, self.peer)
                return
            if head is None:
                self.close("broker sent a response nobody asked for", error="unexpected-response")
                return
            if got != head.cid:
                self.close(f"broker answered correlation id {got}, expected {head.cid}", error="out-of-order")
                return
        ex = self.upstream_waiting.popleft()
        api_key, version = ex.api_key, ex.api_version
        if api_key == RAW_SASL:
            ex.response = frame
            return
        hooks = self.chain.hooks("response", api_key, version, bool(ex.state)) if self.chain.has_response_hooks else ()
        if api_key == METADATA and not hooks and not self.cluster.names_in_use:
            self._metadata_brokers_only(ex, frame)
        elif api_key == rewrite.API_VERSIONS:
            ex.response = self._api_versions(frame, version)
        elif (
            hooks
            or api_key in rewrite.OBSERVED_KEYS
            or rewrite.needs_rewrite(api_key, version)
            or (api_key == FETCH and version >= 13 and len(frame) <= OBSERVE_FETCH_MAX and self.cluster.names_in_use)
        ):
            self._decoded_response(ex, frame, hooks)
        else:
            ex.response = frame

    def _metadata_brokers_only(self, ex: Exchange, frame: memoryview) -> None:
        """Rewrite the broker list and copy the rest (see proxy.metadata_brokers)."""
        try:
            offset = response_body_offset(frame, api.response_header_version(METADATA, ex.api_version))
            ex.response = rewrite_brokers(frame, offset, ex.api_version, self.cluster.client_address)
        except (HeaderError, api.CodecError) as exc:
            self.close(f"cannot decode Metadata v{ex.api_version} response: {exc}", error="undecodable-response")
            return
        self.cluster.metrics.count_rewrite(METADATA)

    def _api_versions(self, frame: memoryview, version: int) -> bytes | memoryview | None:
        """The capped ApiVersions answer; None (connection closed) if it cannot be read."""
        try:
            new = rewrite.cap_api_versions(frame, version, self.cluster.version_limits)
        except rewrite.RewriteError as exc:
            # uncapped ranges could let a client send what a filter must see but kgate cannot read
            self.close(str(exc), error="undecodable-response")
            return None
        if new is None:
            return frame
        self.cluster.metrics.count_rewrite(rewrite.API_VERSIONS)
        return new

    def _decoded_response(self, ex: Exchange, frame: memoryview, hooks: tuple[Any, ...]) -> None:
        api_key, version = ex.api_key, ex.api_version
        must_rewrite = rewrite.needs_rewrite(api_key, version)
        try:
            offset = response_body_offset(frame, api.response_header_version(api_key, version))
            msg = api.decode_response(api_key, version, frame[offset:])
        except (HeaderError, api.CodecError) as exc:
            if must_rewrite or hooks:
                self.close(
                    f"cannot decode {api_key} v{version} response kgate must inspect: {exc}",
                    error="undecodable-response",
                )
            else:
                ex.response = frame  # only watched for topic names: pass it on untouched
            return
        changed = must_rewrite and rewrite.rewrite_message(msg, api_key, version, self.cluster.client_address)
        if changed:
            self.cluster.metrics.count_rewrite(api_key)
        self.cluster.observe_response(api_key, version, msg, ex.request)
        if api_key == SASL_HANDSHAKE and version == 0 and msg.error_code == 0:
            self.sasl.handshake_v0_accepted()
        elif api_key == SASL_AUTHENTICATE:
            self.sasl.authenticate_response(msg.error_code)
            self.info.principal = self.sasl.principal
        if not hooks:
            ex.response = rewrite.reframe(frame, offset, msg.encode(version)) if changed else frame
            return
        ctx = MessageContext(self.cluster, self.info, api_key, version, ex.cid, ex.request, ex.state)
        try:
            outcome = run_hooks(hooks, ctx, msg)
        except Exception as exc:  # a filter bug closes this connection only, never the process
            self._filter_failed(api_key, version, exc)
            return
        if inspect.isawaitable(outcome):
            self._spawn(self._finish_suspended_response(outcome, ex, frame, offset, changed))
            if self._answers_waiting() > self.settings.max_queued_requests:
                self.upstream_gate.pause("answers-blocked")
            return
        try:
            self._apply_response(outcome, ex, frame, offset, changed)  # type: ignore[arg-type]
        except Exception as exc:
            self._filter_failed(api_key, version, exc)

    async def _finish_suspended_response(
        self, pending: Awaitable[Outcome], ex: Exchange, frame: memoryview, offset: int, changed: bool
    ) -> None:
        try:
            outcome = await asyncio.wait_for(pending, self.settings.filter_timeout_s)
        except TimeoutError:
            outcome = (Close(f"filter timed out on a {api.API_INFO[ex.api_key].name} response"), None, False)
        except Exception as exc:
            log.exception("filter failed on a %s response to %s", api.API_INFO[ex.api_key].name, self.peer)
            outcome = (Close(f"filter error: {exc}"), None, False)
        if self.closed:
            return
        try:
            self._apply_response(outcome, ex, frame, offset, changed)
        except Exception as exc:
            self._filter_failed(ex.api_key, ex.api_version, exc)
            return
        self._flush()

    def _apply_response(self, outcome: Outcome, ex: Exchange, frame: memoryview, offset: int, rewritten: bool) -> None:
        result, msg, changed = outcome
        if isinstance(result, Close):
            self.close(f"closed by filter: {result.reason}", error="filter-close")
            return
        if not isinstance(result, type(FORWARD)):
            self.close(
                f"a response hook returned {result!r}; only forward or close apply to responses",
                error="filter-misuse",
            )
            return
        if changed or rewritten:
            # a response hook's changes must not undo the address rewrite
            if changed:
                rewrite.rewrite_message(msg, ex.api_key, ex.api_version, self.cluster.client_address)
            ex.response = rewrite.reframe(frame, offset, msg.encode(ex.api_version))
        else:
            ex.response = frame

    def _flush(self) -> None:
        """Write every answer that is ready, in request order."""
        pending = self.pending
        transport = self.transport
        if transport is None or self.closed or self._stream_left:
            return  # while a response streams through, nothing else may be written
        while pending and pending[0].response is not None:
            transport.write(pending.popleft().response)  # type: ignore[arg-type]
        if self._answers_waiting() <= self.settings.max_queued_requests:
            self.upstream_gate.resume("answers-blocked")

    def _answers_waiting(self) -> int:
        """Answers that arrived (or are being prepared) but cannot be delivered yet.

        Requests the broker has not answered do not count: pausing the broker for them would
        stop the very answers that drain the queue.
        """
        return len(self.pending) - len(self.upstream_waiting)

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
            _close_upstream_gently(self.upstream)
            self.upstream = None
        self.backlog.clear()
        if self in self.cluster.connections:
            self.cluster.connections.discard(self)
            self.cluster.metrics.connections.dec()
