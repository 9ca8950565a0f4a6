"""Address rewriting and ApiVersions capping on real corpus frames and on spec-built frames."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kgate.codec import api
from kgate.codec.generated.session.api_versions import ApiVersion
from kgate.codec.headers import response_body_offset, response_frame
from kgate.proxy.sansio import rewrite

CORPUS = Path(__file__).resolve().parents[3].parent / "shared" / "corpus-tansu"
PROXY = ("kgate.example", 7000)


def _mapper(seen: list[tuple[int, str, int]]):
    def mapper(node_id: int, host: str, port: int) -> tuple[str, int] | None:
        seen.append((node_id, host, port))
        return PROXY[0], PROXY[1] + node_id

    return mapper


def _decode(frame: bytes, key: int, version: int):
    off = response_body_offset(memoryview(frame), api.response_header_version(key, version))
    return api.decode_response(key, version, memoryview(frame)[off:])


def _corpus_rows(keys: set[int]) -> list[dict]:
    if not CORPUS.is_dir():
        return []
    rows = [json.loads(line) for line in (CORPUS / "index.jsonl").read_text().splitlines()]
    return [r for r in rows if r["direction"] == "resp" and r["api_key"] in keys]


corpus_rows = _corpus_rows({3, 10, 60})


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus-tansu is absent (a user's clone)")
@pytest.mark.parametrize("row", corpus_rows, ids=[r["file"].split("/")[-1] for r in corpus_rows])
def test_corpus_responses_lose_every_broker_address(row: dict) -> None:
    frame = memoryview((CORPUS / row["file"]).read_bytes())
    key, version = row["api_key"], row["api_version"]
    before = _decode(bytes(frame), key, version)
    seen: list[tuple[int, str, int]] = []
    out = rewrite.rewrite_addresses(frame, key, version, _mapper(seen))
    if out is None:  # FindCoordinator with an error carries no address
        assert key == 10
        return
    assert struct.unpack_from(">i", out, 0)[0] == len(out) - 4
    assert struct.unpack_from(">i", out, 4)[0] == row["correlation_id"]
    after = _decode(out, key, version)
    if key == 3:
        assert [(b.node_id, b.host, b.port) for b in after.brokers] == [
            (b.node_id, PROXY[0], PROXY[1] + b.node_id) for b in before.brokers
        ]
        assert after.topics == before.topics  # nothing else changed
    elif key == 10:
        nodes = after.coordinators if version >= 4 else [after]
        assert all((c.host, c.port) == (PROXY[0], PROXY[1] + c.node_id) for c in nodes if c.error_code == 0)
    assert seen, "the mapper learned the brokers' real addresses"
    assert all(port not in (PROXY[1] + n for n in range(200)) for _n, _h, port in seen)


def _fetch_frame(version: int, endpoints: list[tuple[int, str, int]]) -> bytes:
    cls = api.API_INFO[1].response_class
    msg = cls(error_code=0, session_id=5)
    from kgate.codec.generated.data import fetch

    msg.node_endpoints = [fetch.NodeEndpoint(node_id=n, host=h, port=p, rack=None) for n, h, p in endpoints]
    return response_frame(42, 1, msg.encode(version))


def test_fetch_node_endpoints_are_rewritten() -> None:
    frame = memoryview(_fetch_frame(16, [(1, "broker-1.internal", 9092), (2, "broker-2.internal", 9092)]))
    seen: list[tuple[int, str, int]] = []
    out = rewrite.rewrite_addresses(frame, 1, 16, _mapper(seen))
    assert out is not None
    after = _decode(out, 1, 16)
    assert [(e.node_id, e.host, e.port) for e in after.node_endpoints] == [
        (1, "kgate.example", 7001),
        (2, "kgate.example", 7002),
    ]
    assert seen == [(1, "broker-1.internal", 9092), (2, "broker-2.internal", 9092)]


def test_fetch_without_endpoints_keeps_original_bytes() -> None:
    frame = memoryview(_fetch_frame(16, []))
    assert rewrite.rewrite_addresses(frame, 1, 16, _mapper([])) is None


def test_unservable_node_is_left_out() -> None:
    frame = memoryview(_fetch_frame(16, [(1, "a", 1), (2, "b", 2)]))
    out = rewrite.rewrite_addresses(frame, 1, 16, lambda n, h, p: None if n == 2 else ("k", 1))
    assert out is not None
    assert [e.node_id for e in _decode(out, 1, 16).node_endpoints] == [1]


def test_find_coordinator_unservable_becomes_retriable_error() -> None:
    msg = api.API_INFO[10].response_class(error_code=0, node_id=7, host="b7", port=9092)
    frame = memoryview(response_frame(1, 1, msg.encode(3)))
    out = rewrite.rewrite_addresses(frame, 10, 3, lambda n, h, p: None)
    after = _decode(out, 10, 3)
    assert (after.error_code, after.node_id, after.host, after.port) == (15, -1, "", -1)


def test_undecodable_metadata_is_refused_not_forwarded() -> None:
    frame = memoryview(response_frame(1, 1, b"\x00\x00\x00\x00\x05garbage"))
    with pytest.raises(rewrite.RewriteError):
        rewrite.rewrite_addresses(frame, 3, 12, _mapper([]))


def _api_versions_frame(version: int, entries: list[tuple[int, int, int]]) -> memoryview:
    msg = api.API_INFO[18].response_class(error_code=0)
    msg.api_keys = [ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in entries]
    return memoryview(response_frame(3, 0, msg.encode(version)))


def test_api_versions_capped_for_decoded_keys_only() -> None:
    metadata_max = api.API_INFO[3].max_version
    frame = _api_versions_frame(3, [(3, 0, metadata_max + 5), (0, 0, 11), (9999, 0, 3), (19, 0, 99)])
    out = rewrite.cap_api_versions(frame, 3)
    assert out is not None
    got = {e.api_key: (e.min_version, e.max_version) for e in _decode(out, 18, 3).api_keys}
    assert got[3] == (0, metadata_max)  # decoded by kgate: capped to the codec
    assert got[0] == (0, 11)  # Produce below v10 needs no decode: old clients keep working
    assert got[9999] == (0, 3)  # unknown api: passed through untouched
    assert got[19] == (0, 99)  # not decoded by kgate: untouched


def test_api_versions_unchanged_when_within_range() -> None:
    assert rewrite.cap_api_versions(_api_versions_frame(3, [(3, 0, 12), (18, 0, 3)]), 3) is None


def test_api_versions_too_new_for_codec_is_refused_like_a_broker_would() -> None:
    newer = api.API_INFO[18].max_version + 1
    frame = memoryview(response_frame(9, 0, b"\x00\x00" + b"\x00" * 20))
    out = rewrite.cap_api_versions(frame, newer)
    assert out is not None
    assert struct.unpack_from(">i", out, 4)[0] == 9
    msg = api.decode_response(18, 0, memoryview(out)[8:])
    assert msg.error_code == 35
    assert [(e.api_key, e.max_version) for e in msg.api_keys] == [(18, api.API_INFO[18].max_version)]
