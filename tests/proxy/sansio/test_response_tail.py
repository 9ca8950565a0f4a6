"""The node-endpoint tail of Produce v10+, Fetch v16+, ShareFetch and ShareAcknowledge responses.

``codec.tail_walk.FrameWalker`` finds where a response's tail starts while its bytes arrive in any
chunking; ``proxy.sansio.response_tail`` forwards everything before the tail as it comes, holds only the
tail and rewrites its addresses to the same byte length. Frames are built with the codec from the
Kafka 4.3.1 schemas (what a broker sends), then cut at every byte boundary.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgate.codec import api
from kgate.codec.generated.data import fetch as F
from kgate.codec.generated.data import produce as PR
from kgate.codec.generated.share import share_acknowledge as SA
from kgate.codec.generated.share import share_fetch as SF
from kgate.codec.tail_walk import PAD_TAG, FrameWalker, WalkError, fit_tagged, read_tagged
from kgate.proxy.sansio import response_tail
from kgate.proxy.sansio.response_tail import TailStream

BROKER = "broker-0.internal.example"


def _frame(api_key: int, version: int, msg: Any, cid: int = 7) -> bytes:
    header = cid.to_bytes(4, "big")
    if api.response_header_version(api_key, version) >= 1:
        header += b"\x00"
    body = header + bytes(msg.encode(version))
    return len(body).to_bytes(4, "big") + body


def _records(n: int) -> bytes:
    return bytes((i * 7 + 3) % 256 for i in range(n))  # not a real batch: kgate never reads records


def _fetch(version: int, endpoints: list[tuple[int, str, int]] | None, records: int = 300, parts: int = 2) -> bytes:
    partitions = [
        F.PartitionData(
            partition_index=p,
            high_watermark=1000 + p,
            aborted_transactions=[F.AbortedTransaction(producer_id=5, first_offset=6)] if p else None,
            current_leader=F.LeaderIdAndEpoch(leader_id=1, leader_epoch=3),
            records=_records(records) if p % 2 == 0 else None,
        )
        for p in range(parts)
    ]
    msg = F.FetchResponse(
        responses=[F.FetchableTopicResponse(topic_id=uuid.UUID(int=42), partitions=partitions)],
        node_endpoints=[F.NodeEndpoint(node_id=i, host=h, port=p, rack=None) for i, h, p in endpoints or []],
    )
    return _frame(1, version, msg)


def _produce(version: int, endpoints: list[tuple[int, str, int]] | None) -> bytes:
    topic = PR.TopicProduceResponse(
        name="orders" if version < 13 else "",
        topic_id=uuid.UUID(int=9),
        partition_responses=[
            PR.PartitionProduceResponse(
                index=0,
                error_code=6,
                error_message="not the leader",
                record_errors=[PR.BatchIndexAndErrorMessage(batch_index=1, batch_index_error_message="x")],
                current_leader=PR.LeaderIdAndEpoch(leader_id=2, leader_epoch=9),
            )
        ],
    )
    msg = PR.ProduceResponse(
        responses=[topic],
        node_endpoints=[PR.NodeEndpoint(node_id=i, host=h, port=p, rack="r1") for i, h, p in endpoints or []],
    )
    return _frame(0, version, msg)


def _share_fetch(version: int, endpoints: list[tuple[int, str, int]]) -> bytes:
    part = SF.PartitionData(
        partition_index=0,
        current_leader=SF.LeaderIdAndEpoch(leader_id=1, leader_epoch=1),
        records=_records(200),
        acquired_records=[SF.AcquiredRecords(first_offset=0, last_offset=9, delivery_count=1)],
    )
    msg = SF.ShareFetchResponse(
        responses=[SF.ShareFetchableTopicResponse(topic_id=uuid.UUID(int=3), partitions=[part])],
        node_endpoints=[SF.NodeEndpoint(node_id=i, host=h, port=p) for i, h, p in endpoints],
    )
    return _frame(78, version, msg)


def _share_ack(version: int, endpoints: list[tuple[int, str, int]]) -> bytes:
    part = SA.PartitionData(partition_index=0, current_leader=SA.LeaderIdAndEpoch(leader_id=1, leader_epoch=1))
    msg = SA.ShareAcknowledgeResponse(
        responses=[SA.ShareAcknowledgeTopicResponse(topic_id=uuid.UUID(int=3), partitions=[part])],
        node_endpoints=[SA.NodeEndpoint(node_id=i, host=h, port=p) for i, h, p in endpoints],
    )
    return _frame(79, version, msg)


def _mapper(host: str = "kgate", base: int = 19000) -> Any:
    return lambda node_id, _host, _port: (host, base + node_id)


def _stream(frame: bytes, api_key: int, version: int, cuts: list[int], mapper: Any) -> tuple[bytes, int]:
    """Feed ``frame`` cut at ``cuts``; what went out, and the most bytes held at once."""
    ts = TailStream(response_tail.spec(api_key, version), len(frame))
    out: list[bytes] = []
    most = 0
    prev = 0
    for cut in [*cuts, len(frame)]:
        out.append(bytes(ts.piece(memoryview(frame)[prev:cut])))
        most = max(most, sum(map(len, ts.held)))
        prev = cut
    out.append(ts.finish(mapper))
    return b"".join(out), most


def _decode(frame: bytes, api_key: int, version: int) -> Any:
    hv = api.response_header_version(api_key, version)
    return api.decode_response(api_key, version, memoryview(frame)[8 + (1 if hv else 0) :])


ENDPOINTS = [(0, BROKER, 9092), (1, "broker-1.internal.example", 9092)]
CASES = [
    ("fetch v16", 1, 16, lambda e: _fetch(16, e)),
    ("fetch v17", 1, 17, lambda e: _fetch(17, e)),
    ("fetch v18", 1, 18, lambda e: _fetch(18, e)),
    ("produce v10", 0, 10, lambda e: _produce(10, e)),
    ("produce v12", 0, 12, lambda e: _produce(12, e)),
    ("produce v13", 0, 13, lambda e: _produce(13, e)),
    ("share fetch v1", 78, 1, lambda e: _share_fetch(1, e)),
    ("share fetch v2", 78, 2, lambda e: _share_fetch(2, e)),
    ("share ack v1", 79, 1, lambda e: _share_ack(1, e)),
    ("share ack v2", 79, 2, lambda e: _share_ack(2, e)),
]


@pytest.mark.parametrize(("name", "key", "version", "build"), CASES, ids=[c[0] for c in CASES])
def test_every_single_cut_gives_the_same_rewritten_frame(name: str, key: int, version: int, build: Any) -> None:
    frame = build(ENDPOINTS)
    whole = response_tail.spec(key, version).rewrite_frame(memoryview(frame), _mapper())
    assert len(whole) == len(frame)  # the size prefix stays true
    assert BROKER.encode() not in bytes(whole)
    msg = _decode(bytes(whole), key, version)
    assert [(n.node_id, n.host, n.port) for n in msg.node_endpoints] == [(0, "kgate", 19000), (1, "kgate", 19001)]
    for cut in range(1, len(frame)):
        got, _ = _stream(frame, key, version, [cut], _mapper())
        assert got == bytes(whole), f"cut at byte {cut}"
    # and byte by byte: every prefix, record set and tail split everywhere at once
    got, _ = _stream(frame, key, version, list(range(1, len(frame))), _mapper())
    assert got == bytes(whole)


@pytest.mark.parametrize(("name", "key", "version", "build"), CASES, ids=[c[0] for c in CASES])
def test_a_tail_without_endpoints_goes_as_it_came(name: str, key: int, version: int, build: Any) -> None:
    frame = build([])
    assert response_tail.spec(key, version).rewrite_frame(memoryview(frame), _mapper()) is not None
    for cut in range(1, len(frame)):
        got, _ = _stream(frame, key, version, [cut], _mapper())
        assert got == frame


def test_fetch_records_go_on_before_the_tail_arrives() -> None:
    """Everything before the tail is forwarded the moment it arrives; only the tail waits."""
    frame = _fetch(17, ENDPOINTS, records=5000)
    ts = TailStream(response_tail.spec(1, 17), len(frame))
    first = ts.piece(memoryview(frame)[:4000])
    assert bytes(first) == frame[:4000]
    assert not ts.held
    rest = ts.piece(memoryview(frame)[4000:])
    tail_len = sum(map(len, ts.held))
    assert 0 < tail_len < 120
    assert len(first) + len(rest) + tail_len == len(frame)


def test_endpoints_larger_than_the_room_are_dropped_to_a_metadata_refresh() -> None:
    """Mapped addresses longer than the broker's cannot fit the length already sent: no hints."""
    frame = _fetch(16, [(0, "b0", 9092)])
    long_host = "kgate-listener.a-rather-long-domain.example.com"
    for cut in (9, len(frame) - 5, len(frame) - 1):
        got, _ = _stream(frame, 1, 16, [cut], _mapper(long_host))
        assert len(got) == len(frame)
        assert b"b0" not in got[-40:]
        msg = _decode(got, 1, 16)
        assert msg.node_endpoints == []
        assert msg.responses[0].partitions[0].records.tobytes() == _records(300)


