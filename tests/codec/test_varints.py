"""The codec's one varint pair (kgate.codec.primitives): unsigned and signed zigzag, their limits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgate.codec.errors import CodecError
from kgate.codec.headers import HeaderError
from kgate.codec.headers import read_uvarint as header_uvarint
from kgate.codec.primitives import read_uvarint, read_varlong, uvarint_bytes, varlong_bytes
from kgate.codec.records import RecordsError, _read_zigzag


@given(st.integers(0, 0xFFFFFFFF))
def test_unsigned_round_trip(value: int) -> None:
    raw = b"\x07" + uvarint_bytes(value) + b"\x09"
    assert read_uvarint(raw, 1) == (value, len(raw) - 1)
    assert header_uvarint(raw, 1) == (value, len(raw) - 1)


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_signed_round_trip(value: int) -> None:
    raw = varlong_bytes(value) + b"\x01"
    assert read_varlong(raw, 0) == (value, len(raw) - 1)
    assert _read_zigzag(raw, 0) == (value, len(raw) - 1)


def test_limits_and_errors_of_each_layer() -> None:
    six = b"\xff" * 5 + b"\x01"
    with pytest.raises(CodecError, match="longer than 5"):
        read_uvarint(six, 0)
    with pytest.raises(HeaderError, match="longer than 5"):
        header_uvarint(six, 0)
    with pytest.raises(HeaderError, match="truncated"):
        header_uvarint(b"\x80", 0)
    with pytest.raises(HeaderError, match="truncated"):
        header_uvarint(b"", 0)
    eleven = b"\xff" * 10 + b"\x01"
    with pytest.raises(CodecError, match="longer than 10"):
        read_varlong(eleven, 0)
    with pytest.raises(RecordsError, match="longer than 10"):
        _read_zigzag(eleven, 0)
    with pytest.raises(RecordsError, match="truncated"):
        _read_zigzag(b"\x80\x80", 0)
    for bad in (-1, 1 << 32):
        with pytest.raises(CodecError):
            uvarint_bytes(bad)
    with pytest.raises(CodecError):
        varlong_bytes(1 << 63)
