"""A Metadata answer that names no broker reaches the client with the nodes kgate serves.

Kafka answers so from a broker fenced at the end of its controlled shutdown; librdkafka up to
2.16.0 then forgets every broker and can stay without any for good (the broker-restart stall of
issue 27, item 5: proxy/sansio/rewrite.py, ``fill_brokers``). The real client and a real broker
are in tests/e2e/test_broker_restart_stall.py; these pin each path of the core down: the answer
memo's (no filter), the full decode (a filter reads Metadata answers), and the memo's keeping
nothing of a completed answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.core_driver import make_core

from kgate.api import ApiKey, Filter, FilterContext, on_response
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.data import metadata as mm
from kgate.codec.headers import request_frame, response_body_offset, response_frame
from kgate.proxy.sansio import rewrite
from kgate.proxy.sansio.metadata_brokers import rewrite_brokers

KEY = int(ApiKey.METADATA)
BROKER = ("10.0.0.5", 9092)  # the broker's own address, which no client may learn


class ReadsMetadata(Filter):
    """Hooks Metadata answers (so the core decodes them) and changes nothing."""

    name = "test-reads-metadata"

    @on_response(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, response: Any) -> None:
        return None


def request(cid: int, version: int) -> bytes:
    req = mm.MetadataRequest(topics=[mm.MetadataRequestTopic(name="orders")])
    return request_frame(KEY, version, cid, "c", api.request_header_version(KEY, version), req.encode(version))


def answer(cid: int, version: int, brokers: list[tuple[int, str, int]]) -> bytes:
    """Kafka's answer: ``brokers`` and topic ``orders``, led by node 1, or by nobody when the
    list is empty (the fenced broker's answer)."""
    msg = mm.MetadataResponse(cluster_id="c", controller_id=1 if brokers else -1)
    msg.brokers = [mm.MetadataResponseBroker(node_id=n, host=h, port=p, rack=None) for n, h, p in brokers]
    leader = 1 if brokers else -1
    part = mm.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=leader, replica_nodes=[1])
    msg.topics = [mm.MetadataResponseTopic(name="orders", error_code=0, partitions=[part])]
    return response_frame(cid, api.response_header_version(KEY, version), msg.encode(version))


def decoded(data: bytes | bytearray, version: int) -> list[Any]:
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    out = []
    for f in frames:
        view = memoryview(f)
        off = response_body_offset(view, api.response_header_version(KEY, version))
        out.append(api.decode_response(KEY, version, view[off:]))
    return out


def brokers(msg: Any) -> list[tuple[int, str, int]]:
    return [(b.node_id, b.host, b.port) for b in msg.brokers]


@pytest.mark.parametrize("version", [1, 9, 12])
@pytest.mark.parametrize("hooked", [False, True], ids=["memo", "decoded"])
def test_fenced_answer_names_the_nodes_kgate_serves(version: int, hooked: bool) -> None:
    core, out = make_core([ReadsMetadata({})] if hooked else [])
    core.receive_client(request(1, version))
    core.receive_broker(answer(1, version, [(1, *BROKER)]))  # kgate learns node 1, binds its port
    core.receive_client(request(2, version))
    core.receive_broker(answer(2, version, []))  # the broker is fenced: no broker, no leader
    first, fenced = decoded(out.client.data, version)
    assert brokers(first) == [(1, "127.0.0.1", core.cluster.node_ports[1])]
    assert brokers(fenced) == brokers(first)  # before: [] and the client forgot node 1
    assert fenced.topics[0].partitions[0].leader_id == -1  # the rest is the broker's, as sent
    assert not core.closed


def test_completed_answer_is_not_remembered_and_follows_the_nodes() -> None:
    """The memo keeps no completed list: a node learned later is named in the next fenced answer."""
    core, out = make_core()
    core.receive_client(request(1, 12))
    core.receive_broker(answer(1, 12, [(1, *BROKER)]))
    core.receive_client(request(2, 12))
    core.receive_broker(answer(2, 12, []))
    core.receive_client(request(3, 12))
    core.receive_broker(answer(3, 12, [(1, *BROKER), (2, "10.0.0.6", 9092)]))  # node 2 joins
    core.receive_client(request(4, 12))
    core.receive_broker(answer(4, 12, []))
    *_, last = decoded(out.client.data, 12)
    ports = core.cluster.node_ports
    assert brokers(last) == [(1, "127.0.0.1", ports[1]), (2, "127.0.0.1", ports[2])]


def test_fenced_answer_before_any_node_is_known_passes_as_sent() -> None:
    core, out = make_core()
    core.receive_client(request(1, 12))
    core.receive_broker(answer(1, 12, []))
    (only,) = decoded(out.client.data, 12)
    assert brokers(only) == []
    assert not core.closed


@pytest.mark.parametrize("version", [0, 1, 3, 9, 12, 13])
def test_lean_and_full_rewrite_complete_the_same_way(version: int) -> None:
    served = [(1, "kgate.example", 7001), (2, "kgate.example", 7002)]
    frame = answer(5, version, [])
    view = memoryview(frame)
    off = response_body_offset(view, api.response_header_version(KEY, version))
    lean = rewrite_brokers(view, off, version, lambda n, h, p: None, lambda: served)
    msg = api.decode_response(KEY, version, view[off:])
    assert rewrite.rewrite_message(msg, KEY, version, lambda n, h, p: None, lambda: served)
    full = rewrite.reframe(view, off, msg.encode(version))
    assert decoded(lean, version) == decoded(full, version)
    assert brokers(decoded(lean, version)[0]) == served


def test_a_list_kgate_emptied_itself_is_not_completed() -> None:
    """Only the broker's own empty list is: brokers kgate cannot serve stay left out (both paths)."""
    served = [(1, "kgate.example", 7001)]
    frame = answer(6, 12, [(1, *BROKER)])
    view = memoryview(frame)
    off = response_body_offset(view, api.response_header_version(KEY, 12))
    lean = rewrite_brokers(view, off, 12, lambda n, h, p: None, lambda: served)
    msg = api.decode_response(KEY, 12, view[off:])
    rewrite.rewrite_message(msg, KEY, 12, lambda n, h, p: None, lambda: served)
    assert brokers(decoded(lean, 12)[0]) == brokers(msg) == []
