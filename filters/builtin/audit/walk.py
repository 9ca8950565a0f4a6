"""Straight-line walkers of whole Produce, Fetch and Metadata frames, for the audit log's writer.

The audit log needs a few facts per topic (its name or id, how many partitions, record bytes and
records, error codes), not the messages. Decoding them whole with kgate's generated decoders built
an object per topic and partition, most of the writer thread's cost per event (bench/
audit_events.py; docs/performance.md, "Figures moved out of code comments"); these functions step
over the same bytes with local variables, one ``unpack_from`` or index per field, and build nothing
but the facts.

Exactness: each walks the *whole* message (every field of the version, to the end), so a frame
the generated decoder would reject as truncated is rejected here too (``WireError``, or
IndexError / struct.error from a read past the end), and the caller then builds the event the old
way (event.py): the event is the same whichever path made it (tests/filters/audit/
test_audit_walk.py compares both on every Produce, Fetch and Metadata frame of the recorded
corpus and on hand-made edge cases). A frame is only ever read, never copied (records are counted
in place, audit_wire.count_records). What these do not check, unlike the decoder: that strings
they step over (hosts, racks, error messages, a transactional id) are valid UTF-8; topic names
are decoded as strictly as the decoder does. A topic id of all zeroes is left to the decoder
path (``WireError``): there its entry falls back to the name field's default.

Each takes the frame (``bytes`` or ``memoryview``, size prefix included), the offset of the
body, and the api version; they are pure functions.
"""

from __future__ import annotations

import struct
from uuid import UUID

from kgate.codec.primitives import read_uvarint, skip_tagged
from kgate.filters.builtin.audit.wire import WireError, count_records

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_ZERO16 = bytes(16)
_UUIDS: dict[bytes, UUID] = {}  # raw id -> UUID (a UUID() is slow Python; a topic's id never changes)


def _len(buf: bytes | memoryview, p: int, flex: bool) -> tuple[int, int]:
    """An array or nullable bytes length (compact: varint - 1; classic: int32); -1 for null."""
    if flex:
        n = buf[p]
        if n < 0x80:
            return n - 1, p + 1
        n, p = read_uvarint(buf, p)
        return n - 1, p
    return _I32(buf, p)[0], p + 4


def _slen(buf: bytes | memoryview, p: int, flex: bool) -> tuple[int, int]:
    """A string length (compact: varint - 1; classic: int16); -1 for null."""
    if flex:
        n = buf[p]
        if n < 0x80:
            return n - 1, p + 1
        n, p = read_uvarint(buf, p)
        return n - 1, p
    return _I16(buf, p)[0], p + 2


def _name(buf: bytes | memoryview, p: int, flex: bool) -> tuple[str, int]:
    """A non-nullable string (a topic name), decoded strictly as the codec does."""
    n, p = _slen(buf, p, flex)
    if n < 0 or p + n > len(buf):
        raise WireError("bad topic name")
    return str(buf[p : p + n], "utf-8"), p + n


def _skip_str(buf: bytes | memoryview, p: int, flex: bool, nullable: bool) -> int:
    n, p = _slen(buf, p, flex)
    if n < -1 or (n == -1 and not nullable):
        raise WireError("bad string length")
    return p + max(n, 0)


def _uuid(buf: bytes | memoryview, p: int) -> UUID:
    raw = bytes(buf[p : p + 16])
    found = _UUIDS.get(raw)
    if found is None:
        if len(raw) != 16:
            raise WireError("frame ends early")
        if raw == _ZERO16:
            raise WireError("zero topic id")  # the decoder path knows what the entry's key is then
        if len(_UUIDS) >= 100_000:
            _UUIDS.clear()
        found = _UUIDS[raw] = UUID(bytes=raw)
    return found


def _count(buf: bytes | memoryview, p: int, flex: bool) -> tuple[int, int]:
    """A non-nullable array's length."""
    n, p = _len(buf, p, flex)
    if n < 0:
        raise WireError("null array")
    return n, p


def _end(buf: bytes | memoryview, p: int) -> None:
    if p > len(buf):
        raise WireError("frame ends early")


