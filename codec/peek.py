"""Read the start of a Produce request before its records have arrived.

A Produce request lists, per topic, its partitions and their records; the records are nearly
all of its bytes. A filter that decides by topic alone can answer from the fields before the
first topic's partitions, when the request names a single topic (a second topic's name would
only come after the first one's records). This module reads exactly those fields from a frame
prefix, so the rest of the request can stream on while it is still arriving.
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import Struct
from uuid import UUID

from kgate.codec.headers import HeaderError, read_uvarint

_I16 = Struct(">h")
_I32 = Struct(">i")


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~1 µs more per peeked Produce
class ProducePrefix:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_count: int
    topic_name: str | None  # versions 0-12
    topic_id: UUID | None  # versions 13+


def _need(buf: memoryview | bytes, end: int) -> None:
    if end > len(buf):
        raise HeaderError("Produce prefix not complete yet")


def _string(buf: memoryview | bytes, pos: int, compact: bool) -> tuple[str | None, int]:
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        _need(buf, pos + 2)
        n = _I16.unpack_from(buf, pos)[0]
        pos += 2
    if n < 0:
        return None, pos
    _need(buf, pos + n)
    try:
        return bytes(buf[pos : pos + n]).decode("utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise HeaderError(f"invalid UTF-8: {exc}") from exc


def produce_prefix(frame: memoryview | bytes, body_offset: int, version: int) -> ProducePrefix:
    """The fields before the first topic's partitions; HeaderError if they have not all arrived."""
    compact = version >= 9
    pos = body_offset
    txn: str | None = None
    if version >= 3:
        txn, pos = _string(frame, pos, compact)
    _need(frame, pos + 6)
    acks = _I16.unpack_from(frame, pos)[0]
    timeout_ms = _I32.unpack_from(frame, pos + 2)[0]
    pos += 6
    if compact:
        count, pos = read_uvarint(frame, pos)
        count -= 1
    else:
        _need(frame, pos + 4)
        count = _I32.unpack_from(frame, pos)[0]
        pos += 4
    name: str | None = None
    topic_id: UUID | None = None
    if count >= 1:
        if version >= 13:
            _need(frame, pos + 16)
            topic_id = UUID(bytes=bytes(frame[pos : pos + 16]))
        else:
            name, pos = _string(frame, pos, compact)
    return ProducePrefix(txn, acks, timeout_ms, count, name, topic_id)
