"""Walking Produce requests and Fetch responses for the audit log, without decoding their records.

The generic codec turns every partition's ``records`` into a ``bytes`` copy; for the two api keys
that carry the data (a 1 MiB Produce, a 1 MiB Fetch answer) that copy would be most of the audit
log's cost. These walkers read only the topic and partition headers and step over the record
bytes, counting records from the record-batch headers (``recordsCount`` at byte 57 of a magic-2
batch; one per legacy message). They run on the audit writer thread, never on the event loop.

Each returns ``[(key, partitions, bytes, records, error_codes)]`` per topic, where ``key`` is the
topic name (str) or id (UUID), and raises ``WireError`` on a frame it cannot follow.
"""

from __future__ import annotations

import struct
from uuid import UUID

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicFacts = tuple["str | UUID", int, int, int, list[int]]


class WireError(ValueError):
    """A frame shorter than its fields say, or otherwise not what its version promises."""


class _Reader:
    __slots__ = ("buf", "flex", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int, flex: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flex = flex

    def _need(self, n: int) -> int:
        p = self.pos
        if p + n > len(self.buf):
            raise WireError("frame ends early")
        self.pos = p + n
        return p

    def i16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._need(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._need(4))[0])

    def skip(self, n: int) -> None:
        self._need(n)

    def uvarint(self) -> int:
        shift = value = 0
        buf = self.buf
        while True:
            if self.pos >= len(buf):
                raise WireError("frame ends inside a varint")
            b = buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise WireError("varint too long")

    def length(self) -> int:
        """An array or nullable string/bytes length: -1 for null."""
        if self.flex:
            return self.uvarint() - 1
        return self.i32()

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flex else self.i16()
        if n < 0:
            return None
        p = self._need(n)
        return bytes(self.buf[p : p + n]).decode("utf-8", "replace")

    def uuid(self) -> UUID:
        p = self._need(16)
        return UUID(bytes=bytes(self.buf[p : p + 16]))

    def tagged(self) -> None:
        if self.flex:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.skip(self.uvarint())


def count_records(buf: bytes | memoryview, start: int, end: int) -> int:
    """Records in the record set ``buf[start:end]`` (batches' counts; 1 per legacy message)."""
    n = 0
    pos = start
    while pos + 17 <= end:
        size = int(_I32.unpack_from(buf, pos + 8)[0])
        if size <= 0:
            break
        if buf[pos + 16] >= 2:
            if pos + 61 > end:
                break
            n += int(_I32.unpack_from(buf, pos + 57)[0])
        else:
            n += 1
        pos += 12 + size
    return n


def produce_request_topics(frame: bytes | memoryview, body: int, version: int) -> list[TopicFacts]:
    """Per topic of a whole Produce request: (name or id, partitions, record bytes, records, [])."""
    r = _Reader(frame, body, version >= 9)
    if version >= 3:
        r.string()  # transactional_id
    r.skip(6)  # acks, timeout_ms
    topics: list[TopicFacts] = []
    for _ in range(max(r.length(), 0)):
        key: str | UUID = r.uuid() if version >= 13 else (r.string() or "")
        parts = nbytes = records = 0
        for _ in range(max(r.length(), 0)):
            r.skip(4)  # index
            size = r.length()
            if size > 0:
                start = r.pos
                r.skip(size)
                nbytes += size
                records += count_records(frame, start, start + size)
            r.tagged()
            parts += 1
        r.tagged()
        topics.append((key, parts, nbytes, records, []))
    return topics


def fetch_response_topics(frame: bytes | memoryview, body: int, version: int) -> tuple[int, list[TopicFacts]]:
    """A whole Fetch answer: its top-level error code and, per topic, (name or id, partitions,
    record bytes, records, distinct partition error codes in order)."""
    r = _Reader(frame, body, version >= 12)
    if version >= 1:
        r.skip(4)  # throttle_time_ms
    top = 0
    if version >= 7:
        top = r.i16()
        r.skip(4)  # session_id
    topics: list[TopicFacts] = []
    for _ in range(max(r.length(), 0)):
        key: str | UUID = r.uuid() if version >= 13 else (r.string() or "")
        parts = nbytes = records = 0
        codes: list[int] = []
        for _ in range(max(r.length(), 0)):
            r.skip(4)  # partition_index
            code = r.i16()
            if code not in codes:
                codes.append(code)
            r.skip(8 + (8 if version >= 4 else 0) + (8 if version >= 5 else 0))
            if version >= 4:
                for _ in range(max(r.length(), 0)):  # aborted_transactions (nullable)
                    r.skip(16)
                    r.tagged()
            if version >= 11:
                r.skip(4)  # preferred_read_replica
            size = r.length()
            if size > 0:
                start = r.pos
                r.skip(size)
                nbytes += size
                records += count_records(frame, start, start + size)
            r.tagged()
            parts += 1
        r.tagged()
        topics.append((key, parts, nbytes, records, codes))
    return top, topics
