"""Tagged-field behaviour, malformed input handling and the api helpers."""

from __future__ import annotations

import struct
import time
import uuid

import pytest
from codec_support import CORPUS_DIR, corpus_rows, load_frame, read_uvarint
from hypothesis import given, settings
from hypothesis import strategies as st

from kgate.codec import api
from kgate.codec.api import CodecError
from kgate.codec.generated.data.fetch import FetchableTopicResponse, FetchResponse, NodeEndpoint, PartitionData
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataResponse, MetadataResponseBroker
from kgate.codec.generated.session.api_versions import ApiVersionsResponse
from kgate.codec.schema import get_encoder

HAVE_CORPUS = (CORPUS_DIR / "index.jsonl").is_file()
needs_corpus = pytest.mark.skipif(not HAVE_CORPUS, reason=f"corpus not available at {CORPUS_DIR}")


def uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def parse_tags(buf, pos):
    n, pos = read_uvarint(buf, pos)
    tags = []
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        tags.append((tag, bytes(buf[pos : pos + size])))
        pos += size
    return tags, pos


def sample_metadata_response() -> MetadataResponse:
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponseBroker(node_id=1, host="broker-1", port=9092, rack="r1")],
        cluster_id="c1",
        controller_id=1,
    )


# ------------------------------------------------------------------ tagged fields


def test_unknown_top_level_tag_survives_byte_for_byte():
    body = bytes(sample_metadata_response().encode(12))
    assert body[-1] == 0  # empty top-level tagged section
    spliced = body[:-1] + b"\x01" + uv(999) + uv(5) + b"hello"
    msg, consumed = api.decode_response_ex(3, 12, spliced)
    assert consumed == len(spliced)
    assert msg._unknown_tagged == [(999, b"hello")]
    assert bytes(msg.encode(12)) == spliced


def test_unknown_nested_tags_kept_and_ordered_with_known_ones():
    part = PartitionData(
        partition_index=0, high_watermark=10, records=b"xyz", _unknown_tagged=[(99, b"\x01\x02"), (3, b"")]
    )
    part.current_leader.leader_id = 7  # known tag 1, non-default
    part.snapshot_id.epoch = 4  # known tag 2, non-default
    resp = FetchResponse(responses=[FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=[part])])
    encoded = bytes(resp.encode(16))
    again = FetchResponse.decode(encoded, 16)
    p2 = again.responses[0].partitions[0]
    assert p2._unknown_tagged == [(3, b""), (99, b"\x01\x02")]
    assert p2.current_leader.leader_id == 7
    assert p2.snapshot_id.epoch == 4
    assert bytes(again.encode(16)) == encoded
    # The partition's tagged section lists tags in ascending order: known 1, 2 then unknown 3, 99.
    enc = get_encoder(PartitionData, 16, True)
    plain = PartitionData(partition_index=0, high_watermark=10, records=b"xyz")
    base = bytearray()
    enc(plain, base)
    full = bytearray()
    enc(part, full)
    assert full[: len(base) - 1] == base[:-1]
    tags, end = parse_tags(full, len(base) - 1)
    assert end == len(full)
    assert [t for t, _ in tags] == [1, 2, 3, 99]


def test_tagged_field_emitted_only_when_not_default():
    r = FetchResponse(responses=[])
    no_tags = bytes(r.encode(16))
    assert no_tags[-1] == 0
    r.node_endpoints = [NodeEndpoint(node_id=1, host="h", port=1)]
    with_tag = bytes(r.encode(16))
    tags, end = parse_tags(with_tag, len(no_tags) - 1)
    assert end == len(with_tag)
    assert [t for t, _ in tags] == [0]
    assert FetchResponse.decode(with_tag, 16).node_endpoints[0].host == "h"

    av = ApiVersionsResponse()
    assert av.finalized_features_epoch == -1
    assert bytes(av.encode(3))[-1] == 0
    av.finalized_features_epoch = 5
    tags, _ = parse_tags(bytes(av.encode(3)), len(bytes(ApiVersionsResponse().encode(3))) - 1)
    assert tags == [(1, struct.pack(">q", 5))]


def test_tagged_fields_absent_in_non_flexible_versions():
    r = FetchResponse(responses=[], node_endpoints=[NodeEndpoint(node_id=1, host="h", port=1)])
    assert len(r.encode(11)) == 4 + 2 + 4 + 4  # throttle, error, session, empty array


def test_unknown_tags_dropped_silently_only_in_non_flexible_versions():
    m = sample_metadata_response()
    m._unknown_tagged = [(42, b"x")]
    assert MetadataResponse.decode(m.encode(12), 12)._unknown_tagged == [(42, b"x")]
    assert MetadataResponse.decode(m.encode(8), 8)._unknown_tagged is None


# ------------------------------------------------------------------ malformed input


def _one_row_per_combo():
    seen, out = set(), []
    for row in corpus_rows():
        combo = (row["direction"], row["api_key"], row["api_version"])
        if combo not in seen and row["frame_len"] < 50_000:
            seen.add(combo)
            out.append(row)
    return out


@needs_corpus
def test_every_truncation_raises_codec_error():
    checked = 0
    for row in _one_row_per_combo():
        fn = api.decode_request_ex if row["direction"] == "req" else api.decode_response_ex
        body = load_frame(row)[row["body_offset"] :]
        _, consumed = fn(row["api_key"], row["api_version"], body)
        for cut in range(consumed):
            with pytest.raises(CodecError):
                fn(row["api_key"], row["api_version"], body[:cut])
            checked += 1
    assert checked > 1000