#: (client id, body offset) of a request, given its header version (1 or 2; 0 has no client id)
def request_header(buf: bytes | memoryview, header_version: int) -> tuple[str | None, int]:
    if header_version < 1:
        return None, 12
    n = _I16(buf, 12)[0]
    p = 14
    client_id = None
    if n >= 0:
        if p + n > len(buf):
            raise WireError("client_id runs past the end of the frame")
        client_id = str(buf[p : p + n], "utf-8", "replace")
        p += n
    if header_version >= 2:
        p = skip_tagged(buf, p)
    _end(buf, p)
    return client_id, p


#: per topic: (name or id, partitions, record bytes, records: -1 = not countable from the batch headers)
ProduceTopic = tuple["str | UUID", int, int, int]


def produce_request(buf: bytes | memoryview, p: int, v: int) -> list[ProduceTopic]:
    """Produce v3-13: per topic entry (name or id, partitions, record bytes, records)."""
    flex = v >= 9
    if flex:
        return _produce_request_flex(buf, p, v)
    p = _skip_str(buf, p, flex, True) + 6  # transactional_id, acks, timeout_ms
    end = len(buf)
    out: list[ProduceTopic] = []
    ntopics, p = _count(buf, p, flex)
    for _ in range(ntopics):
        key: str | UUID
        if v >= 13:
            key = _uuid(buf, p)
            p += 16
        else:
            key, p = _name(buf, p, flex)
        nparts, p = _count(buf, p, flex)
        nbytes = records = 0
        for _ in range(nparts):
            size, p = _len(buf, p + 4, flex)  # after the partition index
            if size > 0:
                if p + size > end:
                    raise WireError("records run past the end of the frame")
                nbytes += size
                counted = count_records(buf, p, p + size)
                records = -1 if counted < 0 or records < 0 else records + counted
                p += size
            elif size < -1:
                raise WireError("bad records length")
            if flex:
                p = skip_tagged(buf, p)
        if flex:
            p = skip_tagged(buf, p)
        out.append((key, nparts, nbytes, records))
    if flex:
        p = skip_tagged(buf, p)
    _end(buf, p)
    return out


def produce_response(buf: bytes | memoryview, p: int, v: int) -> list[tuple[str | UUID, list[int]]]:
    """Produce v3-13 answer: per topic entry (name or id, the partitions' error codes in order)."""
    flex = v >= 9
    if flex:
        return _produce_response_flex(buf, p, v)
    fixed = 8 + (8 if v >= 2 else 0) + (8 if v >= 5 else 0)  # base_offset, log_append_time, log_start
    out: list[tuple[str | UUID, list[int]]] = []
    ntopics, p = _count(buf, p, flex)
    for _ in range(ntopics):
        key: str | UUID
        if v >= 13:
            key = _uuid(buf, p)
            p += 16
        else:
            key, p = _name(buf, p, flex)
        nparts, p = _count(buf, p, flex)
        codes: list[int] = []
        for _ in range(nparts):
            codes.append(_I16(buf, p + 4)[0])
            p += 6 + fixed
            if v >= 8:
                nerr, p = _count(buf, p, flex)
                for _ in range(nerr):
                    p = _skip_str(buf, p + 4, flex, True)  # batch_index, message
                    if flex:
                        p = skip_tagged(buf, p)
                p = _skip_str(buf, p, flex, True)  # error_message
            if flex:
                p = skip_tagged(buf, p)
        if flex:
            p = skip_tagged(buf, p)
        out.append((key, codes))
    if v >= 1:
        p += 4  # throttle_time_ms
    if flex:
        p = skip_tagged(buf, p)
    _end(buf, p)
    return out


def fetch_request(buf: bytes | memoryview, p: int, v: int) -> list[tuple[str | UUID, int]]:
    """Fetch v4-18: per topic entry (name or id, partitions)."""
    flex = v >= 12
    if flex:
        return _fetch_request_flex(buf, p, v)
    p += (4 if v <= 14 else 0) + 8 + (4 if v >= 3 else 0) + (1 if v >= 4 else 0) + (8 if v >= 7 else 0)
    part = 4 + (4 if v >= 9 else 0) + 8 + (4 if v >= 12 else 0) + (8 if v >= 5 else 0) + 4
    out: list[tuple[str | UUID, int]] = []
    ntopics, p = _count(buf, p, flex)
    for _ in range(ntopics):
        key: str | UUID
        if v >= 13:
            key = _uuid(buf, p)
            p += 16
        else:
            key, p = _name(buf, p, flex)
        nparts, p = _count(buf, p, flex)
        if flex:
            for _ in range(nparts):
                p = skip_tagged(buf, p + part)
            p = skip_tagged(buf, p)
        else:
            p += nparts * part
        out.append((key, nparts))
    if v >= 7:  # forgotten_topics_data
        nforgot, p = _count(buf, p, flex)
        for _ in range(nforgot):
            if v >= 13:
                p += 16
            else:
                p = _skip_str(buf, p, flex, False)
            n, p = _count(buf, p, flex)
            p += 4 * n
            if flex:
                p = skip_tagged(buf, p)
    if v >= 11:
        p = _skip_str(buf, p, flex, False)  # rack_id
    if flex:
        p = skip_tagged(buf, p)
    _end(buf, p)
    return out


