"""How long kgate waits for the broker's answer to one request: the request's own wait plus a margin.

Some requests ask the broker to hold them: a JoinGroup until the rebalance completes (up to its
``rebalance_timeout_ms``, 5 minutes by default), a Fetch until data arrives (``max_wait_ms``), a
Produce until the replicas have it (``timeout_ms``), an admin request until the controller is
done (``timeout_ms``). One fixed ``upstream_timeout_s`` either cut those (set low, consumers never
joined) or let a dead broker hold every other request for minutes (set high). So the deadline is
per request: what the request itself allows the broker, plus ``upstream_timeout_s`` as the margin
for the broker and the network. Requests that carry no wait (Metadata, OffsetCommit, SyncGroup,
the KIP-848 heartbeats, whose ``rebalance_timeout_ms`` configures the member and is not a wait)
get the margin alone.

``deadline_for`` is pure (a table per api key). ``exchange_deadline`` applies it to an exchange
the timeout sweep finds at the head of a broker queue for longer than the margin: only then is a
request's wait read (a header-only exchange kept its frame, or its Produce timeout, for that), so
the data path pays nothing to decode it.
"""

from __future__ import annotations

from typing import Any, Final

from kgate.codec import api
from kgate.codec.generated.api_keys import JOIN_GROUP as _JOIN_GROUP
from kgate.codec.generated.api_keys import ApiKey
from kgate.codec.headers import HeaderError, parse_request_header

#: per api key, the request field that bounds how long the broker may hold it (milliseconds)
WAIT_FIELDS: Final[dict[int, str]] = {
    int(ApiKey.PRODUCE): "timeout_ms",
    int(ApiKey.FETCH): "max_wait_ms",
    int(ApiKey.SHARE_FETCH): "max_wait_ms",
    int(ApiKey.JOIN_GROUP): "rebalance_timeout_ms",
    int(ApiKey.LIST_OFFSETS): "timeout_ms",  # v10+: an offset a remote log must answer
    int(ApiKey.CREATE_TOPICS): "timeout_ms",
    int(ApiKey.DELETE_TOPICS): "timeout_ms",
    int(ApiKey.CREATE_PARTITIONS): "timeout_ms",
    int(ApiKey.DELETE_RECORDS): "timeout_ms",
    int(ApiKey.ELECT_LEADERS): "timeout_ms",
    int(ApiKey.ALTER_PARTITION_REASSIGNMENTS): "timeout_ms",
    int(ApiKey.LIST_PARTITION_REASSIGNMENTS): "timeout_ms",
    int(ApiKey.UPDATE_FEATURES): "timeout_ms",
    int(ApiKey.ADD_RAFT_VOTER): "timeout_ms",
}
#: api keys whose header-only exchanges keep their request frame, read only if the broker is slow
#: (not Produce: a 1 MiB frame must not stay in memory; its timeout is read with its acks instead)
FRAME_KEPT: Final = frozenset(WAIT_FIELDS) - {int(ApiKey.PRODUCE)}


def own_wait_ms(api_key: int, version: int, request: Any) -> int:
    """How long ``request`` (decoded; None: unknown) lets the broker hold it, in ms (0: not at all)."""
    name = WAIT_FIELDS.get(api_key)
    if name is None or request is None:
        return 0
    if api_key == _JOIN_GROUP and version == 0:
        name = "session_timeout_ms"  # v0 has no rebalance timeout: the broker waits the session timeout
    wait = getattr(request, name, None)
    return wait if isinstance(wait, int) and wait > 0 else 0  # -1 / absent (older versions): no wait


def deadline_for(api_key: int, version: int, request: Any, margin_s: float) -> float:
    """Seconds kgate waits for the broker's answer to ``request``: its own wait plus ``margin_s``."""
    return own_wait_ms(api_key, version, request) / 1000 + margin_s


def exchange_deadline(ex: Any, margin_s: float) -> float:
    """``deadline_for`` an exchange: its decoded request, else what the header-only path kept (``wait``)."""
    api_key = getattr(ex, "api_key", None)
    version = getattr(ex, "api_version", 0)
    if api_key is None or api_key not in WAIT_FIELDS:
        return margin_s
    request = getattr(ex, "request", None)
    if request is None:
        kept = getattr(ex, "wait", None)  # set only for requests whose wait kgate may need
        if isinstance(kept, int):  # a Produce's timeout_ms (negative: no wait)
            return max(kept, 0) / 1000 + margin_s
        if kept is not None:
            request = decode_kept(api_key, version, kept)
    return deadline_for(api_key, version, request, margin_s)


def decode_kept(api_key: int, version: int, frame: bytes | memoryview) -> Any:
    """The request in a kept frame; None when it cannot be read (only its head was kept): the margin then."""
    try:
        header = parse_request_header(frame, api.request_header_version(api_key, version))
        return api.decode_request(api_key, version, frame[header.body_offset :])
    except (HeaderError, api.CodecError):
        return None
