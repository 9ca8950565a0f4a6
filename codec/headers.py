"""Request and response headers, read and written in place on size-prefixed frames.

The proxy's hot path only needs ``(api_key, api_version, correlation_id)`` of a request and
the correlation id of a response; both sit at fixed offsets, so they are read with one
``unpack_from`` without decoding anything else. The rest of this module finds where a body
starts (header v2 and response header v1 end in tagged fields of variable length) and builds
frames for messages kgate creates or changes.

All offsets here are into a frame *including* its 4-byte size prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from struct import Struct
from typing import Final

from kgate.codec.errors import CodecError
from kgate.codec.primitives import read_uvarint as _read_uvarint

_REQ_FIXED: Final = Struct(">hhi")  # api_key, api_version, correlation_id
_INT32: Final = Struct(">i")
_INT16: Final = Struct(">h")


class HeaderError(ValueError):
    """A header is truncated or inconsistent."""


def peek_request(frame: memoryview | bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame; HeaderError if too short."""
    if len(frame) < 12:
        raise HeaderError(f"request frame of {len(frame)} bytes is shorter than a header")
    return _REQ_FIXED.unpack_from(frame, 4)


def peek_correlation_id(frame: memoryview | bytes) -> int:
    """Correlation id of a response frame (the first header field in every version)."""
    if len(frame) < 8:
        raise HeaderError(f"response frame of {len(frame)} bytes is shorter than a header")
    return _INT32.unpack_from(frame, 4)[0]


def set_correlation_id(frame: bytearray | memoryview, correlation_id: int) -> None:
    """Overwrite the correlation id of a request or response frame in place."""
    _INT32.pack_into(frame, 4, correlation_id)


def read_uvarint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    """codec.primitives.read_uvarint, its errors as HeaderError (headers come from clients)."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:  # nearly every length here: no call out of this compiled module
            return b, pos + 1
    try:
        return _read_uvarint(buf, pos)
    except IndexError:
        raise HeaderError("truncated varint") from None
    except CodecError as exc:
        raise HeaderError(str(exc)) from None


def skip_tagged_fields(buf: memoryview | bytes, pos: int) -> int:
    """Position after a tagged-field section starting at ``pos``."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise HeaderError("tagged fields run past the end of the frame")
    return pos


@dataclass(slots=True)
class RequestHeader:
    """A decoded request header; ``body_offset`` is where the body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int
    tagged: bytes = field(default=b"\x00")  # raw tagged-field section (header v2 only)


def parse_request_header(frame: memoryview | bytes, header_version: int) -> RequestHeader:
    """Decode a request header of version 0, 1 or 2 (client_id is never compact)."""
    api_key, api_version, correlation_id = peek_request(frame)
    pos = 12
    client_id: str | None = None
    if header_version >= 1:
        if len(frame) < pos + 2:
            raise HeaderError("truncated client_id length")
        n = _INT16.unpack_from(frame, pos)[0]
        pos += 2
        if n >= 0:
            if pos + n > len(frame):
                raise HeaderError("client_id runs past the end of the frame")
            client_id = bytes(frame[pos : pos + n]).decode("utf-8", "replace")
            pos += n
    tagged = b"\x00"
    if header_version >= 2:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields: nearly every request
            return RequestHeader(api_key, api_version, correlation_id, client_id, pos + 1, tagged)
        end = skip_tagged_fields(frame, pos)
        tagged = bytes(frame[pos:end])
        pos = end
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, tagged)


def response_body_offset(frame: memoryview | bytes, header_version: int) -> int:
    """Where the body of a response frame starts, given its header version (0 or 1)."""
    if header_version == 0:
        return 8
    return skip_tagged_fields(frame, 8)


def encode_request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    header_version: int,
) -> bytes:
    out = bytearray(_REQ_FIXED.pack(api_key, api_version, correlation_id))
    if header_version >= 1:
        if client_id is None:
            out += _INT16.pack(-1)
        else:
            raw = client_id.encode()
            out += _INT16.pack(len(raw)) + raw
    if header_version >= 2:
        out += b"\x00"
    return bytes(out)


def frame(header: bytes | memoryview, body: bytes | bytearray | memoryview) -> bytes:
    """Size-prefixed frame from a header and a body."""
    return b"".join((_INT32.pack(len(header) + len(body)), header, body))


def request_frame(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    header_version: int,
    body: bytes | bytearray | memoryview,
) -> bytes:
    """A whole request frame, e.g. for kgate's own upstream requests."""
    return frame(encode_request_header(api_key, api_version, correlation_id, client_id, header_version), body)