FetchTopic = tuple["str | UUID", int, int, int, list[int]]


def fetch_response(buf: bytes | memoryview, p: int, v: int) -> tuple[int, list[FetchTopic]]:  # noqa: C901 - straight-line walker
    """A whole Fetch v4-18 answer: its top-level error code and, per topic entry, (name or id,
    partitions, record bytes, records, distinct partition error codes in order)."""
    flex = v >= 12
    if flex:
        return _fetch_response_flex(buf, p, v)
    end = len(buf)
    p += 4  # throttle_time_ms
    top = 0
    if v >= 7:
        top = _I16(buf, p)[0]
        p += 6  # error_code, session_id
    fixed = 8 + 8 + (8 if v >= 5 else 0)  # high_watermark, last_stable_offset, log_start_offset
    out: list[FetchTopic] = []
    ntopics, p = _count(buf, p, flex)
    for _ in range(ntopics):
        key: str | UUID
        if v >= 13:
            key = _uuid(buf, p)
            p += 16
        else:
            key, p = _name(buf, p, flex)
        nparts, p = _count(buf, p, flex)
        nbytes = records = 0
        codes: list[int] = []
        for _ in range(nparts):
            code = _I16(buf, p + 4)[0]
            if code not in codes:
                codes.append(code)
            p += 6 + fixed
            naborted, p = _len(buf, p, flex)  # aborted_transactions (nullable)
            for _ in range(max(naborted, 0)):
                p += 16
                if flex:
                    p = skip_tagged(buf, p)
            if v >= 11:
                p += 4  # preferred_read_replica
            size, p = _len(buf, p, flex)
            if size > 0:
                if p + size > end:
                    raise WireError("records run past the end of the frame")
                nbytes += size
                counted = count_records(buf, p, p + size)
                records = -1 if counted < 0 or records < 0 else records + counted
                p += size
            elif size < -1:
                raise WireError("bad records length")
            if flex:
                p = skip_tagged(buf, p)
        if flex:
            p = skip_tagged(buf, p)
        out.append((key, nparts, nbytes, records, codes))
    if flex:
        p = skip_tagged(buf, p)
    _end(buf, p)
    return top, out


def metadata_request(buf: bytes | memoryview, p: int, v: int) -> list[str | UUID]:
    """Metadata v1-13 naming topics: per topic entry its id (when non-zero) or name; entries
    with neither are left out (as the decoder path does)."""
    flex = v >= 9
    out: list[str | UUID] = []
    ntopics, p = _len(buf, p, flex)
    for _ in range(max(ntopics, 0)):
        key: str | UUID | None = None
        if v >= 10:
            raw = bytes(buf[p : p + 16])
            p += 16
            if raw != _ZERO16:
                key = _uuid(buf, p - 16)
        n, p = _slen(buf, p, flex)
        if n < -1 or (n == -1 and v < 10):
            raise WireError("bad topic name")
        if n >= 0:
            if p + n > len(buf):
                raise WireError("frame ends early")
            name = str(buf[p : p + n], "utf-8")
            p += n
            if key is None:
                key = name
        if flex:
            p = skip_tagged(buf, p)
        if key is not None:
            out.append(key)
    p += (1 if v >= 4 else 0) + (1 if 8 <= v <= 10 else 0) + (1 if v >= 8 else 0)
    if flex:
        p = skip_tagged(buf, p)
    _end(buf, p)
    return out


