"""Client to broker: bookkeeping, filters on requests, suspension and the backlog.

Part of ``ClientConnection`` (a mixin, so that the per-connection state stays in one object):
when no filter hooks any request, frames are tracked from their headers and the bytes go out
as they arrived; otherwise each frame a hook wants is decoded and run through the chain, and a
hook that awaits suspends its message while later requests wait in the backlog.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from kgate.api import FORWARD, Close, Drop, Respond, error_response
from kgate.codec import api
from kgate.codec.generated.produce import TopicProduceData
from kgate.codec.headers import (
    HeaderError,
    RequestHeader,
    parse_request_header,
    peek_request,
    produce_acks,
    response_frame,
)
from kgate.codec.headers import (
    frame as make_frame,
)
from kgate.codec.peek import produce_prefix
from kgate.filters.chain import Outcome, peek_forwards, run_hooks
from kgate.proxy.context import MessageContext
from kgate.proxy.exchange import (
    CREATE_TOPICS,
    PRODUCE,
    RAW_SASL,
    REQUEST_TIMED_OUT,
    ConnectionState,
    Exchange,
    VersionRefused,
)
from kgate.proxy.held_bytes import HELD
from kgate.proxy.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE
from kgate.proxy.validate import check_request

if TYPE_CHECKING:
    from collections.abc import Awaitable


log = logging.getLogger("kgate.connection")
# requests read whole even without filters (SASL progress, CreateTopics' validate_only): small, rare
DECODED_WHOLE = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE, CREATE_TOPICS})
_ZERO = UUID(int=0)


class RequestPath(ConnectionState):
    """The request half of ``ClientConnection``."""

    def data_received(self, data: bytes) -> None:
        self.rx_chunks += 1
        if self._raw_requests:
            self._raw_data(data)
        else:
            self._filtered_data(data)
            held = self.reader.buffered + self._backlog_bytes
            if held != self._held_reported:
                self._report_held(held)
        if len(self.pending) >= self.settings.max_inflight_requests:
            # bounded per connection: reading resumes in _flush once answers went out
            self.gate.pause("inflight-limit")

    def _filtered_data(self, data: bytes | memoryview) -> None:
        """Filter mode: frames a hook wants are decoded and run through the chain."""
        if self._req_stream_left:
            data = self._continue_request_stream(data)
            if not data:
                return
        reader = self.reader
        tail: memoryview | None = None
        if reader.buffered:
            frames = reader.feed(data)
        else:
            frames, end = reader.split(data)
            if end < len(data):
                tail = memoryview(data)[end:]
        self.frames_in += len(frames)
        try:
            for frame in frames:
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
            return
        if tail is not None and not self.closed and not (not self.suspended_request and self._peek_produce(tail)):
            reader.feed(tail)

    def _refuse_malformed(self, api_key: int, version: int, problem: str) -> None:
        """A request that fails validation never reaches the broker (proxy/validate.py)."""
        name = api.API_INFO[api_key].name if api_key in api.API_INFO else str(api_key)
        self.close(f"malformed {name} v{version} request refused: {problem}", error="malformed-request")

    def _peek_produce(self, head: memoryview) -> bool:
        """Let a single-topic Produce go on if every hook forwards it from its topic alone.

        ``head`` is a whole frame or the start of one whose rest has not arrived. True: it went
        upstream (and ``_req_stream_left`` bytes of it are still to come); False: decode it whole.
        Never while validating: a request is checked whole before any of it goes upstream.
        """
        if self.settings.validate_requests or len(head) < 12 or head[4:6] != b"\x00\x00" or self.sasl.raw:
            return False
        _key, version, cid = peek_request(head)
        hooks = self.chain.peek_hooks(PRODUCE, version) if version <= api.API_INFO[PRODUCE].max_version else ()
        if not hooks:
            return False
        size = int.from_bytes(head[:4], "big", signed=True)
        if size < 8 or size > self.settings.max_frame_bytes:
            return False  # let the reader report it
        try:
            header = parse_request_header(head, api.request_header_version(PRODUCE, version))
            prefix = produce_prefix(head, header.body_offset, version)
        except (HeaderError, api.CodecError):
            return False
        if prefix.topic_count != 1:
            return False
        limit = self.cluster.filter_limits.get(PRODUCE)
        if limit is not None and not limit[0] <= version <= limit[1]:
            return False  # the full path refuses it
        peeked = api.API_INFO[PRODUCE].request_class(
            transactional_id=prefix.transactional_id, acks=prefix.acks, timeout_ms=prefix.timeout_ms
        )
        peeked.topic_data = [
            TopicProduceData(name=prefix.topic_name or "", topic_id=prefix.topic_id or _ZERO, partition_data=[])
        ]
        if header.client_id is not None:
            self.info.client_id = header.client_id
        ctx = MessageContext(self.cluster, self.info, PRODUCE, version, cid)
        try:
            if not peek_forwards(hooks, ctx, peeked):
                return False
        except Exception:  # the full request will run the hook again and report its failure
            return False
        self.cluster.metrics.count_request(PRODUCE, version)
        self.frames_in += 1
        if prefix.acks == 0:
            self._acks0.append(cid)
            self._send_upstream(head)
        else:
            self._forward(head, Exchange(cid, PRODUCE, version, None, ctx._state))
        self._req_stream_left = size + 4 - len(head)
        return True

    def _continue_request_stream(self, data: bytes | memoryview) -> bytes | memoryview:
        """Forward the next bytes of a peeked Produce; return what follows it in ``data``."""
        n = self._req_stream_left
        if len(data) <= n:
            self._req_stream_left = n - len(data)
            self._send_upstream(data)
            return b""
        view = memoryview(data)
        self._send_upstream(view[:n])
        self._req_stream_left = 0
        return view[n:]

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
            self.frames_in += len(frames)
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
        if self.sasl.raw or api_key in DECODED_WHOLE:
            self._held_need = size  # decoded whole
        else:
            self._held_need = min(size, 2 * len(head))  # header fields still missing: grow geometrically

    def _track_head(self, head: memoryview) -> bool:
        """Track a frame from its first bytes only; False when more of it is needed."""
        if len(head) < 12 or self.sasl.raw:
            return False
        api_key = int.from_bytes(head[4:6], "big", signed=True)
        if api_key in DECODED_WHOLE:
            return False  # decoded whole (rare, small)
        try:
            self._track(head)
        except HeaderError:
            return False  # header fields not all here yet
        self.frames_in += 1
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
                self.cluster.metrics.count_request(api_key, version)
                self._acks0.append(cid)
                return  # acks=0: the broker sends no response, so nothing waits for one
        elif api_key == SASL_HANDSHAKE or api_key == SASL_AUTHENTICATE:
            self._observe_sasl_request(frame, api_key, version)
        self.cluster.metrics.count_request(api_key, version)
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

    def _request(self, frame: memoryview) -> None:
        if self.sasl.raw:
            if self.sasl.is_raw_token(frame):
                self._forward(frame, Exchange(0, RAW_SASL, 0))
                return
            self.info.principal = self.sasl.principal  # bare-token exchange just ended
        api_key, version, cid = peek_request(frame)
        hooks = self.chain.hooks("request", api_key, version) if api_key in api.API_INFO else ()
        checked = None
        if self.settings.validate_requests:
            problem, checked = check_request(frame, api_key, version)
            if problem is not None:
                self._refuse_malformed(api_key, version, problem)
                return
        if not hooks:
            self._track(frame)
            self._send_upstream(frame)
            return
        if api_key == PRODUCE and self._peek_produce(frame):
            return  # decided from its topic alone: no full decode of the partitions
        self.cluster.metrics.count_request(api_key, version)
        try:
            header = parse_request_header(frame, api.request_header_version(api_key, version))
            msg = checked if checked is not None else api.decode_request(api_key, version, frame[header.body_offset :])
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
        if type(outcome) is not tuple:  # run_hooks returned its coroutine (cheaper than isawaitable)
            self.suspended_request = True
            self._spawn(self._finish_suspended_request(cast("Awaitable[Outcome]", outcome), frame, header, ctx, msg))
            return
        try:
            self._apply_request(outcome, frame, header, ctx)
        except Exception as exc:  # e.g. a filter's answer that does not encode
            self._filter_failed(api_key, version, exc)

    def _filter_failed(self, api_key: int, version: int, exc: Exception) -> None:
        log.error("filter failed on %s v%d for %s", api.API_INFO[api_key].name, version, self.peer, exc_info=exc)
        self.close(f"filter error: {exc}", error="filter-error")

    def _queue_behind_suspended(self, frame: memoryview) -> None:
        self.backlog.append(frame)
        self._backlog_bytes += len(frame)
        if self._backlog_full():
            self.gate.pause("backlog-full")

    def _backlog_full(self) -> bool:
        """Per connection, at most ``max_queued_requests`` requests or one max-size frame's worth wait."""
        s = self.settings
        return len(self.backlog) >= s.max_queued_requests or self._backlog_bytes >= s.max_frame_bytes

    def _report_held(self, held: int) -> None:
        """Tell the process-wide account (proxy/held_bytes.py) what this connection holds now."""
        if self.closed:
            return  # torn down (and released) while this read was processed: never re-enter the account
        self._held_reported = held
        HELD.update(self, held)

    def held_cap_pause(self) -> None:
        self.gate.pause("held-cap")

    def held_cap_resume(self) -> None:
        self.gate.resume("held-cap")

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
                frame = self.backlog.popleft()
                self._backlog_bytes -= len(frame)
                self._request(frame)
        except HeaderError as exc:
            self._refuse(exc)
            return
        except Exception as exc:  # e.g. a filter's answer that does not encode: this connection only
            self._filter_failed(header.api_key, header.api_version, exc)
            return
        if not self._backlog_full():
            self.gate.resume("backlog-full")
        held = self.reader.buffered + self._backlog_bytes
        if held != self._held_reported:
            self._report_held(held)
        self.finish_if_client_gone()

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
