"""Rewrite only the broker list of a Metadata response, copying everything after it as bytes.

Every client asks for Metadata on every connection and on every refresh, and a response for a
large cluster carries thousands of topics and partitions. kgate only has to change the brokers,
which come first in the body (after ``throttle_time_ms`` from v3). Decoding and re-encoding the
whole response with the codec costs time for every topic (docs/performance.md, "Proxy overhead");
this module reads the few fields before and inside the broker list by hand and leaves the rest
untouched, which also keeps the topics' bytes (and any tagged fields kgate does not know) exactly
as the broker sent them.

Used when nothing else needs the decoded response (no filter hooks Metadata responses and no
filter uses topic names); otherwise the full decode in ``proxy.sansio.rewrite`` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from struct import Struct
from typing import Final

from kgate.codec.headers import HeaderError, read_uvarint, skip_tagged_fields
from kgate.codec.primitives import uvarint_bytes
from kgate.proxy.sansio.rewrite import NodeMapper, ServedNodes

_I16: Final = Struct(">h")
_I32: Final = Struct(">i")
FLEXIBLE_FROM: Final = 9


def _string(buf: memoryview, pos: int, flexible: bool, nullable: bool) -> tuple[str | None, int]:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        if pos + 2 > len(buf):
            raise HeaderError("truncated string length")
        n = _I16.unpack_from(buf, pos)[0]
        pos += 2
    if n < 0:
        if not nullable:
            raise HeaderError("null where a string is required")
        return None, pos
    if pos + n > len(buf):
        raise HeaderError("string runs past the end of the frame")
    try:
        return bytes(buf[pos : pos + n]).decode("utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise HeaderError(f"invalid UTF-8 in a string: {exc}") from exc


def _put_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else _I16.pack(-1)
        return
    raw = value.encode()
    out += uvarint_bytes(len(raw) + 1) if flexible else _I16.pack(len(raw))
    out += raw


def rewrite_brokers(
    frame: memoryview, offset: int, version: int, mapper: NodeMapper, served: ServedNodes | None = None
) -> bytes:
    """The Metadata response ``frame`` (body at ``offset``) with every broker's address mapped.

    Brokers the mapper cannot serve are left out, as in the full rewrite; an answer that names no
    broker gets ``served`` (``rewrite.fill_brokers``). Raises HeaderError on a body that does not
    parse (the caller must then not forward it).
    """
    start = broker_list_start(frame, offset, version)
    end, new_list, _ = rewrite_broker_list(frame, start, version, mapper, served)
    return assemble(frame, offset, start, new_list, end)


def broker_list_start(frame: memoryview, offset: int, version: int) -> int:
    """Where the broker list begins: after ``throttle_time_ms`` (v3+)."""
    if version < 3:
        return offset
    if offset + 4 > len(frame):
        raise HeaderError("truncated throttle_time_ms")
    return offset + 4


def assemble(frame: memoryview, offset: int, start: int, new_list: bytes, end: int) -> bytes:
    """The frame with the bytes between ``start`` and ``end`` (the broker list) replaced."""
    size = len(frame) - 4 - (end - start) + len(new_list)
    return b"".join((_I32.pack(size), frame[4:start], new_list, frame[end:]))


def rewrite_broker_list(
    frame: memoryview, pos: int, version: int, mapper: NodeMapper, served: ServedNodes | None = None
) -> tuple[int, bytes, bool]:
    """Read the broker list at ``pos``: where it ends, its mapped encoding, and whether every
    broker was mapped (none left out).

    An empty list is completed with ``served`` (``rewrite.fill_brokers`` says why) and then
    reported as not complete, so that no memo keeps it: the nodes kgate serves may change.
    """
    flexible = version >= FLEXIBLE_FROM
    if flexible:
        count, pos = read_uvarint(frame, pos)
        count -= 1
    else:
        if pos + 4 > len(frame):
            raise HeaderError("truncated broker count")
        count = _I32.unpack_from(frame, pos)[0]
        pos += 4
    if count < 0 or count > len(frame):
        raise HeaderError(f"implausible broker count {count}")
    if count == 0 and served is not None:  # never remembered: the nodes kgate serves may change
        return pos, _broker_list(served(), version, flexible), False
    kept: list[bytes] = []
    for _ in range(count):
        if pos + 4 > len(frame):
            raise HeaderError("truncated broker")
        node_id = _I32.unpack_from(frame, pos)[0]
        host, pos = _string(frame, pos + 4, flexible, nullable=False)
        if pos + 4 > len(frame):
            raise HeaderError("truncated broker port")
        port = _I32.unpack_from(frame, pos)[0]
        pos += 4
        rack: str | None = None
        if version >= 1:
            rack, pos = _string(frame, pos, flexible, nullable=True)
        tags = b""
        if flexible:
            end = skip_tagged_fields(frame, pos)
            tags = bytes(frame[pos:end])
            pos = end
        addr = mapper(node_id, host or "", port)
        if addr is None:
            continue
        b = bytearray(_I32.pack(node_id))
        _put_string(b, addr[0], flexible)
        b += _I32.pack(addr[1])
        if version >= 1:
            _put_string(b, rack, flexible)
        b += tags
        kept.append(bytes(b))
    head = uvarint_bytes(len(kept) + 1) if flexible else _I32.pack(len(kept))
    return pos, b"".join((head, *kept)), len(kept) == count


def _broker_list(nodes: Sequence[tuple[int, str, int]], version: int, flexible: bool) -> bytes:
    """A broker list naming ``nodes`` (node id, host, port), rack unknown, no tagged fields."""
    out = bytearray(uvarint_bytes(len(nodes) + 1) if flexible else _I32.pack(len(nodes)))
    for node_id, host, port in nodes:
        out += _I32.pack(node_id)
        _put_string(out, host, flexible)
        out += _I32.pack(port)
        if version >= 1:
            _put_string(out, None, flexible)
        if flexible:
            out += b"\x00"  # no tagged fields
    return bytes(out)
