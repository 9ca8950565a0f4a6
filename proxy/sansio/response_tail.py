"""KIP-951 node endpoints in the tail of Produce, Fetch, ShareFetch and ShareAcknowledge responses.

These responses carry broker addresses (leader hints) only at their very end. kgate walks each
one's structure as it arrives (``codec.tail_walk``), forwards everything before the tail at once
(record batches are never held: a Fetch streams through cut-through) and holds only the tail,
whose addresses it maps to kgate listeners like every other address (docs/architecture.md,
"Addresses: no bypass").

The frame's size prefix has gone to the client before the tail is seen, so the rewritten tail
keeps the original tail's exact length: the difference is padded with an unknown tagged field
that clients skip. When the mapped addresses need more room than the broker's did, the hints are
dropped (the tagged field left out); the client then learns the new leader from a Metadata
refresh, as it did before KIP-951, which is always safe. A tail that cannot be read closes the
connection (the client sees a cut frame, never an address).

An empty hint list is left out too, as Kafka does (it never writes a tagged field that holds its
default). Tansu writes one in every Fetch v16+ answer, and in its answer to a deleted topic's id
(zero topic id, a ``current_leader`` tag) librdkafka takes the present-but-empty list as leader
hints for a topic it cannot name and crashes (docs/compatibility.md).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from kgate.codec import api
from kgate.codec.errors import CodecError
from kgate.codec.generated.api_keys import FETCH, PRODUCE, SHARE_ACKNOWLEDGE, SHARE_FETCH
from kgate.codec.tail_walk import (
    FrameWalker,
    TailMemo,
    WalkError,
    encode_node_endpoints,
    fit_tagged,
    read_node_endpoints,
    read_tagged,
    walk_program,
)

#: api key -> (lowest version with node endpoints, where they sit: the top-level tag 0, or the
#: last regular field ``node_endpoints``)
TAIL_KEYS: Final = {
    PRODUCE: (10, "tag"),
    FETCH: (16, "tag"),
    SHARE_FETCH: (1, "field"),
    SHARE_ACKNOWLEDGE: (1, "field"),
}
_NODE_ENDPOINTS_TAG: Final = 0  # Produce v10+ and Fetch v16+: NodeEndpoints is tag 0 of the body
_EMPTY_TAGS: Final = b"\x00"
#: one tagged field, tag 0, 1 byte: an empty node-endpoint list. Tansu sends it in every Fetch v16+
#: answer (it writes tagged fields that hold their default); Kafka never does
_EMPTY_HINTS: Final = b"\x01\x00\x01\x01"
#: what kgate sends in its place: the list left out, one unknown tag (127, one zero byte) of the
#: same length instead (``fit_tagged([], 4)``)
_NO_HINTS: Final = b"\x01\x7f\x01\x00"
_EMPTY_ARRAY: Final = b"\x01"  # a compact array of no node endpoints

#: logged at start and by ``kgate check-config`` when a configuration still sets ``proxy.leader_hints``
LEADER_HINTS_DEPRECATED: Final = (
    "proxy.leader_hints is deprecated and has no effect: kgate offers every Produce and Fetch version "
    "and rewrites KIP-951 leader hints as responses stream through; remove the key"
)

_BAD: Final = (CodecError, IndexError, ValueError, struct.error, UnicodeDecodeError, TypeError)


class TailSpec:
    """How to find and rewrite the tail of one (api key, version)'s responses."""

    __slots__ = ("api_key", "endpoint_class", "find_tail", "in_field", "program", "version")

    def __init__(self, api_key: int, version: int) -> None:
        cls = api.API_INFO[api_key].response_class
        self.api_key = api_key
        self.version = version
        self.in_field = TAIL_KEYS[api_key][1] == "field"
        header_tags = api.response_header_version(api_key, version) >= 1
        self.program = walk_program(cls, version, header_tags, "node_endpoints" if self.in_field else None)
        self.find_tail = TailMemo(self.program).tail_at  # the same walk, for a frame that is all there
        field = next(f for f in cls._FIELDS if f.name == "node_endpoints")
        self.endpoint_class = field.struct

    def walker(self, total: int) -> FrameWalker:
        return FrameWalker(self.program, total)

    def rewrite_tail(self, tail: bytes | memoryview, mapper: Any) -> bytes | None:
        """The tail with every node endpoint mapped, exactly as long; None: keep it as it is.

        A tagged node-endpoint list that names no node is left out (padded over), never forwarded.

        ``mapper(node_id, host, port)`` gives the client-facing address or None (the node is left
        out). Raises ``WalkError`` for a tail that does not read as its api says.
        """
        try:
            if self.in_field:
                return self._rewrite_field(tail, mapper)
            return self._rewrite_tags(tail, mapper)
        except WalkError:
            raise
        except _BAD as exc:
            raise WalkError(f"unreadable node endpoints: {type(exc).__name__}: {exc}") from exc

    def _nodes(self, buf: Any, pos: int) -> tuple[list[Any], int]:
        return read_node_endpoints(self.endpoint_class, buf, pos, self.version)

    def _encode(self, nodes: list[Any]) -> bytes:
        return encode_node_endpoints(self.endpoint_class, nodes, self.version)

    def _rewrite_tags(self, tail: bytes | memoryview, mapper: Any) -> bytes | None:
        if tail == _EMPTY_TAGS:
            return None  # the common answer: no tagged field
        if tail == _EMPTY_HINTS:
            return _NO_HINTS  # Tansu's empty list of hints, left out
        entries, end = read_tagged(tail, 0)
        if end != len(tail):
            raise WalkError(f"{len(tail) - end} bytes after the tagged fields")
        hinted = [v for tag, v in entries if tag == _NODE_ENDPOINTS_TAG]
        if not hinted:
            return None
        nodes, used = self._nodes(hinted[0], 0)
        if used != len(hinted[0]):
            raise WalkError("node endpoints do not fill their tagged field")
        others = [(tag, v) for tag, v in entries if tag != _NODE_ENDPOINTS_TAG]
        mapped = map_nodes(nodes, mapper)
        if mapped:
            fitted = fit_tagged(sorted([(_NODE_ENDPOINTS_TAG, self._encode(mapped)), *others]), len(tail))
            if fitted is not None:
                return fitted
        # an empty (or null) list, no room for the mapped hints, or none servable: leave the field
        # out (as Kafka does when it has no hints); the client asks Metadata
        fitted = fit_tagged(others, len(tail))
        if fitted is None:  # cannot happen: the hints took 3 bytes at least
            raise WalkError("cannot fit the tail without its hints")
        return fitted

    def _rewrite_field(self, tail: bytes | memoryview, mapper: Any) -> bytes | None:
        nodes, pos = self._nodes(tail, 0)
        entries, end = read_tagged(tail, pos)
        if end != len(tail):
            raise WalkError(f"{len(tail) - end} bytes after the tagged fields")
        if not nodes:
            return None
        mapped = map_nodes(nodes, mapper)
        if mapped:
            array = self._encode(mapped)
            fitted = fit_tagged(entries, len(tail) - len(array))
            if fitted is not None:
                return array + fitted
        fitted = fit_tagged(entries, len(tail) - len(_EMPTY_ARRAY))
        if fitted is None:  # cannot happen: a node endpoint takes 11 bytes at least
            raise WalkError("cannot fit the tail without its hints")
        return _EMPTY_ARRAY + fitted

    def rewrite_frame(self, frame: memoryview, mapper: Any) -> bytes | memoryview:
        """A whole frame with its tail rewritten (the frame itself when there is nothing to map)."""
        end = len(frame)
        at = self.find_tail(frame, end)
        if at == end - 1 and frame[at] == 0 and not self.in_field:
            return frame  # the common answer: an empty tagged section, no hints
        if at == end - 4 and frame[at:] == _EMPTY_HINTS and not self.in_field:
            return b"".join((frame[:at], _NO_HINTS))  # an empty list of hints (Tansu's Fetch answers)
        if at == end:
            raise WalkError("the frame ends before its node endpoints")
        new = self.rewrite_tail(frame[at:], mapper)
        if new is None:
            return frame
        return b"".join((frame[:at], new))


