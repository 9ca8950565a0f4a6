"""Kafka record batches (magic 2): enough to write and read kgate's own small topics.

Clients' records pass through kgate as opaque bytes and are never decoded here: this module is
for the few topics kgate keeps for itself (the internal-topic marks, filters.builtin.topic_marks),
which it produces and fetches over its own connection. So it writes uncompressed batches only,
and reads uncompressed and gzip ones (what a compacting broker may leave of kgate's own writes);
other codecs raise ``RecordsError`` rather than being guessed at.

Layout (Kafka's ``DefaultRecordBatch``): a 61-byte header (base offset, length, leader epoch,
magic, CRC-32C of everything after the CRC, attributes, deltas, timestamps, producer fields,
count), then records, each a zigzag-varint length and ``attributes, timestamp delta, offset
delta, key, value, headers`` with varint lengths (-1: null).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kgate.codec.errors import CodecError
from kgate.codec.primitives import read_varlong, varlong_bytes

MAGIC = 2
_HEADER = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count
HEADER_SIZE = _HEADER.size  # 61
_CRC_FROM = 21  # the CRC covers attributes (at byte 21) to the end
_COMPRESSION_MASK = 0x07
_CONTROL = 0x20
_GZIP = 1


class RecordsError(ValueError):
    """A record batch kgate cannot read (corrupt, another magic, an unsupported codec)."""


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli), the checksum of record batches. Pure Python, slow per byte but fine
    for kgate's own batches of a few hundred bytes (docs/performance.md, "Figures moved out of code
    comments")."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in bytes(data):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _read_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    """codec.primitives.read_varlong, its errors as RecordsError (a record's bytes came from a client)."""
    try:
        return read_varlong(buf, pos)
    except IndexError:
        raise RecordsError("truncated varint in a record") from None
    except CodecError as exc:
        raise RecordsError(f"{exc} in a record") from None


def _bytes_field(value: bytes | None) -> bytes:
    return varlong_bytes(-1) if value is None else varlong_bytes(len(value)) + value


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    timestamp_ms: int,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One uncompressed batch of ``(key, value)`` records (value None: a tombstone)."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        rec = b"".join(
            (b"\x00", varlong_bytes(0), varlong_bytes(delta), _bytes_field(key), _bytes_field(value), varlong_bytes(0))
        )
        body += varlong_bytes(len(rec))
        body += rec
    length = HEADER_SIZE - 12 + len(body)
    head = bytearray(
        _HEADER.pack(
            base_offset,
            length,
            -1,
            MAGIC,
            0,
            0,
            len(records) - 1,
            timestamp_ms,
            timestamp_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    crc = crc32c(bytes(head[_CRC_FROM:]) + bytes(body))
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + bytes(body)


def decode_batches(data: bytes | memoryview | None, *, verify_crc: bool = True) -> list[Record]:
    """The data records in ``data`` (a Fetch partition's ``records``), in offset order.

    Control batches (transaction markers) are skipped. A batch cut off at the end is ignored:
    a broker may return a partial last batch when it hits the fetch size, and the next Fetch
    from the last offset read gets it whole.
    """
    if not data:
        return []
    buf = bytes(data)
    out: list[Record] = []
    pos = 0
    while pos + 12 <= len(buf):
        base_offset, length = struct.unpack_from(">qi", buf, pos)
        end = pos + 12 + length
        if length < HEADER_SIZE - 12:
            raise RecordsError(f"record batch at offset {base_offset} claims {length} bytes")
        if end > len(buf):
            break  # partial last batch
        magic = buf[pos + 16]
        if magic != MAGIC:
            raise RecordsError(f"record batch at offset {base_offset} has magic {magic}, kgate reads magic 2 only")
        (
            _,
            _,
            _,
            _,
            crc,
            attributes,
            _,
            base_ts,
            _,
            _,
            _,
            _,
            count,
        ) = _HEADER.unpack_from(buf, pos)
        if verify_crc and crc32c(memoryview(buf)[pos + _CRC_FROM : end]) != crc:
            raise RecordsError(f"record batch at offset {base_offset} fails its CRC-32C")
        pos, batch_start = end, pos + HEADER_SIZE
        if attributes & _CONTROL:
            continue
        payload = buf[batch_start:end]
        codec = attributes & _COMPRESSION_MASK
        if codec == _GZIP:
            try:
                payload = zlib.decompress(payload, 16 + zlib.MAX_WBITS)
            except zlib.error as exc:
                raise RecordsError(f"record batch at offset {base_offset}: bad gzip data ({exc})") from exc
        elif codec != 0:
            raise RecordsError(f"record batch at offset {base_offset} uses compression codec {codec}")
        out.extend(_records(payload, count, base_offset, base_ts))
    return out


def next_offset(data: bytes | memoryview | None) -> int | None:
    """The offset after the last complete batch in ``data``; None when it holds no complete batch.

    A reader continues from here, not from its last data record + 1: a batch can end in offsets
    that hold no data record for it (a control batch, records removed by compaction, whose batch
    header keeps ``last offset delta``), and fetching from the last record + 1 would return the
    same batch again forever.
    """
    if not data:
        return None
    buf = bytes(data)
    pos = 0
    found: int | None = None
    while pos + HEADER_SIZE <= len(buf):
        base_offset, length = struct.unpack_from(">qi", buf, pos)
        end = pos + 12 + length
        if length < HEADER_SIZE - 12 or end > len(buf):
            break
        (last_delta,) = struct.unpack_from(">i", buf, pos + 23)
        found = base_offset + last_delta + 1
        pos = end
    return found


def _records(payload: bytes, count: int, base_offset: int, base_ts: int) -> Iterable[Record]:
    pos = 0
    for _ in range(count):
        size, pos = _read_zigzag(payload, pos)
        end = pos + size
        if size < 0 or end > len(payload):
            raise RecordsError(f"record in batch at offset {base_offset} overruns its batch")
        pos += 1  # attributes
        ts_delta, pos = _read_zigzag(payload, pos)
        off_delta, pos = _read_zigzag(payload, pos)
        key, pos = _read_bytes(payload, pos, end)
        value, pos = _read_bytes(payload, pos, end)
        n_headers, pos = _read_zigzag(payload, pos)
        headers = []
        for _ in range(max(n_headers, 0)):
            hkey, pos = _read_bytes(payload, pos, end)
            hvalue, pos = _read_bytes(payload, pos, end)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hvalue))
        if pos != end:
            raise RecordsError(f"record in batch at offset {base_offset} has {end - pos} stray bytes")
        yield Record(base_offset + off_delta, base_ts + ts_delta, key, value, tuple(headers))


def _read_bytes(payload: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _read_zigzag(payload, pos)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise RecordsError("record field overruns its record")
    return payload[pos : pos + n], pos + n