def metadata_response(buf: bytes | memoryview, p: int, v: int) -> tuple[int, list[tuple[str | UUID | None, list[int]]]]:  # noqa: C901 - straight-line walker
    """A Metadata v1-13 answer: its top-level error code (v13+, else 0) and, per topic entry,
    (non-zero id, else name, else None; [topic error code, partition error codes...])."""
    flex = v >= 9
    if flex:
        return _metadata_response_flex(buf, p, v)
    if v >= 3:
        p += 4  # throttle_time_ms
    nbrokers, p = _count(buf, p, flex)
    for _ in range(nbrokers):
        p = _skip_str(buf, p + 4, flex, False) + 4  # node_id, host, port
        p = _skip_str(buf, p, flex, True)  # rack
        if flex:
            p = skip_tagged(buf, p)
    if v >= 2:
        p = _skip_str(buf, p, flex, True)  # cluster_id
    p += 4  # controller_id
    out: list[tuple[str | UUID | None, list[int]]] = []
    ntopics, p = _count(buf, p, flex)
    for _ in range(ntopics):
        codes = [_I16(buf, p)[0]]
        n, p = _slen(buf, p + 2, flex)
        if n < -1 or (n == -1 and v < 12):
            raise WireError("bad topic name")
        key: str | UUID | None = None
        if n >= 0:
            if p + n > len(buf):
                raise WireError("frame ends early")
            key = str(buf[p : p + n], "utf-8")
            p += n
        if v >= 10:
            if bytes(buf[p : p + 16]) != _ZERO16:
                key = _uuid(buf, p)
            p += 16
        p += 1  # is_internal
        nparts, p = _count(buf, p, flex)
        for _ in range(nparts):
            codes.append(_I16(buf, p)[0])
            p += 10 + (4 if v >= 7 else 0)  # error_code, partition_index, leader_id, leader_epoch
            for _ in range(3 if v >= 5 else 2):  # replica_nodes, isr_nodes, offline_replicas
                n, p = _count(buf, p, flex)
                p += 4 * n
            if flex:
                p = skip_tagged(buf, p)
        if v >= 8:
            p += 4  # topic_authorized_operations
        if flex:
            p = skip_tagged(buf, p)
        out.append((key, codes))
    if 8 <= v <= 10:
        p += 4  # cluster_authorized_operations
    top = 0
    if v >= 13:
        top = _I16(buf, p)[0]
        p += 2
    if flex:
        p = skip_tagged(buf, p)
    _end(buf, p)
    return top, out


# -- the flexible versions current clients send (Produce v9+, Fetch v12+, Metadata v9+), inlined:
# every compact length and tag section below 128 is one index (nearly all of them), and the
# generic walkers above are kept for the classic versions. ~2x cheaper than the generic walkers.


def _produce_request_flex(buf: bytes | memoryview, p: int, v: int) -> list[ProduceTopic]:  # noqa: C901 - straight-line walker
    end = len(buf)
    n = buf[p]  # transactional_id
    if n & 0x80:
        n, p = read_uvarint(buf, p)
    else:
        p += 1
    p += max(n - 1, 0) + 6  # the id, acks, timeout_ms
    out: list[ProduceTopic] = []
    ntopics = buf[p] - 1
    if ntopics >= 0x7F or ntopics < 0:
        ntopics, p = _count(buf, p, True)
    else:
        p += 1
    for _ in range(ntopics):
        key: str | UUID
        if v >= 13:
            key = _uuid(buf, p)
            p += 16
        else:
            n = buf[p] - 1
            if n >= 0x7F:
                n, p = _slen(buf, p, True)
            else:
                p += 1
            if n < 0 or p + n > end:
                raise WireError("bad topic name")
            key = str(buf[p : p + n], "utf-8")
            p += n
        nparts = buf[p] - 1
        if nparts >= 0x7F or nparts < 0:
            nparts, p = _count(buf, p, True)
        else:
            p += 1
        nbytes = records = 0
        for _ in range(nparts):
            p += 4  # index
            size = buf[p]
            if size & 0x80:
                size, p = read_uvarint(buf, p)
            else:
                p += 1
            size -= 1
            if size > 0:
                if p + size > end:
                    raise WireError("records run past the end of the frame")
                nbytes += size
                counted = count_records(buf, p, p + size)
                records = -1 if counted < 0 or records < 0 else records + counted
                p += size
            if buf[p]:
                p = skip_tagged(buf, p)
            else:
                p += 1
        if buf[p]:
            p = skip_tagged(buf, p)
        else:
            p += 1
        out.append((key, nparts, nbytes, records))
    if buf[p]:
        p = skip_tagged(buf, p)
    else:
        p += 1
    if p > end:
        raise WireError("frame ends early")
    return out