def dropped_empty_hints(frame: bytes | memoryview) -> bool:
    """Whether ``rewrite_frame`` changed ``frame`` only to leave out an empty hint list (Tansu's),
    which rewrites no address (not counted in kgate_address_rewrites_total)."""
    return frame[-4:] == _EMPTY_HINTS


def map_nodes(nodes: list[Any], mapper: Any) -> list[Any]:
    """Each node's host/port mapped in place; nodes kgate cannot serve are left out."""
    kept = []
    for node in nodes:
        addr = mapper(node.node_id, node.host, node.port)
        if addr is not None:
            node.host, node.port = addr
            kept.append(node)
    return kept


_SPECS: dict[tuple[int, int], TailSpec] = {}


def spec(api_key: int, version: int) -> TailSpec:
    """The cached ``TailSpec`` (only for the pairs ``has_tail`` accepts)."""
    key = (api_key, version)
    found = _SPECS.get(key)
    if found is None:
        found = _SPECS[key] = TailSpec(api_key, version)
    return found


def has_tail(api_key: int, version: int) -> bool:
    """Whether this api and version's responses may carry node endpoints kgate walks to."""
    entry = TAIL_KEYS.get(api_key)
    return entry is not None and version >= entry[0] and api.knows(api_key, version)


class TailStream:
    """One response streaming through: what of each piece may go now, and its tail held back."""

    __slots__ = ("held", "rewritten", "seen", "spec", "walker")

    def __init__(self, tail_spec: TailSpec, total: int) -> None:
        self.spec = tail_spec
        self.walker = tail_spec.walker(total)
        self.seen = 0  # bytes of the frame fed so far
        self.held: list[bytes] = []  # the tail's bytes so far (copies: the read buffers are reused)
        self.rewritten = False  # whether ``finish`` rewrote addresses (kgate_address_rewrites_total)

    def piece(self, data: bytes | memoryview) -> bytes | memoryview:
        """Walk the next piece; the part of it before the tail (to forward now). Raises WalkError."""
        seen = self.seen
        n = len(data)
        self.seen = seen + n
        walker = self.walker
        if walker.tail_at < 0:
            if walker.skipping > n:  # inside a record set: nothing in this piece to read (most pieces)
                walker.pass_over(n)
                return data
            walker.feed(data)
            if walker.tail_at < 0:
                return data
        cut = walker.tail_at - seen
        if cut <= 0:
            self.held.append(bytes(data))
            return b""
        if cut >= len(data):
            return data
        self.held.append(bytes(data[cut:]))
        return memoryview(data)[:cut]

    def finish(self, mapper: Any) -> bytes:
        """The frame's last bytes are in: the tail to send, rewritten (as long as the broker's)."""
        if self.walker.tail_at < 0:
            raise WalkError("the frame ended before its node endpoints")
        tail = b"".join(self.held)
        new = self.spec.rewrite_tail(tail, mapper)
        if new is None:
            return tail
        self.rewritten = tail != _EMPTY_HINTS  # leaving out an empty list rewrites no address
        return new
