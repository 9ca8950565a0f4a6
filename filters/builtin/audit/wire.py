"""Reading frames that passed through kgate in pieces, and counting records, for the audit log
(and, without the record counts, for the per-topic metrics: proxy/control/topic_metrics.py).

A whole frame is read with the generated decoder (it is the fastest reader kgate has, and slices
``records`` as memoryviews). A Produce request or Fetch answer larger than one read streams
through kgate and is never held whole: the audit log gets the pieces it was forwarded in, and these
walkers read the topic and partition headers across them (``Chunks``), stepping over the records
without joining them. Records are counted from the record-batch headers (``recordsCount`` at byte
57 of a magic-2 batch; one per legacy message). All of it runs on the audit writer thread.

Each returns ``[(key, partitions, bytes, records, error_codes)]`` per topic, where ``key`` is the
topic name (str) or id (UUID), and raises ``WireError`` on a frame it cannot follow.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from typing import Any, overload
from uuid import UUID

from kgate.codec.primitives import read_uvarint, skip_tagged

TopicFacts = tuple["str | UUID", int, int, int, list[int]]


class WireError(ValueError):
    """A frame shorter than its fields say, or otherwise not what its version promises."""


class Chunks:
    """A frame that arrived as several pieces (an answer that streamed through kgate), read in
    place: the pieces are the very buffers kgate forwarded, and joining them would copy every
    record byte to read a few hundred bytes of headers (docs/performance.md, "Figures moved out of
    code comments")."""

    __slots__ = ("_last", "_len", "_pieces", "_starts")

    def __init__(self, pieces: list[bytes | memoryview]) -> None:
        self._pieces = pieces
        self._starts: list[int] = []
        pos = 0
        for piece in pieces:
            self._starts.append(pos)
            pos += len(piece)
        self._len = pos
        self._last = 0  # the piece the previous read was in (reads mostly move forward)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytes: ...
    def __getitem__(self, key: int | slice) -> int | bytes:
        """A byte (as bytes[i] gives it) or a copy of a range, so that the straight-line walkers
        (walk.py) read a streamed Produce request as they read a whole one: the few bytes
        of headers between records, one index each, mostly within the piece read last."""
        if type(key) is int:
            i = self._last
            off = key - self._starts[i]
            piece = self._pieces[i]
            if 0 <= off < len(piece):
                return piece[off]
            if not 0 <= key < self._len:
                raise IndexError("frame ends early")
            return self.get(key, 1)[0]
        assert isinstance(key, slice)
        start = key.start or 0
        stop = self._len if key.stop is None else min(key.stop, self._len)
        return bytes(self.get(start, stop - start)) if stop > start else b""

    def unpack(self, fmt: struct.Struct, pos: int) -> tuple[Any, ...]:
        """``fmt.unpack_from`` at ``pos``, in place when it lies within one piece (the usual case)."""
        i = self._last
        off = pos - self._starts[i]
        piece = self._pieces[i]
        if 0 <= off and off + fmt.size <= len(piece):
            return fmt.unpack_from(piece, off)
        return fmt.unpack(self.get(pos, fmt.size))

    def get(self, pos: int, n: int) -> bytes | memoryview:
        i = self._last
        if not self._starts[i] <= pos < self._starts[i] + len(self._pieces[i]):
            i = self._last = bisect_right(self._starts, pos) - 1
        off = pos - self._starts[i]
        piece = self._pieces[i]
        if off + n <= len(piece):
            return piece[off : off + n]
        out = bytearray()
        while n > 0:
            if i >= len(self._pieces):
                raise WireError("frame ends early")
            piece = self._pieces[i]
            take = min(n, len(piece) - off)
            out += piece[off : off + take]
            n -= take
            i += 1
            off = 0
        return bytes(out)


Buffer = bytes | memoryview | Chunks
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Reader:
    """Kafka primitives over one contiguous frame: direct indexing and ``unpack_from``.

    Every field read is Python, so each is kept to a couple of operations: a Metadata answer
    walked this way costs about a fifth of its generic decode.
    """

    __slots__ = ("buf", "end", "flex", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int, flex: bool) -> None:
        self.buf = buf
        self.end = len(buf)
        self.pos = pos
        self.flex = flex

    def _need(self, n: int) -> int:
        p = self.pos
        if p + n > self.end:
            raise WireError("frame ends early")
        self.pos = p + n
        return p

    def i16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._need(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._need(4))[0])

    def skip(self, n: int) -> None:
        p = self.pos + n
        if p > self.end:
            raise WireError("frame ends early")
        self.pos = p

    def byte(self) -> int:
        return int(self.buf[self._need(1)])

    def uvarint(self) -> int:
        b = self.byte()
        if b < 0x80:  # lengths and tag counts below 128: nearly all of them
            return b
        value, shift = b & 0x7F, 7
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:  # five bytes at most, as the codec (and Kafka) allow
                raise WireError("varint too long")

    def length(self) -> int:
        """An array or nullable string/bytes length: -1 for null."""
        if self.flex:
            return self.uvarint() - 1
        return self.i32()

    def raw(self, n: int) -> bytes:
        p = self._need(n)
        return bytes(self.buf[p : p + n])

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flex else self.i16()
        if n < 0:
            return None
        return self.raw(n).decode("utf-8", "replace")

    def uuid(self) -> UUID:
        return UUID(bytes=self.raw(16))

    def tagged(self) -> None:
        if self.flex:
            count = self.uvarint()
            for _ in range(count):
                self.uvarint()
                self.skip(self.uvarint())