def response_frame(correlation_id: int, header_version: int, body: bytes | bytearray | memoryview) -> bytes:
    """A whole response frame, e.g. for a short-circuit answer to the client."""
    header = _INT32.pack(correlation_id) + (b"\x00" if header_version >= 1 else b"")
    return frame(header, body)


def produce_acks(frame: memoryview | bytes, body_offset: int, api_version: int) -> int:
    """The ``acks`` field of a Produce request without decoding the body.

    acks decides whether a response will come at all (acks=0: none), so the proxy needs it
    for every Produce, including versions its codec may not know yet. Layout: v0-2 start
    with acks; v3+ have a nullable transactional_id first (compact from v9).
    """
    pos = body_offset
    if api_version >= 3:
        if api_version >= 9:
            n, pos = read_uvarint(frame, pos)
            pos += max(n - 1, 0)
        else:
            if len(frame) < pos + 2:
                raise HeaderError("truncated Produce transactional_id")
            n = _INT16.unpack_from(frame, pos)[0]
            pos += 2 + max(n, 0)
    if len(frame) < pos + 2:
        raise HeaderError("truncated Produce acks")
    return _INT16.unpack_from(frame, pos)[0]


def produce_request_acks(frame: memoryview | bytes, api_version: int) -> int:
    """``acks`` of a Produce request frame, skipping the header rather than decoding it.

    The same answer (and the same ``HeaderError`` for a truncated header) as
    ``produce_acks(frame, parse_request_header(frame, 2 if api_version >= 9 else 1).body_offset,
    api_version)``, without building a ``RequestHeader`` or decoding the client id.
    """
    pos = produce_acks_offset(frame, api_version)
    acks = frame[pos] << 8 | frame[pos + 1]
    return acks - 0x10000 if acks & 0x8000 else acks


def produce_acks_offset(frame: memoryview | bytes, api_version: int) -> int:
    """Where a Produce request frame's ``acks`` (int16, then ``timeout_ms``, int32) starts.

    The header-only path asks this of every Produce: it reads ``acks`` there, and the timeout
    right after it when the request expects an answer (proxy/sansio/deadlines.py). The header is skipped
    rather than decoded; the int16s are read byte by byte (a negative length, i.e. null, skips
    nothing), not with ``Struct.unpack_from``: fewer instructions per Produce, as Python and
    compiled (docs/performance.md, "the hot path compiled with mypyc"). Raises ``HeaderError`` for
    a header cut short, as the decoder would.
    """
    n = len(frame)
    if n < 14:
        raise HeaderError("truncated client_id length")
    pos = 14 if frame[12] & 0x80 else 14 + (frame[12] << 8 | frame[13])
    if pos > n:
        raise HeaderError("client_id runs past the end of the frame")
    if api_version >= 9:  # request header v2: tagged fields after the client id
        pos = pos + 1 if pos < n and frame[pos] == 0 else skip_tagged_fields(frame, pos)
        # transactional_id, compact nullable string: its length + 1 as a varint (0: null)
        if pos < n and frame[pos] < 0x80:
            pos += frame[pos] or 1
        else:
            size, pos = read_uvarint(frame, pos)
            pos += max(size - 1, 0)
    elif api_version >= 3:  # transactional_id, nullable string
        if n < pos + 2:
            raise HeaderError("truncated Produce transactional_id")
        pos += 2 if frame[pos] & 0x80 else 2 + (frame[pos] << 8 | frame[pos + 1])
    if n < pos + 2:
        raise HeaderError("truncated Produce acks")
    return pos
