"""Round-trip every frame of the Tansu corpus through the codec."""

from __future__ import annotations

import pytest
from codec_support import (
    CORPUS_DIR,
    corpus_rows,
    load_frame,
    parse_request_header,
    parse_response_header,
    row_id,
)

from kgate.codec import api

if not (CORPUS_DIR / "index.jsonl").is_file():
    pytest.skip(f"corpus not available at {CORPUS_DIR} (needs ../shared next to the repo)", allow_module_level=True)

ROWS = corpus_rows()

# Frames whose re-encoding legitimately differs from the captured bytes: Tansu emits tagged
# fields that hold their default values (ApiVersions v3+ SupportedFeatures etc., CreateTopics
# TopicConfigErrorCode, Fetch DivergingEpoch/CurrentLeader/SnapshotId); Kafka's rule (and ours)
# omits them.
TAGGED_DEFAULTS_SENT = {("resp", 18), ("resp", 19), ("resp", 1)}


def _decode(row, body):
    fn = api.decode_request_ex if row["direction"] == "req" else api.decode_response_ex
    return fn(row["api_key"], row["api_version"], body)


def test_corpus_is_complete():
    assert len(ROWS) == 346
    assert len({r["api_key"] for r in ROWS}) == 22


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_frame_round_trip(row):
    frame = load_frame(row)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    key, ver = row["api_key"], row["api_version"]
    if row["direction"] == "req":
        hdr, off = parse_request_header(frame, row["header_version"])
        assert (hdr["api_key"], hdr["api_version"]) == (key, ver)
        assert api.request_header_version(key, ver) == row["header_version"]
    else:
        hdr, off = parse_response_header(frame, row["header_version"])
        assert api.response_header_version(key, ver) == row["header_version"]
    assert hdr["correlation_id"] == row["correlation_id"]
    assert off == row["body_offset"]

    body = memoryview(frame)[off:]
    msg, consumed = _decode(row, body)
    assert type(msg) is (
        api.API_INFO[key].request_class if row["direction"] == "req" else api.API_INFO[key].response_class
    )
    trailing = len(body) - consumed
    # Only librdkafka's Metadata v12 requests carry 3 stray bytes after the body.
    if trailing:
        assert (row["direction"], key, ver, trailing) == ("req", 3, 12, 3)

    encoded = msg.encode(ver)
    again, consumed2 = _decode(row, encoded)
    assert consumed2 == len(encoded)
    assert again == msg
    assert repr(again) == repr(msg)
    if (row["direction"], key) not in TAGGED_DEFAULTS_SENT:
        assert bytes(encoded) == bytes(body[:consumed])
    else:
        assert len(encoded) <= consumed


def _fetch_rows():
    return [r for r in ROWS if r["direction"] == "resp" and r["api_key"] == 1]


def test_fetch_records_are_zero_copy_slices():
    big = max(_fetch_rows(), key=lambda r: r["frame_len"])
    frame = load_frame(big)
    assert len(frame) > 1_000_000
    body = frame[big["body_offset"] :]
    msg = api.decode_response(1, big["api_version"], body)
    recs = [p.records for t in msg.responses for p in t.partitions if p.records is not None]
    assert recs
    assert sum(r.nbytes for r in recs) > 1_000_000
    for r in recs:
        assert isinstance(r, memoryview)
        assert r.obj is body  # a view of the input, not a copy


def test_known_values_metadata_response():
    row = next(
        r
        for r in ROWS
        if r["direction"] == "resp" and r["api_key"] == 3 and r["api_version"] == 12 and r["frame_len"] > 1000
    )
    frame = load_frame(row)
    msg = api.decode_response(3, 12, frame[row["body_offset"] :])
    assert msg.brokers[0].host == "127.0.0.1"
    assert msg.brokers[0].rack is None
    assert msg.cluster_id == "tansu_cluster"
    names = {t.name for t in msg.topics}
    assert "big" in names
    assert all(t.topic_id.int != 0 for t in msg.topics)


def test_metadata_request_trailing_bytes_tolerated():
    row = next(r for r in ROWS if r["direction"] == "req" and r["api_key"] == 3 and r["api_version"] == 12)
    frame = load_frame(row)
    body = frame[row["body_offset"] :]
    msg, consumed = api.decode_request_ex(3, 12, body + b"\x00\x00\x00")
    assert consumed <= len(body)
    assert api.decode_request(3, 12, body + b"xyz") == msg