class _ChunkReader(_Reader):
    """The same primitives over an answer's pieces (``Chunks``)."""

    __slots__ = ("chunks",)

    def __init__(self, chunks: Chunks, pos: int, flex: bool) -> None:
        super().__init__(b"", pos, flex)
        self.chunks = chunks
        self.end = len(chunks)

    def i16(self) -> int:
        return int(self.chunks.unpack(_I16, self._need(2))[0])

    def i32(self) -> int:
        return int(self.chunks.unpack(_I32, self._need(4))[0])

    def byte(self) -> int:
        return int(self.chunks.get(self._need(1), 1)[0])

    def raw(self, n: int) -> bytes:
        return bytes(self.chunks.get(self._need(n), n))


def _reader(buf: Buffer, pos: int, flex: bool) -> _Reader:
    return _ChunkReader(buf, pos, flex) if isinstance(buf, Chunks) else _Reader(buf, pos, flex)


def body_offset(buf: Buffer, header_version: int) -> int:
    """Where a response's body starts (after the correlation id, and the tagged fields of header v1)."""
    if header_version < 1:
        return 8
    if not isinstance(buf, Chunks) and len(buf) > 8 and buf[8] == 0:
        return 9  # no tagged fields: nearly every answer
    r = _reader(buf, 8, True)
    if header_version >= 1:
        r.tagged()
    return r.pos


def request_body_offset(buf: Buffer, header_version: int) -> int:
    """Where a request's body starts: after api key, version, correlation id, client id (a
    nullable int16-length string in every header version) and, in header v2, tagged fields."""
    if not isinstance(buf, Chunks):
        try:
            n = _I16.unpack_from(buf, 12)[0]
            pos = 14 + max(n, 0)
            if header_version >= 2:
                pos = pos + 1 if buf[pos] == 0 else skip_tagged(buf, pos)
        except (struct.error, IndexError):
            raise WireError("frame ends early") from None
        return pos
    r = _reader(buf, 12, False)
    n = r.i16()
    if n > 0:
        r.skip(n)
    if header_version >= 2:
        r.flex = True
        r.tagged()
    return r.pos


# batchLength (int32 at 8), magic (int8 at 16), attributes (int16 at 21), recordsCount (int32 at 57)
# of a record batch, in one unpack: a Python loop over batches is the audit log's cost per byte of
# small records, and one ``unpack_from`` per batch is ~4x cheaper than slices and ``int.from_bytes``
_BATCH = struct.Struct(">8xi4xb4xh34xi")
#: batchLength (int32 at 8), magic (int8 at 16): all a set shorter than a batch header is read for
_HEAD = struct.Struct(">8xi4xb")
#: attributes bit of a control batch (transaction markers): not records an application receives
CONTROL = 0x20
#: attributes bits of a legacy message's compression: a wrapper whose inner messages are not counted
_LEGACY_CODEC = 0x07


