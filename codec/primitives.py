"""Low-level Kafka wire primitives used by the compiled codecs in :mod:`codec.schema`."""

from __future__ import annotations

import struct

from codec.errors import CodecError

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
    """Decode an unsigned varint (at most 5 bytes) at ``pos``; return (value, new_pos)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise CodecError("unsigned varint longer than 5 bytes")


def uvarint_bytes(value: int) -> bytes:
    """Encode an unsigned varint (0 <= value < 2**32)."""
    if value < 0 or value > 0xFFFFFFFF:
        raise CodecError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
