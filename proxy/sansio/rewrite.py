"""Broker-address rewriting of responses, so that no client ever learns a broker's address.

Every response that can carry a broker address is decoded and each (node id, host, port) is
replaced by the kgate listener that serves that node. A response kgate cannot decode is not
forwarded (fail closed: forwarding it could hand the client a broker address). Responses
with no address in them this time (Produce/Fetch without ``NodeEndpoints``) keep their
original bytes.

ApiVersions is handled here too: for the api keys kgate must decode, it advertises only the
versions its codec knows, so that clients never send what kgate cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kgate.api import ApiKey, ErrorCode
from kgate.codec import api
from kgate.codec.generated.api_keys import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    DESCRIBE_QUORUM,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    PRODUCE,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
)
from kgate.codec.generated.session.api_versions import ApiVersion
from kgate.codec.headers import response_body_offset

UNSUPPORTED_VERSION = int(ErrorCode.UNSUPPORTED_VERSION)


class NodeMapper(Protocol):
    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        """The client-facing address for a node, or None if kgate cannot serve it."""


#: the nodes kgate serves for its cluster, as (node id, client-facing host, port); what a Metadata
#: answer that names no broker is completed with (``fill_brokers``)
ServedNodes = Callable[[], Sequence[tuple[int, str, int]]]


def fill_brokers(msg: Any, served: ServedNodes | None) -> bool:
    """Complete a decoded Metadata answer that names no broker with the nodes kgate serves.

    Kafka answers so from a broker fenced at the end of its controlled shutdown (it goes on
    answering for a few milliseconds), and while it starts: every topic, no broker, no leader. A
    client that believes it forgets every broker it knew; librdkafka up to 2.16.0 then, if the
    connection drops at the same moment (it does: the broker is stopping), never connects again
    (librdkafka #5301, the broker-restart stall of issue 27). The Java client ignores such an
    answer ("Ignoring empty metadata response"). kgate's nodes are its own listeners and outlive a
    broker restart, so the answer names them (rack unknown) and the client keeps them. A list
    kgate itself emptied (every broker unservable) is not completed. Whether the list was.
    """
    if msg.brokers or served is None:
        return False
    nodes = served()
    if not nodes:
        return False
    from kgate.codec.generated.data.metadata import MetadataResponseBroker  # rare: not at start-up

    msg.brokers = [MetadataResponseBroker(node_id=n, host=h, port=p, rack=None) for n, h, p in nodes]
    return True


class RewriteError(Exception):
    """A response that must be rewritten could not be decoded."""


def _map_nodes(nodes: list[Any], mapper: NodeMapper, id_attr: str = "node_id") -> list[Any]:
    """Rewrite each node's host/port in place; drop nodes kgate cannot serve."""
    kept = []
    for node in nodes:
        addr = mapper(getattr(node, id_attr), node.host, node.port)
        if addr is not None:
            node.host, node.port = addr
            kept.append(node)
    return kept


def _metadata(msg: Any, version: int, mapper: NodeMapper) -> bool:
    msg.brokers = _map_nodes(msg.brokers, mapper)
    return True


def _describe_cluster(msg: Any, version: int, mapper: NodeMapper) -> bool:
    msg.brokers = _map_nodes(msg.brokers, mapper, "broker_id")
    return True


def _find_coordinator(msg: Any, version: int, mapper: NodeMapper) -> bool:
    if version >= 4:
        targets = msg.coordinators
    else:
        targets = [msg]
    changed = False
    for c in targets:
        if c.error_code != ErrorCode.NONE or c.node_id < 0:
            continue
        addr = mapper(c.node_id, c.host, c.port)
        if addr is None:
            # Not servable: turn the answer into COORDINATOR_NOT_AVAILABLE (15) so the client
            # retries instead of connecting to the broker behind kgate's back.
            c.error_code, c.node_id, c.host, c.port = 15, -1, "", -1
        else:
            c.host, c.port = addr
        changed = True
    return changed


def _node_endpoints(msg: Any, version: int, mapper: NodeMapper) -> bool:
    endpoints = getattr(msg, "node_endpoints", None)
    if not endpoints:
        return False
    msg.node_endpoints = _map_nodes(endpoints, mapper)
    return True


def _describe_quorum(msg: Any, version: int, mapper: NodeMapper) -> bool:
    """Hide the controllers' listeners (v2+): kgate fronts brokers, not controllers.

    A client given a controller's ``host:port`` could reach the controller quorum behind kgate's
    back, and kgate has no listener to offer in its place. The quorum's state (leader, epochs,
    voters, lag) stays; only the endpoints go, as for a controller that has none registered
    (``kafka-metadata-quorum.sh describe --status`` then prints no ``CONTROLLER://host:port``).
    """
    changed = False
    for node in msg.nodes:
        if node.listeners:
            node.listeners = []
            changed = True
    return changed


# api key -> (lowest version that can carry addresses, rewriter)
_REWRITERS: dict[int, tuple[int, Callable[[Any, int, NodeMapper], bool]]] = {
    METADATA: (0, _metadata),
    FIND_COORDINATOR: (0, _find_coordinator),
    DESCRIBE_CLUSTER: (0, _describe_cluster),
    DESCRIBE_QUORUM: (2, _describe_quorum),
    PRODUCE: (10, _node_endpoints),
    FETCH: (16, _node_endpoints),
    SHARE_FETCH: (0, _node_endpoints),
    SHARE_ACKNOWLEDGE: (0, _node_endpoints),
}

#: api keys whose responses kgate must be able to decode (so ApiVersions is capped for them)
DECODED_RESPONSE_KEYS = frozenset(_REWRITERS) | {API_VERSIONS}


def needs_rewrite(api_key: int, api_version: int) -> bool:
    entry = _REWRITERS.get(api_key)
    return (entry is not None and api_version >= entry[0]) or api_key == API_VERSIONS


#: responses decoded even without a filter: SASL progress and topic-name learning
OBSERVED_KEYS = frozenset(
    int(k) for k in (ApiKey.SASL_HANDSHAKE, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.SASL_AUTHENTICATE)
)


def _decode(frame: memoryview, api_key: int, version: int) -> tuple[int, Any]:
    hv = api.response_header_version(api_key, version)
    offset = response_body_offset(frame, hv)
    return offset, api.decode_response(api_key, version, frame[offset:])


def reframe(frame: memoryview, offset: int, body: bytes | bytearray) -> bytes:
    """The frame with its original header (bytes 4..offset) and a new body."""
    header = frame[4:offset]
    return b"".join(((len(header) + len(body)).to_bytes(4, "big", signed=True), header, body))


def rewrite_message(
    msg: Any, api_key: int, version: int, mapper: NodeMapper, served: ServedNodes | None = None
) -> bool:
    """Rewrite the addresses of a decoded response in place; whether it must be re-encoded.

    ``served``: a Metadata answer naming no broker is completed with these (``fill_brokers``).
    """
    entry = _REWRITERS.get(api_key)
    if entry is None or version < entry[0]:
        return False
    named_none = api_key == METADATA and not msg.brokers  # the broker's list, not what mapping left
    changed = entry[1](msg, version, mapper)
    if named_none and fill_brokers(msg, served):
        return True
    return changed


def rewrite_addresses(frame: memoryview, api_key: int, version: int, mapper: NodeMapper) -> bytes | None:
    """New frame with rewritten addresses, or None when the original bytes can go as they are."""
    try:
        offset, msg = _decode(frame, api_key, version)
    except (api.CodecError, ValueError) as exc:
        raise RewriteError(f"cannot decode {api.API_INFO[api_key].name} v{version} response: {exc}") from exc
    if not rewrite_message(msg, api_key, version, mapper):
        return None
    return reframe(frame, offset, msg.encode(version))


def version_limits(filter_limits: dict[int, tuple[int, int]] | None = None) -> dict[int, tuple[int, int]]:
    """Per api key, the versions kgate lets clients use: what its codec reads of what it must read.

    Only the api keys whose responses kgate decodes or walks for addresses are limited, and only
    from the first version that carries one (Produce below v10 carries no address and stays open
    to old clients); above, to the versions the codec knows, since an answer kgate cannot read is
    not forwarded. Everything else the broker offers is offered as it is (no cap changes what a
    client does: transactions v2 need Produce v12+, share consumers ShareFetch v1+). Filter hooks
    add their declared ranges.
    """
    limits: dict[int, tuple[int, int]] = {}
    for key in DECODED_RESPONSE_KEYS:
        info = api.API_INFO[key]
        decode_from = _REWRITERS[key][0] if key in _REWRITERS else 0
        lo = info.min_version if decode_from < info.min_version else 0
        limits[key] = (lo, info.max_version)
    for key, (flo, fhi) in (filter_limits or {}).items():
        info = api.API_INFO[key]
        lo, hi = max(flo, info.min_version), min(fhi, info.max_version)
        if key in limits:
            lo, hi = max(lo, limits[key][0]), min(hi, limits[key][1])
        limits[key] = (lo, hi)
    return limits


DEFAULT_LIMITS = version_limits()


def _unsupported_api_versions(frame: memoryview) -> bytes:
    """A v0-layout UNSUPPORTED_VERSION answer naming the ApiVersions versions kgate reads.

    This is what a broker does for an ApiVersions version it does not know; the client then
    retries with a version from the advertised range, which kgate can decode and cap.
    """
    info = api.API_INFO[API_VERSIONS]
    resp = info.response_class(error_code=UNSUPPORTED_VERSION)
    resp.api_keys = [ApiVersion(api_key=API_VERSIONS, min_version=0, max_version=info.max_version)]
    return reframe(frame, 8, resp.encode(0))


def cap_api_versions(
    frame: memoryview, version: int, limits: dict[int, tuple[int, int]] = DEFAULT_LIMITS, known_only: bool = False
) -> bytes | None:
    """Advertise for each key in ``limits`` only the versions within it (intersection with the broker).

    ``known_only``: leave out api keys kgate's codec does not know (a filter refuses them).

    A broker that does not support the client's ApiVersions version answers in v0 layout
    with UNSUPPORTED_VERSION; that answer is passed on as is. A version newer than kgate's
    codec is refused the same way, so a client never learns ranges kgate did not cap.
    """
    if version > api.API_INFO[API_VERSIONS].max_version:
        return _unsupported_api_versions(frame)
    try:
        offset, msg = _decode(frame, API_VERSIONS, version)
    except (api.CodecError, ValueError):
        # A broker answers an ApiVersions version it does not support in the v0 layout.
        try:
            offset, msg = _decode(frame, API_VERSIONS, 0)
        except (api.CodecError, ValueError) as exc:
            raise RewriteError(f"cannot decode ApiVersions v{version} response: {exc}") from exc
        version = 0
    if msg.error_code == UNSUPPORTED_VERSION and not msg.api_keys:
        return None  # nothing advertised: the client retries with a lower version
    changed = False
    kept = []
    for entry in msg.api_keys:
        if known_only and entry.api_key not in api.API_INFO:
            changed = True
            continue
        limit = limits.get(entry.api_key)
        if limit is not None:
            lo = max(entry.min_version, limit[0])
            hi = min(entry.max_version, limit[1])
            if lo > hi:
                changed = True
                continue  # no version both sides can read: hide the api rather than mangle it
            if (lo, hi) != (entry.min_version, entry.max_version):
                entry.min_version, entry.max_version = lo, hi
                changed = True
        kept.append(entry)
    if not changed:
        return None
    msg.api_keys = kept
    return reframe(frame, offset, msg.encode(version))