def _key_flex(buf: bytes | memoryview, p: int, by_id: bool) -> tuple[str | UUID, int]:
    """A topic entry's id (v13+ of Produce and Fetch) or compact name."""
    if by_id:
        return _uuid(buf, p), p + 16
    n = buf[p] - 1
    if n >= 0x7F:
        n, p = _slen(buf, p, True)
    else:
        p += 1
    if n < 0 or p + n > len(buf):
        raise WireError("bad topic name")
    return str(buf[p : p + n], "utf-8"), p + n


def _produce_response_flex(buf: bytes | memoryview, p: int, v: int) -> list[tuple[str | UUID, list[int]]]:
    out: list[tuple[str | UUID, list[int]]] = []
    ntopics = buf[p] - 1
    if ntopics >= 0x7F or ntopics < 0:
        ntopics, p = _count(buf, p, True)
    else:
        p += 1
    by_id = v >= 13
    for _ in range(ntopics):
        key, p = _key_flex(buf, p, by_id)
        nparts = buf[p] - 1
        if nparts >= 0x7F or nparts < 0:
            nparts, p = _count(buf, p, True)
        else:
            p += 1
        codes: list[int] = []
        for _ in range(nparts):
            codes.append(_I16(buf, p + 4)[0])
            p += 30  # index, error_code, base_offset, log_append_time_ms, log_start_offset
            nerr = buf[p] - 1  # record_errors
            if nerr:
                nerr, p = _count(buf, p, True)
                for _ in range(nerr):
                    p = _skip_str(buf, p + 4, True, True)  # batch_index, message
                    p = skip_tagged(buf, p)
            else:
                p += 1
            n = buf[p]  # error_message
            if n & 0x80:
                n, p = read_uvarint(buf, p)
            else:
                p += 1
            p += max(n - 1, 0)
            if buf[p]:
                p = skip_tagged(buf, p)
            else:
                p += 1
        if buf[p]:
            p = skip_tagged(buf, p)
        else:
            p += 1
        out.append((key, codes))
    p += 4  # throttle_time_ms
    if buf[p]:
        p = skip_tagged(buf, p)
    else:
        p += 1
    if p > len(buf):
        raise WireError("frame ends early")
    return out


def _fetch_request_flex(buf: bytes | memoryview, p: int, v: int) -> list[tuple[str | UUID, int]]:
    p += (4 if v <= 14 else 0) + 21  # replica_id, max_wait, min/max bytes, isolation, session
    part = 32 if v >= 12 else 28  # partition, leader epoch, fetch offset, last epoch, log start, max bytes
    out: list[tuple[str | UUID, int]] = []
    ntopics = buf[p] - 1
    if ntopics >= 0x7F or ntopics < 0:
        ntopics, p = _count(buf, p, True)
    else:
        p += 1
    by_id = v >= 13
    for _ in range(ntopics):
        key, p = _key_flex(buf, p, by_id)
        nparts = buf[p] - 1
        if nparts >= 0x7F or nparts < 0:
            nparts, p = _count(buf, p, True)
        else:
            p += 1
        for _ in range(nparts):
            p += part
            if buf[p]:
                p = skip_tagged(buf, p)
            else:
                p += 1
        if buf[p]:
            p = skip_tagged(buf, p)
        else:
            p += 1
        out.append((key, nparts))
    nforgot, p = _count(buf, p, True)
    for _ in range(nforgot):
        p = p + 16 if by_id else _skip_str(buf, p, True, False)
        n, p = _count(buf, p, True)
        p = skip_tagged(buf, p + 4 * n)
    p = _skip_str(buf, p, True, False)  # rack_id
    p = skip_tagged(buf, p)
    if p > len(buf):
        raise WireError("frame ends early")
    return out


