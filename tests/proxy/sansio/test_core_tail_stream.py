"""The core streams Produce v10+ / Fetch v16+ answers cut-through and rewrites only their tail.

``ConnectionCore`` (driven sans-IO by support.core_driver) must forward a Fetch answer's bytes
as they arrive (its records never held whole), hold only the node-endpoint tail, and send the
tail with kgate's addresses at the original length; a pipelined answer behind it follows in
order; an answer that does not walk closes the connection before any address goes out. The
frames are what a broker sends (built by the codec from the Kafka 4.3.1 schemas).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from support.core_driver import make_core

from kgate.api import ApiKey, Filter, FilterContext, on_response
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.api_keys import FETCH, PRODUCE
from kgate.codec.generated.data import fetch as F
from kgate.codec.generated.data import produce as PR
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.plans import ResponsePlan
from kgate.testing.frames import request_bytes

BROKER = b"broker-0.internal.example"


def _answer(api_key: int, version: int, msg: Any, cid: int) -> bytes:
    body = cid.to_bytes(4, "big") + b"\x00" + bytes(msg.encode(version))
    assert api.response_header_version(api_key, version) == 1
    return len(body).to_bytes(4, "big") + body


def _fetch_answer(cid: int, records: int, version: int = 17, host: str = BROKER.decode()) -> bytes:
    parts = [
        F.PartitionData(
            partition_index=p,
            records=bytes([p + 1]) * records,
            current_leader=F.LeaderIdAndEpoch(leader_id=1, leader_epoch=2),
        )
        for p in range(3)
    ]
    msg = F.FetchResponse(
        responses=[F.FetchableTopicResponse(topic_id=uuid.UUID(int=5), partitions=parts)],
        node_endpoints=[F.NodeEndpoint(node_id=i, host=host, port=9092 + i) for i in (0, 1)],
    )
    return _answer(FETCH, version, msg, cid)


def _fetch_request(cid: int, version: int = 17) -> bytes:
    return request_bytes(FETCH, version, F.FetchRequest(max_wait_ms=1, min_bytes=1, topics=[]), correlation_id=cid)


def _core(**proxy: Any) -> tuple[Any, Any]:
    core, out = make_core(**proxy)
    # the nodes' listeners are bound already (binding is proxy/runtime/cluster.py's business, not this test's)
    core.cluster.node_ports.update({0: 19100, 1: 19101})
    return core, out


def _frames(data: bytes | bytearray) -> list[memoryview]:
    frames, end = FrameReader(1 << 30).split(bytes(data))
    assert end == len(data)
    return frames


def _endpoints(frame: memoryview, version: int = 17) -> list[tuple[int, str, int]]:
    msg = api.decode_response(FETCH, version, frame[9:])
    return [(n.node_id, n.host, n.port) for n in msg.node_endpoints]


def test_fetch_v17_streams_and_its_tail_is_rewritten() -> None:
    core, out = _core()
    core.receive_client(_fetch_request(1))
    assert core.upstream_waiting[0].plan is ResponsePlan.TAIL
    answer = _fetch_answer(1, records=200_000)
    first = answer[:70_000]
    core.receive_broker(first)
    assert bytes(out.client.data) == first  # cut-through: the first read went on at once
    for at in range(70_000, len(answer), 65_536):
        core.receive_broker(answer[at : at + 65_536])
        assert core._tail is None or sum(map(len, core._tail.held)) < 200  # only the tail is held
    (frame,) = _frames(out.client.data)
    assert len(frame) == len(answer)
    assert BROKER not in bytes(frame)
    assert _endpoints(frame) == [(0, "127.0.0.1", 19100), (1, "127.0.0.1", 19101)]
    assert bytes(frame[:-80]) == answer[:-80]  # records and partition headers untouched
    assert core.drained
    assert out.close_reason is None
    assert core.cluster.metrics.rewrite_count(FETCH).n == 1


@pytest.mark.parametrize("cut", range(1, 200, 7))
def test_answers_split_anywhere_and_pipelined_come_out_in_order(cut: int) -> None:
    core, out = _core()
    core.receive_client(_fetch_request(1) + _fetch_request(2))
    data = _fetch_answer(1, records=30) + _fetch_answer(2, records=30)
    for at in range(0, len(data), cut):
        core.receive_broker(data[at : at + cut])
    frames = _frames(out.client.data)
    assert [int.from_bytes(f[4:8], "big") for f in frames] == [1, 2]
    assert BROKER not in bytes(out.client.data)
    assert [_endpoints(f) for f in frames] == [[(0, "127.0.0.1", 19100), (1, "127.0.0.1", 19101)]] * 2


def test_a_whole_answer_takes_the_shortcut_and_is_rewritten() -> None:
    core, out = _core()
    core.receive_client(_fetch_request(1, 16))
    core.receive_broker(_fetch_answer(1, records=10, version=16))
    (frame,) = _frames(out.client.data)
    assert _endpoints(frame, 16) == [(0, "127.0.0.1", 19100), (1, "127.0.0.1", 19101)]
    assert core.cluster.metrics.rewrite_count(FETCH).n == 1  # kgate_address_rewrites counts it


def test_produce_v12_answer_is_rewritten() -> None:
    core, out = _core()
    req = PR.ProduceRequest(acks=1, timeout_ms=1000, transactional_id=None, topic_data=[])
    core.receive_client(request_bytes(PRODUCE, 12, req, correlation_id=4))
    assert core.upstream_waiting[0].plan is ResponsePlan.TAIL
    msg = PR.ProduceResponse(responses=[], node_endpoints=[PR.NodeEndpoint(node_id=1, host=BROKER.decode(), port=1)])
    answer = _answer(PRODUCE, 12, msg, 4)
    core.receive_broker(answer[:10])
    core.receive_broker(answer[10:])
    (frame,) = _frames(out.client.data)
    got = api.decode_response(PRODUCE, 12, frame[9:])
    assert [(n.node_id, n.host, n.port) for n in got.node_endpoints] == [(1, "127.0.0.1", 19101)]


def test_an_answer_that_does_not_walk_closes_before_its_tail_goes_out() -> None:
    core, out = _core()
    core.receive_client(_fetch_request(1))
    answer = bytearray(_fetch_answer(1, records=5000))
    at = bytes(answer).index(b"\x01" * 5000) - 2  # the first record set's compact length
    answer[at : at + 2] = b"\xff\x7f"  # 16382 bytes: the next partition is read from inside records
    core.receive_broker(bytes(answer[:3000]))
    core.receive_broker(bytes(answer[3000:]))
    assert out.close_reason is CloseReason.UNDECODABLE_RESPONSE
    assert BROKER not in bytes(out.client.data)
    assert len(out.client.data) < len(answer)


class _ReadsFetch(Filter):
    name = "test-reads-fetch"

    @on_response(ApiKey.FETCH)
    def seen(self, ctx: FilterContext, response: Any) -> None:
        return None


def test_a_response_hook_still_gets_the_decoded_answer_rewritten() -> None:
    core, out = make_core([_ReadsFetch({})])
    core.cluster.node_ports.update({0: 19100, 1: 19101})
    core.receive_client(_fetch_request(1))
    assert core.upstream_waiting[0].plan is ResponsePlan.DECODE
    core.receive_broker(_fetch_answer(1, records=10))
    (frame,) = _frames(out.client.data)
    assert _endpoints(frame) == [(0, "127.0.0.1", 19100), (1, "127.0.0.1", 19101)]


def _tansu_deleted_id_answer(cid: int, version: int = 16) -> bytes:
    """Tansu's Fetch answer for a deleted topic's id, byte for byte as it sends it (probed with Tansu
    0.6.0): a zero topic id, error 3, a ``current_leader`` tag, and tag 0 (node endpoints) present
    with an empty list. librdkafka 2.16 crashed on it (docs/compatibility.md)."""
    part = F.PartitionData(
        partition_index=0,
        error_code=3,
        high_watermark=0,
        last_stable_offset=0,
        current_leader=F.LeaderIdAndEpoch(leader_id=0, leader_epoch=0),
        records=b"",
    )
    msg = F.FetchResponse(responses=[F.FetchableTopicResponse(topic_id=uuid.UUID(int=0), partitions=[part])])
    answer = _answer(FETCH, version, msg, cid)
    assert answer.endswith(b"\x00")
    answer = answer[:-1] + b"\x01\x00\x01\x01"
    return (len(answer) - 4).to_bytes(4, "big") + answer[4:]


class _NamesFetch(Filter):
    """Asks for topic names (so small Fetch answers that may report a dead id are decoded: WATCH_TAIL)."""

    name = "test-names-fetch"

    @on_response(ApiKey.PRODUCE)
    def seen(self, ctx: FilterContext, response: Any) -> None:
        return None


def _top_tags(frame: memoryview, version: int = 16) -> list[int]:
    msg = api.decode_response(FETCH, version, frame[9:])
    return [tag for tag, _ in msg._unknown_tagged or []] + ([0] if msg.node_endpoints else [])


@pytest.mark.parametrize(
    ("filters", "plan"),
    [((), ResponsePlan.TAIL), ((_NamesFetch({}),), ResponsePlan.WATCH_TAIL), ((_ReadsFetch({}),), ResponsePlan.DECODE)],
    ids=["tail", "watch-tail", "hooked"],
)
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_an_empty_hint_list_never_reaches_the_client(filters: Any, plan: ResponsePlan, split: bool) -> None:
    """Whatever the plan (streamed, decoded to learn names, decoded for a hook), an empty node-endpoint
    list is left out of the answer, which keeps its length: the client sees no tag 0, like Kafka's."""
    core, out = make_core(list(filters))
    core.receive_client(_fetch_request(1, 16))
    assert core.upstream_waiting[0].plan is plan
    answer = _tansu_deleted_id_answer(1)
    if split:
        core.receive_broker(answer[:20])
        core.receive_broker(answer[20:])
    else:
        core.receive_broker(answer)
    (frame,) = _frames(out.client.data)
    assert out.close_reason is None
    assert len(frame) == len(answer)
    assert bytes(frame[:-4]) == answer[:-4]
    assert _top_tags(frame) == [0x7F]
    assert core.cluster.metrics.rewrite_count(FETCH).n == 0  # no address was rewritten