def test_absurd_array_length_fails_fast():
    # Metadata v0 response: brokers array (int32 count) claims 2**31-1 entries, 10 bytes follow.
    body = struct.pack(">i", 2**31 - 1) + b"\x00" * 10
    t0 = time.perf_counter()
    with pytest.raises(CodecError):
        api.decode_response(3, 0, body)
    # Compact array (flexible v12): uvarint length 2**32-1.
    with pytest.raises(CodecError):
        api.decode_response(3, 12, b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10)
    # int32 primitive array (partition replica_nodes) with a huge count.
    prefix = struct.pack(">ii", 0, 1) + struct.pack(">hh", 0, 1) + b"a" + struct.pack(">ihii", 1, 0, 0, 1)
    ok = prefix + struct.pack(">i", 1) + struct.pack(">i", 5) + struct.pack(">ii", 0, 0)
    assert api.decode_response(3, 0, ok).topics[0].partitions[0].replica_nodes == [5]
    with pytest.raises(CodecError):
        api.decode_response(3, 0, prefix + struct.pack(">i", 2**31 - 1) + b"\x00" * 10)
    assert time.perf_counter() - t0 < 0.5


def test_absurd_string_and_varint():
    with pytest.raises(CodecError):  # string length 32767, 3 bytes present
        api.decode_response(10, 0, struct.pack(">hi", 0, 1) + struct.pack(">h", 32767) + b"abc")
    with pytest.raises(CodecError):  # 6-byte varint
        api.decode_response(3, 12, b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff\xff\x01")
    bad = struct.pack(">hi", 0, 1) + struct.pack(">h", 2) + b"\xff\xfe" + b"\x00" * 8
    with pytest.raises(CodecError):  # invalid utf-8 in a string
        api.decode_response(10, 0, bad)


def test_non_nullable_null_rejected():
    # Metadata v12 response, broker host (non-nullable compact string) encoded as null (0).
    body = b"\x00\x00\x00\x00" + b"\x02" + struct.pack(">i", 1) + b"\x00" + b"\x00" * 20
    with pytest.raises(CodecError, match="host"):
        api.decode_response(3, 12, body)


@settings(max_examples=300, deadline=None, database=None)
@given(
    key=st.sampled_from(sorted(api.API_INFO)), data=st.data(), garbage=st.binary(max_size=64), response=st.booleans()
)
def test_garbage_raises_only_codec_error(key, data, garbage, response):
    info = api.API_INFO[key]
    version = data.draw(st.integers(info.min_version, info.max_version))
    fn = api.decode_response_ex if response else api.decode_request_ex
    try:
        _, consumed = fn(key, version, garbage)
    except CodecError:
        return
    assert 0 <= consumed <= len(garbage)


def test_unknown_key_and_version():
    with pytest.raises(CodecError):
        api.decode_request(9999, 0, b"")
    with pytest.raises(CodecError):
        api.decode_response(3, 99, b"")
    with pytest.raises(CodecError):
        api.decode_request(1, 0, b"")  # Fetch starts at v4 in the specs
    with pytest.raises(CodecError):
        MetadataRequest().encode(14)
    assert issubclass(CodecError, ValueError)


def test_encode_errors_are_codec_errors():
    m = sample_metadata_response()
    m.brokers[0].host = None
    with pytest.raises(CodecError):
        m.encode(12)
    m = sample_metadata_response()
    m.brokers[0].port = 2**40
    with pytest.raises(CodecError):
        m.encode(12)
    m = sample_metadata_response()
    m.cluster_id = None  # nullable from v2
    assert MetadataResponse.decode(m.encode(2), 2).cluster_id is None
    with pytest.raises(CodecError):
        api.encode_request(m, 12)


# ------------------------------------------------------------------ api helpers


def test_header_versions():
    assert api.request_header_version(3, 8) == 1
    assert api.request_header_version(3, 9) == 2
    with pytest.raises(CodecError):  # ControlledShutdown (and its header v0) left Kafka with KRaft
        api.request_header_version(7, 0)
    assert api.request_header_version(18, 3) == 2
    assert api.response_header_version(18, 3) == 0
    assert api.response_header_version(18, 4) == 0
    assert api.response_header_version(3, 9) == 1
    assert api.response_header_version(3, 8) == 0
    assert api.response_header_version(36, 1) == 0  # SaslAuthenticate flexible only from v2
    assert api.response_header_version(36, 2) == 1
    with pytest.raises(CodecError):
        api.request_header_version(9999, 0)


def test_api_info():
    info = api.API_INFO[3]
    assert (info.key, info.name) == (3, "Metadata")
    assert (info.min_version, info.max_version) == (0, 13)
    assert info.request_flexible_min == 9
    assert info.response_flexible_min == 9
    assert info.request_class is MetadataRequest
    assert info.response_class is MetadataResponse
    assert api.API_INFO[17].request_flexible_min is None  # SaslHandshake: never flexible
    assert api.API_INFO[1].min_version == 4
    with pytest.raises(AttributeError):
        info.key = 4  # frozen


def test_defaults_and_construction():
    m = MetadataResponse()
    assert m.controller_id == -1
    assert m.cluster_id is None
    assert m.brokers == []
    assert MetadataResponse().brokers is not m.brokers  # fresh mutable defaults
    p = PartitionData()
    # records default to empty (what brokers send for a refused partition), never to null
    assert p.records == b""
    assert p.current_leader.leader_id == -1
    assert FetchableTopicResponse().topic_id == uuid.UUID(int=0)
    assert "MetadataResponseBroker(node_id=1" in repr(sample_metadata_response())
    with pytest.raises(TypeError):
        MetadataResponse(no_such_field=1)