def test_shorter_addresses_are_padded_with_a_tag_clients_skip() -> None:
    frame = _produce(12, [(3, BROKER, 9092)])
    got = bytes(response_tail.spec(0, 12).rewrite_frame(memoryview(frame), _mapper("k", 7000)))
    assert len(got) == len(frame)
    msg = _decode(got, 0, 12)
    assert [(n.node_id, n.host, n.port, n.rack) for n in msg.node_endpoints] == [(3, "k", 7003, "r1")]
    assert [tag for tag, _ in msg._unknown_tagged] in ([0x7F], [PAD_TAG])


def test_share_fetch_endpoints_that_do_not_fit_leave_an_empty_list() -> None:
    frame = _share_fetch(2, [(0, "b", 1)])
    got = bytes(response_tail.spec(78, 2).rewrite_frame(memoryview(frame), _mapper("a-much-longer-host")))
    assert len(got) == len(frame)
    assert _decode(got, 78, 2).node_endpoints == []


def test_an_unservable_node_is_left_out() -> None:
    frame = _fetch(16, ENDPOINTS)
    got = bytes(response_tail.spec(1, 16).rewrite_frame(memoryview(frame), lambda i, h, p: None if i else ("k", 1)))
    assert [n.node_id for n in _decode(got, 1, 16).node_endpoints] == [0]
    assert b"broker-" not in got


