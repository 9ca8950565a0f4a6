"""FrameReader: frames come out whole, in order, whatever the chunking; bad sizes poison it."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kgate.codec.framing import FrameReader


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _feed_all(reader: FrameReader, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(bytes(f) for f in reader.feed(chunk))
    return out


@given(
    bodies=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_any_chunking_yields_the_same_frames(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(_frame(b) for b in bodies)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in itertools.pairwise(points)]
    reader = FrameReader(1000)
    assert _feed_all(reader, chunks) == [_frame(b) for b in bodies]
    assert reader.buffered == 0
    assert reader.error is None


def test_whole_frames_are_zero_copy_views_of_the_chunk() -> None:
    data = _frame(b"abc") + _frame(b"defg")
    frames = FrameReader().feed(data)
    assert [f.obj is data for f in frames] == [True, True]


def test_partial_tail_is_kept_until_complete() -> None:
    reader = FrameReader()
    data = _frame(b"x" * 100)
    assert reader.feed(data[:2]) == []
    assert reader.feed(data[2:50]) == []
    assert reader.buffered == 50
    assert [bytes(f) for f in reader.feed(data[50:])] == [data]


def test_oversized_frame_is_refused_after_earlier_frames() -> None:
    reader = FrameReader(max_frame_bytes=1024)
    good = _frame(b"ok")
    frames = reader.feed(good + struct.pack(">i", 0x7FFFFFFF) + b"junk")
    assert [bytes(f) for f in frames] == [good]
    assert reader.error is not None
    assert "exceeds the limit of 1024" in str(reader.error)
    assert reader.feed(_frame(b"later")) == []


def test_negative_size_is_refused_even_when_split() -> None:
    reader = FrameReader()
    bad = struct.pack(">i", -5)
    assert reader.feed(bad[:3]) == []
    assert reader.feed(bad[3:]) == []
    assert reader.error is not None
    assert "negative" in str(reader.error)


@pytest.mark.parametrize("limit", [0, 10])
def test_limit_is_inclusive(limit: int) -> None:
    reader = FrameReader(max_frame_bytes=limit)
    assert [bytes(f) for f in reader.feed(_frame(b"z" * limit))] == [_frame(b"z" * limit)]
    assert reader.feed(_frame(b"z" * (limit + 1))) == []
    assert reader.error is not None


def test_discard_drops_a_partial_frame() -> None:
    reader = FrameReader()
    whole = _frame(b"p" * 100)
    assert reader.feed(whole[:60]) == []
    assert reader.buffered == 60
    reader.discard()
    assert reader.buffered == 0
    assert [bytes(f) for f in reader.feed(_frame(b"next"))] == [_frame(b"next")]  # a fresh start