def count_records(buf: Buffer, start: int, end: int) -> int:
    """Records in the record set ``buf[start:end]``, from the batch headers only, or -1 when the
    count cannot be known without decompressing (a compressed legacy message set, a negative count).

    Every batch is counted, however many (one batch per record is common: idempotent producers
    with linger 0, brokers such as Tansu answering one batch per record). Control batches
    (transaction markers) are not counted: Kafka never hands them to an application. A batch cut
    short at the end of the set (a Fetch answer trimmed to its byte limit) is not counted either:
    the client drops it and fetches it again.
    """
    n = 0
    pos = start
    chunks = buf if isinstance(buf, Chunks) else None
    flat = None if isinstance(buf, Chunks) else buf
    unpack = _BATCH.unpack_from
    while pos + 17 <= end:
        if pos + 61 <= end:
            if flat is not None:
                size, magic, attributes, count = unpack(flat, pos)
            elif chunks is not None:
                # the answer's pieces are read in place when the header lies within one (inlined:
                # a method call per batch was a third of the cost with one batch per record)
                i = chunks._last
                off = pos - chunks._starts[i]
                piece = chunks._pieces[i]
                if 0 <= off and off + 61 <= len(piece):
                    size, magic, attributes, count = unpack(piece, off)
                else:
                    size, magic, attributes, count = _BATCH.unpack(chunks.get(pos, 61))
        else:  # room for a legacy message's header only
            size, magic = _HEAD.unpack(bytes(buf[pos : pos + 17]))
            attributes = count = 0
        stop = pos + 12 + size
        if size <= 0 or stop > end:
            break  # a partial batch (the end of a trimmed Fetch answer) or padding
        if magic >= 2:
            if count < 0:
                return -1
            if not attributes & CONTROL:
                n += count
        else:
            if buf[pos + 17] & _LEGACY_CODEC:  # (a whole message is longer than 17 bytes)
                return -1  # a compressed wrapper: its inner messages are inside the compressed value
            n += 1
        pos = stop
    return n


def produce_request_topics(frame: Buffer, body: int, version: int, with_records: bool = True) -> list[TopicFacts]:
    """Per topic of a whole Produce request: (name or id, partitions, record bytes, records, []).

    ``with_records=False``: no record count (0), only the sizes: what the per-topic metrics need, and
    what keeps their walk on the event loop to the topic and partition headers."""
    r = _reader(frame, body, version >= 9)
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
                if with_records:
                    counted = count_records(frame, start, start + size)
                    records = -1 if counted < 0 or records < 0 else records + counted
            r.tagged()
            parts += 1
        r.tagged()
        topics.append((key, parts, nbytes, records, []))
    return topics


def fetch_response_topics(
    frame: Buffer, body: int, version: int, with_records: bool = True
) -> tuple[int, list[TopicFacts]]:
    """A whole Fetch answer: its top-level error code and, per topic, (name or id, partitions,
    record bytes, records, distinct partition error codes in order). ``with_records=False``: as for
    ``produce_request_topics``."""
    r = _reader(frame, body, version >= 12)
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
                if with_records:
                    counted = count_records(frame, start, start + size)
                    records = -1 if counted < 0 or records < 0 else records + counted
            r.tagged()
            parts += 1
        r.tagged()
        topics.append((key, parts, nbytes, records, codes))
    return top, topics


# -- per-topic record bytes of a contiguous frame, fast (the per-topic metrics, on the event loop)
#
# The same walk as ``produce_request_topics`` / ``fetch_response_topics`` (tests/filters/audit/
# test_audit_wire_fast.py checks they agree over every version), written out with the field reads
# inline instead of one method call each, well under half the generic walk's CPU for a Produce
# or a Fetch answer (docs/performance.md, "Figures moved out of code comments"). Only for a frame
# held whole; one that streamed through in pieces takes the generic walk over ``Chunks``.

