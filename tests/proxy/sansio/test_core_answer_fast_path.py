"""The core's shortcuts: a broker answer that arrives whole and passes as is, and exchanges
built without ``__init__`` on the header-only path.

A broker answer that arrives whole in one read and passes as is:

``ConnectionCore.receive_broker`` writes such an answer straight to the client when it is the
next one owed, skipping ``_response`` and ``_flush`` (a per-request saving measured in
docs/performance.md). What ``_flush`` would have done after it must still happen: answers kgate
made itself and queued behind it go out, and reading resumes once the in-flight limit frees.
A Metadata answer takes the same way once the answer memo rewrote its broker list, and must
read exactly as through the frame splitter; a rewrite that fails closes the connection with
nothing sent. The hypothesis machines (test_core_machine.py) cover the shortcut among every
other ordering; these pin each of those down on its own.
"""

from __future__ import annotations

from typing import Any

from support.core_driver import Sink, make_core

from kgate.api import ApiKey, ErrorCode, Filter, FilterContext, Respond, error_response, on_request
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.data import metadata as mm
from kgate.codec.generated.data import produce as pm
from kgate.codec.generated.session.api_versions import ApiVersion
from kgate.codec.headers import request_frame, response_frame
from kgate.proxy.sansio.exchange import Exchange

PRODUCE_V, METADATA_V = 9, 12