@pytest.mark.parametrize("length", range(0, 300))
def test_fit_tagged_gives_exactly_the_length_or_none(length: int) -> None:
    entries = [(0, b"abc"), (5, b"")]
    out = fit_tagged(entries, length)
    used = 1 + 2 + 3 + 2
    if length < used or length == used + 1:
        assert out is None
    else:
        assert out is not None
        assert len(out) == length
        got, end = read_tagged(out, 0)
        assert end == length
        assert got[:2] == entries


def test_a_record_set_longer_than_the_frame_is_refused() -> None:
    frame = bytearray(_fetch(16, []))
    total = len(frame)
    # the first partition's records length (compact: N+1) sits just before the records
    at = bytes(frame).index(_records(300)) - 2
    frame[at : at + 2] = b"\xff\x7f"  # 16383 bytes: more than the frame has
    with pytest.raises(WalkError):
        FrameWalker(response_tail.spec(1, 16).program, total).feed(bytes(frame))


def test_a_frame_that_ends_before_its_tail_is_refused() -> None:
    frame = _fetch(16, ENDPOINTS)
    short = frame[:40]
    ts = TailStream(response_tail.spec(1, 16), len(short))

    def stream_it() -> None:  # the piece or the finish may find it: either refuses
        ts.piece(short)
        ts.finish(_mapper())

    with pytest.raises(WalkError):
        stream_it()


def test_held_bytes_do_not_grow_with_the_records() -> None:
    """A 4 MB Fetch fed in 64 KB reads: kgate holds the tail only, never the records."""
    frame = _fetch(17, ENDPOINTS, records=2_000_000, parts=4)
    cuts = list(range(65536, len(frame), 65536))
    got, most = _stream(frame, 1, 17, cuts, _mapper())
    assert len(got) == len(frame)
    assert most < 200
    assert got == bytes(response_tail.spec(1, 17).rewrite_frame(memoryview(frame), _mapper()))


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from([16, 17, 18]),
    hosts=st.lists(st.text(min_size=0, max_size=30), max_size=4),
    mapped=st.text(min_size=1, max_size=40),
    records=st.integers(0, 600),
    parts=st.integers(0, 3),
    data=st.data(),
)
def test_any_chunking_of_any_fetch_gives_one_answer(
    version: int, hosts: list[str], mapped: str, records: int, parts: int, data: Any
) -> None:
    frame = _fetch(version, [(i, h, 9092) for i, h in enumerate(hosts)], records=records, parts=parts)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(frame) - 1), max_size=12))))
    got, _ = _stream(frame, 1, version, cuts, _mapper(mapped))
    assert len(got) == len(frame)
    msg = _decode(got, 1, version)
    assert all(n.host == mapped for n in msg.node_endpoints)
    assert len(msg.node_endpoints) in (0, len(hosts))
    assert got == bytes(response_tail.spec(1, version).rewrite_frame(memoryview(frame), _mapper(mapped)))