_i16 = _I16.unpack_from
_i32 = _I32.unpack_from


def _length_at(buf: bytes | memoryview, pos: int, flex: bool) -> tuple[int, int]:
    """An array or nullable bytes length (-1 for null) and the position after it."""
    if flex:
        b = buf[pos]
        if b < 0x80:
            return b - 1, pos + 1
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return _i32(buf, pos)[0], pos + 4


def _key_at(buf: bytes | memoryview, pos: int, flex: bool, by_id: bool) -> tuple[str | UUID, int]:
    """A topic's id (v13+) or name, and the position after it."""
    if by_id:
        return UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    if flex:
        n, pos = _length_at(buf, pos, True)
    else:
        n = _i16(buf, pos)[0]
        pos += 2
    if n <= 0:
        return "", pos
    return str(buf[pos : pos + n], "utf-8", "replace"), pos + n


def produce_topic_bytes(buf: bytes | memoryview, pos: int, version: int) -> list[tuple[str | UUID, int]]:
    """Per topic of a whole Produce request (``pos``: its body): (name or id, record bytes)."""
    flex, by_id = version >= 9, version >= 13
    try:
        if version >= 3:  # transactional_id
            if flex:
                n, pos = _length_at(buf, pos, True)
            else:
                n, pos = _i16(buf, pos)[0], pos + 2
            if n > 0:
                pos += n
        count, pos = _length_at(buf, pos + 6, flex)  # after acks, timeout_ms
        out: list[tuple[str | UUID, int]] = []
        for _ in range(count):
            key, pos = _key_at(buf, pos, flex, by_id)
            parts, pos = _length_at(buf, pos, flex)
            nbytes = 0
            for _ in range(parts):
                size, pos = _length_at(buf, pos + 4, flex)  # after index
                if size > 0:
                    nbytes += size
                    pos += size
                if flex:
                    pos = pos + 1 if buf[pos] == 0 else skip_tagged(buf, pos)
            if flex:
                pos = pos + 1 if buf[pos] == 0 else skip_tagged(buf, pos)
            out.append((key, nbytes))
    except (struct.error, IndexError) as exc:
        raise WireError(f"frame ends early: {exc}") from None
    if pos > len(buf):
        raise WireError("frame ends early")
    return out


def fetch_topic_bytes(buf: bytes | memoryview, pos: int, version: int) -> list[tuple[str | UUID, int]]:
    """Per topic of a whole Fetch answer (``pos``: its body): (name or id, record bytes)."""
    flex, by_id = version >= 12, version >= 13
    # fixed fields of a partition after its index and error code, before aborted_transactions
    fixed = 8 + (8 if version >= 4 else 0) + (8 if version >= 5 else 0)
    try:
        pos += (4 if version >= 1 else 0) + (6 if version >= 7 else 0)  # throttle; error_code, session_id
        count, pos = _length_at(buf, pos, flex)
        out: list[tuple[str | UUID, int]] = []
        for _ in range(count):
            key, pos = _key_at(buf, pos, flex, by_id)
            parts, pos = _length_at(buf, pos, flex)
            nbytes = 0
            for _ in range(parts):
                pos += 6 + fixed  # partition_index, error_code, watermarks
                if version >= 4:
                    aborted, pos = _length_at(buf, pos, flex)
                    for _ in range(aborted):
                        pos += 16
                        if flex:
                            pos = pos + 1 if buf[pos] == 0 else skip_tagged(buf, pos)
                if version >= 11:
                    pos += 4  # preferred_read_replica
                size, pos = _length_at(buf, pos, flex)
                if size > 0:
                    nbytes += size
                    pos += size
                if flex:
                    pos = pos + 1 if buf[pos] == 0 else skip_tagged(buf, pos)
            if flex:
                pos = pos + 1 if buf[pos] == 0 else skip_tagged(buf, pos)
            out.append((key, nbytes))
    except (struct.error, IndexError) as exc:
        raise WireError(f"frame ends early: {exc}") from None
    if pos > len(buf):
        raise WireError("frame ends early")
    return out