class AnswersMetadata(Filter):
    """Answers every Metadata request itself, at once (no suspension)."""

    name = "test-answers-metadata"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        answer = error_response(int(ApiKey.METADATA), METADATA_V, request, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        return Respond(answer)


def produce(cid: int) -> bytes:
    req = pm.ProduceRequest(acks=1, timeout_ms=1000, transactional_id=None)
    req.topic_data = [pm.TopicProduceData(name="t", partition_data=[pm.PartitionProduceData(index=0, records=None)])]
    hv = api.request_header_version(int(ApiKey.PRODUCE), PRODUCE_V)
    return request_frame(int(ApiKey.PRODUCE), PRODUCE_V, cid, "c", hv, req.encode(PRODUCE_V))


def metadata(cid: int) -> bytes:
    req = mm.MetadataRequest(topics=[mm.MetadataRequestTopic(name="x")])
    hv = api.request_header_version(int(ApiKey.METADATA), METADATA_V)
    return request_frame(int(ApiKey.METADATA), METADATA_V, cid, "c", hv, req.encode(METADATA_V))


def produce_answer(cid: int) -> bytes:
    key = int(ApiKey.PRODUCE)
    body = api.API_INFO[key].response_class().encode(PRODUCE_V)
    return response_frame(cid, api.response_header_version(key, PRODUCE_V), body)


def answer_cids(data: bytes | bytearray) -> list[int]:
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    return [int.from_bytes(f[4:8], "big", signed=True) for f in frames]


def test_kgate_answer_queued_behind_a_passing_answer_follows_it() -> None:
    core, out = make_core([AnswersMetadata({})])
    core.receive_client(produce(1) + metadata(2))  # 1 goes upstream; kgate answers 2 at once
    assert answer_cids(out.client.data) == []  # 2 waits for 1: answers keep request order
    core.receive_broker(produce_answer(1))  # whole, in one read: the shortcut
    assert answer_cids(out.client.data) == [1, 2]
    assert not core.pending
    assert not core.upstream_waiting


def test_in_flight_limit_resumes_reading_after_a_shortcut_answer() -> None:
    core, out = make_core(max_inflight_requests=2)
    core.receive_client(produce(1) + produce(2))
    assert "inflight-limit" in out.client_paused
    core.receive_broker(produce_answer(1))
    assert answer_cids(out.client.data) == [1]
    assert "inflight-limit" not in out.client_paused


def test_answer_out_of_order_still_closes_the_connection() -> None:
    core, out = make_core()
    core.receive_client(produce(1) + produce(2))
    core.receive_broker(produce_answer(2))  # whole, but not the one owed: no shortcut
    assert core.closed
    assert answer_cids(out.client.data) == []
    assert out.close_reason is not None
    assert out.close_reason.value == "out-of-order"


def test_header_only_exchanges_have_every_attribute_init_sets() -> None:
    """``tracked_exchange`` (proxy/sansio/exchange.py) builds exchanges without ``__init__``; they must read
    exactly like built ones.

    Compiled (tools/compile_hot.py) it calls ``__init__`` (a native class cannot be built
    otherwise) and mypyc lists the attributes in ``__mypyc_attrs__`` instead of ``__slots__``.
    """
    core, _out = make_core()
    core.receive_client(produce(7))
    (tracked,) = core.pending
    built = Exchange(7, int(ApiKey.PRODUCE), PRODUCE_V, None, None, tracked.plan)
    for name in ("cid", "api_key", "api_version", "request", "state", "plan", "response"):
        assert getattr(tracked, name) == getattr(built, name), name
    observer_only = {"t0_ns", "sent_ns", "up_ns", "req", "req_bytes"}  # set only while an observer is installed
    waits_only = {"wait"}  # set only for requests the broker may hold (proxy/sansio/deadlines.py)
    attributes = getattr(Exchange, "__slots__", None) or Exchange.__mypyc_attrs__  # type: ignore[attr-defined]
    assert set(attributes) - observer_only - waits_only == {
        "cid",
        "api_key",
        "api_version",
        "request",
        "state",
        "plan",
        "response",
    }, "a new Exchange attribute: set it in exchange.tracked_exchange too"


def metadata_answer(cid: int) -> bytes:
    key = int(ApiKey.METADATA)
    msg = api.API_INFO[key].response_class()
    msg.topics = [mm.MetadataResponseTopic(name="orders", error_code=0, partitions=[])]
    return response_frame(cid, api.response_header_version(key, METADATA_V), msg.encode(METADATA_V))


def test_metadata_answer_through_the_shortcut_reads_as_through_the_frame_splitter() -> None:
    whole_core, whole_out = make_core()
    split_core, split_out = make_core()
    for core in (whole_core, split_core):
        core.receive_client(metadata(3))
    answer = metadata_answer(3)
    whole_core.receive_broker(answer)  # one read: the shortcut
    split_core.receive_broker(answer[:5])  # two reads: the frame reader and _response
    split_core.receive_broker(answer[5:])
    assert answer_cids(whole_out.client.data) == [3]
    assert bytes(whole_out.client.data) == bytes(split_out.client.data)
    assert not whole_core.pending
    assert not whole_core.upstream_waiting


def test_undecodable_metadata_answer_closes_without_answering() -> None:
    core, out = make_core()
    core.receive_client(metadata(4))
    key = int(ApiKey.METADATA)
    garbage = response_frame(4, api.response_header_version(key, METADATA_V), b"\xff\xff\xff")
    core.receive_broker(garbage)
    assert core.closed
    assert bytes(out.client.data) == b""
    assert out.close_reason is not None
    assert out.close_reason.value == "undecodable-response"


def test_metadata_answers_count_as_rewrites_in_the_cluster_metrics() -> None:
    """``kgate_address_rewrites``: the core bumps the cluster's counter itself (bound once, no call
    per answer), whether the answer goes through the shortcut or through the frame splitter."""
    core, out = make_core()
    rewrites = core.cluster.metrics.rewrites
    core.receive_client(metadata(1))
    core.receive_broker(metadata_answer(1))  # whole: the shortcut
    assert rewrites[int(ApiKey.METADATA)].n == 1
    core.receive_client(metadata(2))
    answer = metadata_answer(2)
    core.receive_broker(answer[:5])  # in two reads: _response
    core.receive_broker(answer[5:])
    assert rewrites[int(ApiKey.METADATA)].n == 2
    assert answer_cids(out.client.data) == [1, 2]


def test_direct_writes_go_to_the_bound_writers_and_back_to_the_carrier_once_unbound() -> None:
    """``write_up`` / ``write_client``: the carrier's transports' ``write`` bound in place of ``send_upstream`` /
    ``send_client`` (proxy/carrier/connection.py binds them while the transports are open)."""
    core, out = make_core()
    up, client = Sink(), Sink()
    core.write_up, core.write_client = up.write, client.write
    core.receive_client(produce(1))
    core.receive_broker(produce_answer(1))
    assert (bytes(up.data), bytes(client.data)) == (produce(1), produce_answer(1))
    assert out.upstream.writes == out.client.writes == 0
    core.write_up, core.write_client = out.send_upstream, out.send_client  # transports gone: the carrier again
    core.receive_client(produce(2))
    core.receive_broker(produce_answer(2))
    assert (bytes(out.upstream.data), bytes(out.client.data)) == (produce(2), produce_answer(2))
    assert up.writes == client.writes == 1


API_VERSIONS_V = 3


def api_versions(cid: int) -> bytes:
    key = int(ApiKey.API_VERSIONS)
    req = api.API_INFO[key].request_class(client_software_name="t", client_software_version="1")
    hv = api.request_header_version(key, API_VERSIONS_V)
    return request_frame(key, API_VERSIONS_V, cid, "c", hv, req.encode(API_VERSIONS_V))


def api_versions_answer(cid: int) -> bytes:
    """A broker's ApiVersions answer that kgate must cap: Produce up to v99."""
    key = int(ApiKey.API_VERSIONS)
    msg = api.API_INFO[key].response_class(error_code=0)
    msg.api_keys = [ApiVersion(api_key=int(ApiKey.PRODUCE), min_version=0, max_version=99)]
    return response_frame(cid, api.response_header_version(key, API_VERSIONS_V), msg.encode(API_VERSIONS_V))


def test_api_versions_answer_through_the_shortcut_reads_as_through_the_frame_splitter() -> None:
    """Capped the same way, whole (the shortcut, and its repeat from the memo's last answer) or in
    two reads (_response), and counted as a rewrite each time."""
    whole_core, whole_out = make_core()
    split_core, split_out = make_core()
    for cid in (5, 6):
        for core in (whole_core, split_core):
            core.receive_client(api_versions(cid))
        answer = api_versions_answer(cid)
        whole_core.receive_broker(answer)
        split_core.receive_broker(answer[:5])
        split_core.receive_broker(answer[5:])
    assert answer_cids(whole_out.client.data) == [5, 6]
    assert bytes(whole_out.client.data) == bytes(split_out.client.data)
    assert api_versions_answer(5) not in bytes(whole_out.client.data), "the answer was not capped"
    rewrites = whole_core.cluster.metrics.rewrites[int(ApiKey.API_VERSIONS)].n
    assert rewrites == split_core.cluster.metrics.rewrites[int(ApiKey.API_VERSIONS)].n == 2
    assert not whole_core.pending
    assert not whole_core.upstream_waiting


def test_unreadable_api_versions_answer_through_the_shortcut_closes_without_answering() -> None:
    core, out = make_core()
    core.receive_client(api_versions(7))
    key = int(ApiKey.API_VERSIONS)
    core.receive_broker(response_frame(7, api.response_header_version(key, API_VERSIONS_V), b"\x00\x00\xff"))
    assert core.closed
    assert bytes(out.client.data) == b""
    assert out.close_reason is not None
    assert out.close_reason.value == "undecodable-response"