def _fetch_response_flex(buf: bytes | memoryview, p: int, v: int) -> tuple[int, list[FetchTopic]]:
    end = len(buf)
    top = _I16(buf, p + 4)[0]
    p += 10  # throttle_time_ms, error_code, session_id
    out: list[FetchTopic] = []
    ntopics = buf[p] - 1
    if ntopics >= 0x7F or ntopics < 0:
        ntopics, p = _count(buf, p, True)
    else:
        p += 1
    by_id = v >= 13
    for _ in range(ntopics):
        key, p = _key_flex(buf, p, by_id)
        nparts = buf[p] - 1
        if nparts >= 0x7F or nparts < 0:
            nparts, p = _count(buf, p, True)
        else:
            p += 1
        nbytes = records = 0
        codes: list[int] = []
        for _ in range(nparts):
            code = _I16(buf, p + 4)[0]
            if code not in codes:
                codes.append(code)
            p += 30  # partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
            naborted = buf[p] - 1  # aborted_transactions (nullable)
            if naborted > 0:
                naborted, p = _len(buf, p, True)
                for _ in range(naborted):
                    p = skip_tagged(buf, p + 16)
            else:
                p += 1
            p += 4  # preferred_read_replica
            size = buf[p]
            if size & 0x80:
                size, p = read_uvarint(buf, p)
            else:
                p += 1
            size -= 1
            if size > 0:
                if p + size > end:
                    raise WireError("records run past the end of the frame")
                nbytes += size
                counted = count_records(buf, p, p + size)
                records = -1 if counted < 0 or records < 0 else records + counted
                p += size
            if buf[p]:
                p = skip_tagged(buf, p)
            else:
                p += 1
        if buf[p]:
            p = skip_tagged(buf, p)
        else:
            p += 1
        out.append((key, nparts, nbytes, records, codes))
    if buf[p]:
        p = skip_tagged(buf, p)
    else:
        p += 1
    if p > end:
        raise WireError("frame ends early")
    return top, out


def _metadata_response_flex(  # noqa: C901 - straight-line walker
    buf: bytes | memoryview, p: int, v: int
) -> tuple[int, list[tuple[str | UUID | None, list[int]]]]:
    end = len(buf)
    p += 4  # throttle_time_ms
    nbrokers, p = _count(buf, p, True)
    for _ in range(nbrokers):
        p = _skip_str(buf, p + 4, True, False) + 4  # node_id, host, port
        p = _skip_str(buf, p, True, True)  # rack
        p = p + 1 if buf[p] == 0 else skip_tagged(buf, p)
    p = _skip_str(buf, p, True, True) + 4  # cluster_id, controller_id
    out: list[tuple[str | UUID | None, list[int]]] = []
    ntopics, p = _count(buf, p, True)
    ids = v >= 10
    for _ in range(ntopics):
        codes = [_I16(buf, p)[0]]
        n = buf[p + 2]
        if n & 0x80:
            n, p = read_uvarint(buf, p + 2)
        else:
            p += 3
        n -= 1
        if n < -1 or (n == -1 and v < 12):
            raise WireError("bad topic name")
        key: str | UUID | None = None
        if n >= 0:
            if p + n > end:
                raise WireError("frame ends early")
            key = str(buf[p : p + n], "utf-8")
            p += n
        if ids:
            if buf[p : p + 16] != _ZERO16:
                key = _uuid(buf, p)
            p += 16
        p += 1  # is_internal
        nparts = buf[p] - 1
        if nparts >= 0x7F or nparts < 0:
            nparts, p = _count(buf, p, True)
        else:
            p += 1
        for _ in range(nparts):
            codes.append(_I16(buf, p)[0])
            p += 14  # error_code, partition_index, leader_id, leader_epoch
            for _ in range(3):  # replica_nodes, isr_nodes, offline_replicas
                n = buf[p] - 1
                if n >= 0x7F or n < 0:
                    n, p = _count(buf, p, True)
                else:
                    p += 1
                p += 4 * n
            p = p + 1 if buf[p] == 0 else skip_tagged(buf, p)
        p += 4  # topic_authorized_operations
        p = p + 1 if buf[p] == 0 else skip_tagged(buf, p)
        out.append((key, codes))
    if v <= 10:
        p += 4  # cluster_authorized_operations
    top = 0
    if v >= 13:
        top = _I16(buf, p)[0]
        p += 2
    p = skip_tagged(buf, p)
    if p > end:
        raise WireError("frame ends early")
    return top, out
