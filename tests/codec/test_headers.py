"""Header parsing and building, and reading Produce acks without a body decode."""

from __future__ import annotations

import struct

import pytest

from kgate.codec.headers import (
    HeaderError,
    parse_request_header,
    peek_request,
    produce_acks,
    produce_request_acks,
    read_uvarint,
    request_frame,
    response_body_offset,
    response_frame,
    set_correlation_id,
)
from kgate.codec.primitives import uvarint_bytes


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**21, 2**32 - 1])
def test_uvarint_round_trip(value: int) -> None:
    raw = uvarint_bytes(value)
    assert read_uvarint(raw + b"\xff", 0) == (value, len(raw))


def test_truncated_varint_raises() -> None:
    with pytest.raises(HeaderError):
        read_uvarint(b"\x80\x80", 0)


@pytest.mark.parametrize("hv", [1, 2])
def test_request_header_round_trip(hv: int) -> None:
    frame = request_frame(3, 12, 77, "my-client", hv, b"BODY")
    assert peek_request(frame) == (3, 12, 77)
    header = parse_request_header(frame, hv)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        77,
        "my-client",
    )
    assert bytes(frame[header.body_offset :]) == b"BODY"


def test_request_header_with_tagged_fields_and_null_client_id() -> None:
    tagged = b"\x02" + b"\x00\x01Z" + b"\x05\x02AB"  # two tagged fields
    body = struct.pack(">hhih", 1, 16, 5, -1) + tagged + b"rest"
    frame = struct.pack(">i", len(body)) + body
    header = parse_request_header(frame, 2)
    assert header.client_id is None
    assert header.tagged == tagged
    assert bytes(frame[header.body_offset :]) == b"rest"


def test_truncated_client_id_raises() -> None:
    body = struct.pack(">hhih", 1, 4, 5, 50) + b"short"
    with pytest.raises(HeaderError):
        parse_request_header(struct.pack(">i", len(body)) + body, 1)


def test_correlation_id_rewritten_in_place() -> None:
    frame = bytearray(response_frame(9, 1, b"xyz"))
    set_correlation_id(frame, 12345)
    assert struct.unpack_from(">i", frame, 4)[0] == 12345
    assert response_body_offset(frame, 1) == 9
    assert bytes(frame[9:]) == b"xyz"


def _produce(version: int, acks: int, txn: str | None) -> bytes:
    if version >= 9:
        t = b"\x00" if txn is None else uvarint_bytes(len(txn) + 1) + txn.encode()
    elif version >= 3:
        t = struct.pack(">h", -1) if txn is None else struct.pack(">h", len(txn)) + txn.encode()
    else:
        t = b""
    body = t + struct.pack(">hi", acks, 30000) + b"..."
    return request_frame(0, version, 1, "c", 2 if version >= 9 else 1, body)


@pytest.mark.parametrize("version", [0, 2, 3, 7, 8, 9, 10, 13])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("txn", [None, "txn-1"])
def test_produce_acks(version: int, acks: int, txn: str | None) -> None:
    frame = _produce(version, acks, txn)
    header = parse_request_header(frame, 2 if version >= 9 else 1)
    assert produce_acks(frame, header.body_offset, version) == acks


@pytest.mark.parametrize("version", [0, 2, 3, 7, 8, 9, 10, 13])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("txn", [None, "txn-1"])
@pytest.mark.parametrize("client_id", [None, "", "client-with-a-longer-id"])
def test_produce_request_acks_reads_what_the_decoded_header_says(
    version: int, acks: int, txn: str | None, client_id: str | None
) -> None:
    hv = 2 if version >= 9 else 1
    frame = _produce(version, acks, txn)
    body = frame[parse_request_header(frame, hv).body_offset :]
    frame = request_frame(0, version, 1, client_id, hv, body)
    assert produce_request_acks(frame, version) == acks
    assert produce_acks(frame, parse_request_header(frame, hv).body_offset, version) == acks


def test_produce_request_acks_skips_tagged_header_fields() -> None:
    plain = _produce(9, 0, None)
    body = plain[parse_request_header(plain, 2).body_offset :]
    header = struct.pack(">hhih", 0, 9, 1, 1) + b"c" + b"\x01" + uvarint_bytes(7) + uvarint_bytes(2) + b"ab"
    frame = struct.pack(">i", len(header) + len(body)) + header + body
    assert produce_request_acks(frame, 9) == 0


@pytest.mark.parametrize("cut", [10, 13, 15, 19])
def test_produce_request_acks_refuses_a_truncated_header_like_the_decoder(cut: int) -> None:
    plain = _produce(9, 1, None)
    frame = request_frame(0, 9, 1, "abcd", 2, plain[parse_request_header(plain, 2).body_offset :])[:cut]
    with pytest.raises(HeaderError):
        produce_request_acks(frame, 9)
    with pytest.raises(HeaderError):
        produce_acks(frame, parse_request_header(frame, 2).body_offset, 9)


@pytest.mark.parametrize("version", [0, 2, 3, 7, 8, 9, 13])
@pytest.mark.parametrize("txn", [None, "txn-1", "t" * 200])
def test_produce_request_acks_agrees_with_the_decoded_header_on_every_truncation(version: int, txn: str | None) -> None:
    """The byte-by-byte reads (no ``Struct``) answer or refuse exactly like decoding the header and
    then ``produce_acks``, wherever the frame is cut (a 200-byte id takes a two-byte varint)."""
    hv = 2 if version >= 9 else 1
    whole = _produce(version, -1, txn)
    for cut in range(len(whole) + 1):
        frame = whole[:cut]
        try:
            expected: int | None = produce_acks(frame, parse_request_header(frame, hv).body_offset, version)
        except HeaderError:
            expected = None
        try:
            got: int | None = produce_request_acks(frame, version)
        except HeaderError:
            got = None
        assert got == expected, cut
