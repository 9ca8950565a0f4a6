"""The broker-list-only Metadata rewrite gives the same answer as the full decode and re-encode."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kgate.codec import api
from kgate.codec.generated.data import metadata as md
from kgate.codec.headers import HeaderError, response_body_offset, response_frame
from kgate.proxy.sansio import rewrite
from kgate.proxy.sansio.metadata_brokers import rewrite_brokers

CORPUS = Path(__file__).resolve().parents[3].parent / "shared" / "corpus-tansu"


def _mapper(node_id: int, host: str, port: int) -> tuple[str, int] | None:
    return None if node_id == 13 else ("kgate.example", 7000 + node_id)


def _decode(frame: bytes, version: int):
    off = response_body_offset(memoryview(frame), api.response_header_version(3, version))
    return api.decode_response(3, version, memoryview(frame)[off:])


def _both(frame: bytes, version: int) -> tuple[bytes, bytes]:
    view = memoryview(frame)
    off = response_body_offset(view, api.response_header_version(3, version))
    fast = rewrite_brokers(view, off, version, _mapper)
    full = rewrite.rewrite_addresses(view, 3, version, _mapper)
    assert full is not None
    return fast, full


def _corpus_rows() -> list[dict]:
    if not CORPUS.is_dir():
        return []
    rows = [json.loads(line) for line in (CORPUS / "index.jsonl").read_text().splitlines()]
    return [r for r in rows if r["direction"] == "resp" and r["api_key"] == 3]


ROWS = _corpus_rows()


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus-tansu is absent (a user's clone)")
@pytest.mark.parametrize("row", ROWS, ids=[r["file"].split("/")[-1] for r in ROWS])
def test_corpus_metadata_same_as_full_rewrite(row: dict) -> None:
    frame = (CORPUS / row["file"]).read_bytes()
    fast, full = _both(frame, row["api_version"])
    assert _decode(fast, row["api_version"]) == _decode(full, row["api_version"])
    assert int.from_bytes(fast[:4], "big") == len(fast) - 4


def _spec_frame(version: int, seed: int) -> bytes:
    rng = random.Random(seed)
    resp = md.MetadataResponse(throttle_time_ms=rng.randint(0, 99), cluster_id="c" if version >= 2 else None)
    resp.brokers = [
        md.MetadataResponseBroker(
            node_id=n, host=f"broker-{n}.internal", port=9092 + n, rack=rng.choice([None, "rack-a", "é-rack"])
        )
        for n in (1, 13, 2)
    ]
    resp.topics = [
        md.MetadataResponseTopic(error_code=0, name=f"t{i}", is_internal=False, partitions=[]) for i in range(3)
    ]
    return response_frame(7, api.response_header_version(3, version), resp.encode(version))


@pytest.mark.parametrize("version", range(api.API_INFO[3].min_version, api.API_INFO[3].max_version + 1))
def test_every_version_same_as_full_rewrite(version: int) -> None:
    frame = _spec_frame(version, version)
    fast, full = _both(frame, version)
    got = _decode(fast, version)
    assert got == _decode(full, version)
    assert [(b.node_id, b.host, b.port) for b in got.brokers] == [
        (1, "kgate.example", 7001),
        (2, "kgate.example", 7002),
    ]
    assert [t.name for t in got.topics] == ["t0", "t1", "t2"]  # the rest came through


def test_unknown_broker_tagged_fields_survive() -> None:
    version = 12
    resp = md.MetadataResponse(brokers=[md.MetadataResponseBroker(node_id=1, host="b", port=1, rack=None)])
    resp.brokers[0]._unknown_tagged = [(77, b"xyz")]
    frame = response_frame(1, 1, resp.encode(version))
    view = memoryview(frame)
    fast = rewrite_brokers(view, response_body_offset(view, 1), version, _mapper)
    assert _decode(fast, version).brokers[0]._unknown_tagged == [(77, b"xyz")]


@pytest.mark.parametrize("version", [0, 5, 9, 12])
def test_truncated_bodies_raise_header_error_only(version: int) -> None:
    frame = _spec_frame(version, 1)
    view = memoryview(frame)
    off = response_body_offset(view, api.response_header_version(3, version))
    brokers_end = len(frame) - 40  # well inside the topics for this small response
    for cut in range(off, brokers_end):
        truncated = memoryview(frame[:cut])
        try:
            rewrite_brokers(truncated, off, version, _mapper)
        except HeaderError:
            pass
