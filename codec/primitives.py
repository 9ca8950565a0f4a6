"""Low-level Kafka wire primitives used by the compiled codecs in :mod:`kgate.codec.schema`."""

from __future__ import annotations

import struct
import uuid

from kgate.codec.errors import CodecError

# Fixed-width types: struct format character and size.
FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
}

S_INT16 = struct.Struct(">h")
S_INT32 = struct.Struct(">i")
S_UUID = struct.Struct(">QQ")
unpack_from = struct.unpack_from
pack = struct.pack


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint (at most 5 bytes) at ``pos``; return (value, new_pos). Reading
    past the end raises IndexError (callers that know the frame's end check it themselves)."""
    b = buf[pos]
    if b < 0x80:  # lengths, counts and tags below 128: nearly all of them
        return b, pos + 1
    return _varint_rest(buf, pos + 1, b & 0x7F, 28)


def _varint_rest(buf, pos: int, result: int, last_shift: int) -> tuple[int, int]:
    """The bytes after a varint's first (``result`` holds its 7 bits), up to a shift of
    ``last_shift``: 28 for an unsigned varint (5 bytes), 63 for a signed one (10)."""
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > last_shift:
            kind = "unsigned varint longer than 5" if last_shift == 28 else "signed varint longer than 10"
            raise CodecError(f"{kind} bytes")


def skip_tagged(buf, pos: int) -> int:
    """Position after a tagged-field section at ``pos`` (nearly always the single byte 0). Reads
    past the end raise IndexError; a caller reading on from the returned position finds an overrun."""
    n = buf[pos]
    if n == 0:
        return pos + 1
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def uvarint_bytes(value: int) -> bytes:
    """Encode an unsigned varint (0 <= value < 2**32)."""
    if value < 0 or value > 0xFFFFFFFF:
        raise CodecError(f"unsigned varint out of range: {value}")
    return _varint_bytes(value)


def _varint_bytes(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """Decode a signed zigzag varint (at most 10 bytes: records' lengths, deltas) at ``pos``;
    return (value, new_pos). Reading past the end raises IndexError, as ``read_uvarint``."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result, pos = _varint_rest(buf, pos + 1, b & 0x7F, 63)
    return (result >> 1) ^ -(result & 1), pos


def varlong_bytes(value: int) -> bytes:
    """Encode a signed zigzag varint (-2**63 <= value < 2**63)."""
    if value < -(1 << 63) or value >= 1 << 63:
        raise CodecError(f"signed varint out of range: {value}")
    return _varint_bytes((value << 1) ^ (value >> 63))


def write_tagged(out: bytearray, entries) -> None:
    """Write a tagged-field section from (tag, bytes-like) pairs already sorted by tag."""
    n = len(entries)
    out += uvarint_bytes(n)
    for tag, data in entries:
        out += uvarint_bytes(tag)
        out += uvarint_bytes(len(data))
        out += data


def truncated() -> CodecError:
    return CodecError("truncated input")


# --------------------------------------------------------------------------------------------
# Small bounded caches for values that repeat across messages (topic ids, topic/host names).
# Cached values are immutable (UUID objects, bytes), so sharing them between messages is safe.

_CACHE_MAX = 4096
_CACHE_STR_MAX = 255  # only strings whose UTF-8 form is at most this long are cached

_ZERO_UUID = uuid.UUID(int=0)
UUID_BY_BYTES: dict = {bytes(16): _ZERO_UUID}
UUID_BYTES_BY_INT: dict = {0: bytes(16)}
STR_COMPACT: dict = {}
STR_INT16: dict = {}


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """Slow path of the decode-side UUID cache: build (and remember) the UUID for 16 raw bytes."""
    u = uuid.UUID(bytes=raw)
    if len(UUID_BY_BYTES) >= _CACHE_MAX:
        UUID_BY_BYTES.clear()
        UUID_BY_BYTES[bytes(16)] = _ZERO_UUID
    UUID_BY_BYTES[raw] = u
    return u


def uuid_to_bytes(value: int) -> bytes:
    """Slow path of the encode-side UUID cache: 16 big-endian bytes of ``UUID.int``."""
    raw = value.to_bytes(16, "big")
    if len(UUID_BYTES_BY_INT) >= _CACHE_MAX:
        UUID_BYTES_BY_INT.clear()
    UUID_BYTES_BY_INT[value] = raw
    return raw


def str_compact(value: str) -> bytes:
    """Compact (uvarint length + 1) encoding of a non-null string, cached when short."""
    b = value.encode("utf-8")
    n = len(b) + 1
    r = (bytes((n,)) if n < 128 else uvarint_bytes(n)) + b
    if n <= _CACHE_STR_MAX and type(value) is str:
        if len(STR_COMPACT) >= _CACHE_MAX:
            STR_COMPACT.clear()
        STR_COMPACT[value] = r
    return r


def str_int16(value: str) -> bytes:
    """Classic (int16 length) encoding of a non-null string, cached when short."""
    b = value.encode("utf-8")
    r = S_INT16.pack(len(b)) + b
    if len(b) < _CACHE_STR_MAX and type(value) is str:
        if len(STR_INT16) >= _CACHE_MAX:
            STR_INT16.clear()
        STR_INT16[value] = r
    return r
