"""The audit reader's one varint copy agrees with the codec's ``read_uvarint``.

The audit walkers read varints with ``kgate.codec.primitives``; ``wire._Reader.uvarint`` keeps a
copy because it reads through ``byte()`` and so also serves frames split across reads
(tests/unit/test_layering.py allows it by name). This holds it to the codec's reader on every value
a Kafka length can take, and checks that a varint longer than five bytes is refused by both.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgate.codec import primitives
from kgate.codec.errors import CodecError
from kgate.filters.builtin.audit import wire

u32 = st.integers(min_value=0, max_value=0xFFFFFFFF)


def _readers(buf: bytes, pos: int) -> dict[str, tuple[int, int]]:
    reader = wire._Reader(buf, pos, True)
    value = reader.uvarint()
    return {
        "codec": primitives.read_uvarint(buf, pos),
        "wire._Reader.uvarint": (value, reader.pos),
    }


@settings(deadline=None)  # pure: a wall-clock deadline would measure the shared machine
@given(value=u32, prefix=st.binary(max_size=3), suffix=st.binary(max_size=3))
def test_every_reader_reads_what_the_codec_wrote(value: int, prefix: bytes, suffix: bytes) -> None:
    buf = prefix + primitives.uvarint_bytes(value) + suffix
    got = _readers(buf, len(prefix))
    assert set(got.values()) == {(value, len(buf) - len(suffix))}, got


def test_a_varint_longer_than_five_bytes_is_refused_by_each() -> None:
    buf = b"\x80" * 5 + b"\x01"
    with pytest.raises(CodecError):
        primitives.read_uvarint(buf, 0)
    with pytest.raises(wire.WireError):
        wire._Reader(buf, 0, True).uvarint()
