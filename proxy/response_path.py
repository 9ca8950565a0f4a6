"""Broker to client: matching answers, address rewriting, response hooks, cut-through, delivery.

Part of ``ClientConnection`` (a mixin over the same per-connection state): each response is
matched to the head of ``upstream_waiting``; one that nobody must decode and that is next in line
streams through as it arrives; the others are decoded, rewritten, shown to the topic-name
service and to response hooks, and delivered in request order by ``_flush``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from kgate.api import FORWARD, Close, ErrorCode
from kgate.codec import api
from kgate.codec.headers import HeaderError, peek_correlation_id, response_body_offset
from kgate.filters.chain import Outcome, run_hooks
from kgate.proxy import rewrite
from kgate.proxy.context import MessageContext
from kgate.proxy.exchange import FETCH, METADATA, OBSERVE_FETCH_MAX, RAW_SASL, ConnectionState, Exchange
from kgate.proxy.metadata_brokers import rewrite_brokers
from kgate.proxy.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE

if TYPE_CHECKING:
    from collections.abc import Awaitable


log = logging.getLogger("kgate.connection")
# UNKNOWN_TOPIC_OR_PARTITION (3) and UNKNOWN_TOPIC_ID (100) as the int16 bytes a response carries them in
_UNKNOWN_TOPIC_CODES = (b"\x00\x03", b"\x00\x64")


def _may_carry_unknown_topic(frame: memoryview) -> bool:
    """Whether a Fetch response could report an id as unknown (so decoding it may teach the resolver).

    An error code sits in the response as two bytes; a response in which neither code's bytes occur
    anywhere cannot carry it and needs no decode. The bytes also occur by chance (small integers,
    record data): such false positives cost only the decode every small Fetch response used to get.
    Most answers of a tailing consumer contain neither, and skip a decode of ~10 us.
    """
    data = bytes(frame)
    return _UNKNOWN_TOPIC_CODES[0] in data or _UNKNOWN_TOPIC_CODES[1] in data


class ResponsePath(ConnectionState):
    """The response half of ``ClientConnection``."""

    def upstream_data(self, data: bytes | memoryview) -> None:
        self.up_chunks += 1
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
        assert self.transport is not None or self.closed or self.client_gone
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
            or (
                api_key == FETCH
                and version >= 13
                and len(frame) <= OBSERVE_FETCH_MAX
                and self.cluster.names_in_use
                and _may_carry_unknown_topic(frame)
            )
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
        if api_key == SASL_HANDSHAKE and version == 0 and getattr(msg, "error_code", None) == ErrorCode.NONE:
            self.sasl.handshake_v0_accepted()
        elif api_key == SASL_AUTHENTICATE:
            self.sasl.authenticate_response(getattr(msg, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
            self.info.principal = self.sasl.principal
        if not hooks:
            ex.response = self._rewritten(ex, frame, offset, msg) if changed else frame
            return
        ctx = MessageContext(self.cluster, self.info, api_key, version, ex.cid, ex.request, ex.state)
        try:
            outcome = run_hooks(hooks, ctx, msg)
        except Exception as exc:  # a filter bug closes this connection only, never the process
            self._filter_failed(api_key, version, exc)
            return
        if type(outcome) is not tuple:  # run_hooks returned its coroutine (cheaper than isawaitable)
            pending = cast("Awaitable[Outcome]", outcome)
            self._spawn(self._finish_suspended_response(pending, ex, frame, offset, changed))
            if self._answers_waiting() > self.settings.max_queued_requests:
                self.upstream_gate.pause("answers-blocked")
            return
        try:
            self._apply_response(outcome, ex, frame, offset, changed)
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
        if changed:
            # A hook's changes must not undo the address rewrite, so the addresses are mapped again,
            # but only to what kgate already routes: the message was rewritten once, its addresses
            # are kgate's own now, and learning from them would route the node to kgate itself.
            rewrite.rewrite_message(msg, ex.api_key, ex.api_version, self.cluster.mapped_address)
            ex.response = rewrite.reframe(frame, offset, msg.encode(ex.api_version))
        elif rewritten:
            ex.response = self._rewritten(ex, frame, offset, msg)
        else:
            ex.response = frame

    def _rewritten(self, ex: Exchange, frame: memoryview, offset: int, msg: Any) -> bytes | memoryview:
        """The answer with only its addresses rewritten (``msg`` is the decoded, rewritten message).

        Metadata copies its topics as bytes and rewrites the broker list in place, instead of
        encoding every topic again (what a policy filter that reads Metadata paid per answer).
        """
        if ex.api_key == METADATA:
            try:
                return rewrite_brokers(frame, offset, ex.api_version, self.cluster.mapped_address)
            except HeaderError:
                pass  # decoded fine, so encoding it works too
        return rewrite.reframe(frame, offset, msg.encode(ex.api_version))

    def _flush(self) -> None:
        """Write every answer that is ready, in request order."""
        pending = self.pending
        transport = self.transport
        if transport is None or self.closed or self._stream_left:
            if self.client_gone:  # answers to a client that left: nobody to give them to
                while pending and pending[0].response is not None:
                    pending.popleft()
            return  # while a response streams through, nothing else may be written
        while pending and pending[0].response is not None:
            transport.write(pending.popleft().response)  # type: ignore[arg-type]
        if self._answers_waiting() <= self.settings.max_queued_requests:
            self.upstream_gate.resume("answers-blocked")
        if len(pending) < self.settings.max_inflight_requests:
            self.gate.resume("inflight-limit")

    def _answers_waiting(self) -> int:
        """Answers that arrived (or are being prepared) but cannot be delivered yet.

        Requests the broker has not answered do not count: pausing the broker for them would
        stop the very answers that drain the queue.
        """
        return len(self.pending) - len(self.upstream_waiting)
