"""Read the start of a Produce request before its records have arrived.

A Produce request lists, per topic, its partitions and their records; the records are nearly
all of its bytes. A filter that decides by topic alone can answer from the fields before the
first topic's partitions, when the request names a single topic (a second topic's name would
only come after the first one's records). This module reads exactly those fields from a frame
prefix, so the rest of the request can stream on while it is still arriving.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from struct import Struct
from uuid import UUID

from kgate.codec.headers import HeaderError, read_uvarint

_I16 = Struct(">h")
_I32 = Struct(">i")
_ACKS_TIMEOUT = Struct(">hi")


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is slower, and every peeked Produce makes one
class ProducePrefix:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_count: int
    topic_name: str | None  # versions 0-12
    topic_id: UUID | None  # versions 13+


def _string(buf: memoryview | bytes, pos: int, compact: bool) -> tuple[str | None, int]:
    """A (compact) nullable string at ``pos``; IndexError / struct.error when it has not all arrived."""
    if compact:
        n = buf[pos]
        if n & 0x80:  # a length of 127 or more: rare for a topic name or a transactional id
            n, pos = read_uvarint(buf, pos)
        else:
            pos += 1
        n -= 1
    else:
        n = _I16.unpack_from(buf, pos)[0]
        pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise HeaderError("Produce prefix not complete yet")
    return str(buf[pos:end], "utf-8"), end


def produce_prefix(frame: memoryview | bytes, body_offset: int, version: int) -> ProducePrefix:
    """The fields before the first topic's partitions; HeaderError if they have not all arrived.

    Runs for every peeked Produce, so the common case reads each field inline (one-byte varints,
    a short read caught once as IndexError / struct.error below): about half the bytecodes of
    reading each field through a helper (docs/performance.md, "issue 9's unexplained Produce
    cost", and "Figures moved out of code comments").
    """
    try:
        compact = version >= 9
        pos = body_offset
        txn: str | None = None
        if version >= 3:
            txn, pos = _string(frame, pos, compact)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
        pos += 6
        if compact:
            count = frame[pos]
            if count & 0x80:
                count, pos = read_uvarint(frame, pos)
            else:
                pos += 1
            count -= 1
        else:
            count = _I32.unpack_from(frame, pos)[0]
            pos += 4
        name: str | None = None
        topic_id: UUID | None = None
        if count >= 1:
            if version >= 13:
                if pos + 16 > len(frame):
                    raise HeaderError("Produce prefix not complete yet")
                topic_id = UUID(bytes=bytes(frame[pos : pos + 16]))
            else:
                name, pos = _string(frame, pos, compact)
    except (IndexError, struct.error) as exc:
        raise HeaderError("Produce prefix not complete yet") from exc
    except UnicodeDecodeError as exc:
        raise HeaderError(f"invalid UTF-8: {exc}") from exc
    return ProducePrefix(txn, acks, timeout_ms, count, name, topic_id)