def _tansu_fetch(version: int = 16) -> bytes:
    """Tansu's Fetch answer for a deleted topic's id, as it sends it: a zero topic id, error 3, a
    ``current_leader`` tag, and tag 0 (node endpoints) present with an empty list."""
    part = F.PartitionData(
        partition_index=0,
        error_code=3,
        high_watermark=0,
        last_stable_offset=0,
        current_leader=F.LeaderIdAndEpoch(leader_id=0, leader_epoch=0),
        records=b"",
    )
    msg = F.FetchResponse(responses=[F.FetchableTopicResponse(topic_id=uuid.UUID(int=0), partitions=[part])])
    frame = _frame(1, version, msg)
    assert frame.endswith(b"\x00")
    assert b"\x01\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00" in frame
    frame = frame[:-1] + b"\x01\x00\x01\x01"  # the tagged section as Tansu writes it
    return (len(frame) - 4).to_bytes(4, "big") + frame[4:]


def _top_tags(frame: bytes, version: int) -> list[int]:
    """The tags of the body's top-level tagged section (the tail)."""
    spec = response_tail.spec(1, version)
    entries, end = read_tagged(frame, spec.find_tail(memoryview(frame), len(frame)))
    assert end == len(frame)
    return [tag for tag, _ in entries]


@pytest.mark.parametrize("version", [16, 17, 18])
def test_an_empty_hint_list_is_left_out_as_kafka_does(version: int) -> None:
    """Tansu writes tag 0 with an empty list in every Fetch v16+ answer; Kafka never writes a tagged
    field that holds its default. In Tansu's answer to a deleted id, librdkafka 2.16 takes the
    empty list as leader hints for a topic it cannot name (zero id) and dies on a NULL name
    (docs/compatibility.md): kgate sends the list left out, padded to the same length."""
    tansu = _tansu_fetch(version)
    assert _top_tags(tansu, version) == [0]
    spec = response_tail.spec(1, version)
    whole = bytes(spec.rewrite_frame(memoryview(tansu), _mapper()))
    assert len(whole) == len(tansu)
    assert whole[:-4] == tansu[:-4]
    assert _top_tags(whole, version) == [0x7F]  # no node endpoints: one tag clients skip
    assert whole[-4:] == fit_tagged([], 4)
    assert response_tail.dropped_empty_hints(tansu)
    assert not response_tail.dropped_empty_hints(_fetch(version, ENDPOINTS))
    for cut in range(1, len(tansu)):
        ts = TailStream(spec, len(tansu))
        got = bytes(ts.piece(memoryview(tansu)[:cut])) + bytes(ts.piece(memoryview(tansu)[cut:])) + ts.finish(_mapper())
        assert got == whole
        assert not ts.rewritten


def test_an_empty_hint_list_beside_other_tags_is_left_out() -> None:
    frame = _fetch(16, [])
    tail = fit_tagged([(0, b"\x01"), (5, b"xyz")], 9)
    assert tail is not None
    frame = frame[:-1] + tail
    frame = (len(frame) - 4).to_bytes(4, "big") + frame[4:]
    got = bytes(response_tail.spec(1, 16).rewrite_frame(memoryview(frame), _mapper()))
    assert len(got) == len(frame)
    assert _top_tags(got, 16) == [5, 0x7F]
    assert _decode(got, 1, 16)._unknown_tagged[0] == (5, b"xyz")  # the broker's own tags stay


def test_a_frame_with_no_tagged_field_goes_as_it_came() -> None:
    frame = _fetch(16, [])
    assert frame.endswith(b"\x00")
    spec = response_tail.spec(1, 16)
    assert spec.rewrite_frame(memoryview(frame), _mapper()) == memoryview(frame)
    ts = TailStream(spec, len(frame))
    assert bytes(ts.piece(frame)) + ts.finish(_mapper()) == frame
    assert not ts.rewritten


def test_a_frame_of_the_same_length_but_another_shape_is_walked_again() -> None:
    """The whole-frame walk remembers where the tail of a frame of this length was; another frame
    of that length with other length bytes (another topic name, an error message) is walked anew."""

    def produce(name: str, message: str | None, hosts: list[str]) -> bytes:
        part = PR.PartitionProduceResponse(index=0, error_message=message)
        msg = PR.ProduceResponse(
            responses=[PR.TopicProduceResponse(name=name, partition_responses=[part])],
            node_endpoints=[PR.NodeEndpoint(node_id=i, host=h, port=1) for i, h in enumerate(hosts)],
        )
        return _frame(0, 11, msg)

    first, second = produce("abcd", None, ["b0"]), produce("ab", "xy", ["b0"])
    assert len(first) == len(second)
    assert first != second
    spec = response_tail.spec(0, 11)
    for frame in (first, second, first, second):
        got = bytes(spec.rewrite_frame(memoryview(frame), _mapper("kk", 100)))
        assert [n.host for n in _decode(got, 0, 11).node_endpoints] == ["kk"]
        assert got == _stream(frame, 0, 11, [len(frame) // 2], _mapper("kk", 100))[0]
