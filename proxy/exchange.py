"""What one client connection keeps per request, and small pieces both directions share."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

from kgate.api import ApiKey, ErrorCode
from kgate.codec.headers import HeaderError

if TYPE_CHECKING:
    from kgate.api import ConnectionInfo
    from kgate.codec.framing import FrameReader
    from kgate.config import ProxySettings
    from kgate.filters.chain import FilterChain
    from kgate.proxy.cluster import VirtualCluster
    from kgate.proxy.flow import ReadGate
    from kgate.proxy.sasl import SaslState

PRODUCE = int(ApiKey.PRODUCE)
FETCH = int(ApiKey.FETCH)
CREATE_TOPICS = int(ApiKey.CREATE_TOPICS)
METADATA = int(ApiKey.METADATA)
# Small Fetch responses that may carry an unknown-topic error (errors, empty long polls) are decoded
# when filters use topic names, so a dead id's error evicts it; large ones stream through undecoded
# (see _start_stream and response_path._may_carry_unknown_topic).
OBSERVE_FETCH_MAX = 64 * 1024
RAW_SASL = -1  # api key marker of a bare SASL token after SaslHandshake v0
REQUEST_TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)


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


class ConnectionState:
    """The per-connection state both halves of ``ClientConnection`` work on.

    Only declarations: ``ClientConnection.__init__`` (proxy/connection.py) sets every one of
    them; ``RequestPath`` and ``ResponsePath`` are the two halves of its behaviour.
    """

    cluster: VirtualCluster
    chain: FilterChain
    settings: ProxySettings
    reader: FrameReader
    upstream_reader: FrameReader
    gate: ReadGate
    upstream_gate: ReadGate
    pending: deque[Exchange]
    upstream_waiting: deque[Exchange]
    backlog: deque[memoryview]
    suspended_request: bool
    transport: asyncio.Transport | None
    upstream: asyncio.Transport | None
    info: ConnectionInfo
    sasl: SaslState
    closed: bool
    client_gone: bool
    _raw_requests: bool
    _early: list[bytes | memoryview]
    _tasks: set[asyncio.Task[Any]]
    _stream_left: int
    _req_skip: int
    _req_stream_left: int
    _acks0: deque[int]
    _held: list[bytes]
    _held_len: int
    _held_need: int
    rx_chunks: int
    up_chunks: int
    frames_in: int
    _backlog_bytes: int
    _held_reported: int

    if TYPE_CHECKING:  # defined by ClientConnection or by the other half; declared for the type checker

        @property
        def peer(self) -> str: ...
        def _flush(self) -> None: ...
        def _filter_failed(self, api_key: int, version: int, exc: Exception) -> None: ...
        def _spawn(self, coro: Any) -> None: ...

    def close(self, reason: str, error: str | None = None) -> None:
        raise NotImplementedError

    def finish_if_client_gone(self) -> None:
        raise NotImplementedError
