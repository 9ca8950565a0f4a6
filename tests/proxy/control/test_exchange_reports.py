"""The core's per-exchange reports (filters/exchanges.py) and the metrics built on them, driven
without sockets (tests/support/core_driver.py): one report per exchange, at the moment its answer
is handed to the client (whole, or the first bytes of one that streams through), none lost for
acks=0 or a connection that closes first, and no report at all without an observer."""

from __future__ import annotations

from typing import Any

from support.core_driver import RecordingActions
from support.fake_cluster import FakeCluster
from support.wire import record_batch

from kgate.api import ConnectionInfo
from kgate.codec.generated.api_keys import API_VERSIONS, FETCH, METADATA, PRODUCE
from kgate.codec.generated.data.fetch import FetchableTopicResponse, FetchRequest, FetchResponse, PartitionData
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataResponse
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.codec.generated.session.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kgate.config import parse_config
from kgate.filters.answer_errors import top_error_code
from kgate.filters.chain import FilterChain
from kgate.proxy.control.exchange_metrics import BUCKETS_S, ExchangeMetrics, _ExchangeCollector
from kgate.proxy.sansio.core import ConnectionCore
from kgate.testing.frames import request_bytes, response_bytes


class Reports:
    def __init__(self) -> None:
        self.got: list[tuple[Any, bytes | None, int | None, int]] = []

    def __call__(self, ex: Any, info: ConnectionInfo, answer: Any, answer_bytes: int | None, end_ns: int) -> None:
        if type(answer) is list:
            answer = b"".join(answer)  # a streamed answer: the pieces it was forwarded in
        self.got.append((ex, None if answer is None else bytes(answer), answer_bytes, end_ns))


def _core(observer: Any) -> tuple[ConnectionCore, RecordingActions]:
    cfg = parse_config(
        {"virtual_clusters": [{"name": "t", "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]}, "test"
    )
    cluster = FakeCluster(cfg.proxy, FilterChain([]), cfg.virtual_clusters[0].name)
    cluster.exchange_observer = observer
    actions = RecordingActions(cluster)
    return ConnectionCore(cluster, ConnectionInfo("127.0.0.1:1", "t"), actions), actions


def test_one_report_per_answer_with_sizes_and_times() -> None:
    reports = Reports()
    core, actions = _core(reports)
    req = request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=5)
    core.now_ns = 1_000  # the time each event comes with (the carrier sets it; the core reads no clock)
    core.receive_client(req)
    assert reports.got == []  # not answered yet
    resp = response_bytes(METADATA, 12, MetadataResponse(brokers=[], topics=[]), correlation_id=5)
    core.now_ns = 7_000
    core.receive_broker(resp)
    ((ex, answer, size, end_ns),) = reports.got
    assert ex.cid == 5
    assert ex.api_key == METADATA
    assert ex.api_version == 12
    assert ex.req_bytes == len(req)
    assert bytes(ex.req) == req
    assert answer == bytes(actions.client.data)
    assert size == len(answer)
    assert ex.t0_ns == ex.sent_ns == 1_000
    assert ex.up_ns == end_ns == 7_000


def test_acks0_produce_is_reported_without_an_answer() -> None:
    reports = Reports()
    core, actions = _core(reports)
    msg = ProduceRequest(
        acks=0,
        timeout_ms=100,
        topic_data=[
            TopicProduceData(name="t", partition_data=[PartitionProduceData(index=0, records=record_batch([b"v"]))])
        ],
    )
    req = request_bytes(PRODUCE, 9, msg, correlation_id=9)
    core.receive_client(req)
    ((ex, answer, size, _end),) = reports.got
    assert ex.cid == 9
    assert answer is None
    assert size is None
    assert ex.req_bytes == len(req)
    assert bytes(actions.upstream.data) == req


def test_streamed_answer_is_reported_when_its_first_bytes_go() -> None:
    reports = Reports()
    core, actions = _core(reports)
    core.receive_client(request_bytes(FETCH, 12, FetchRequest(max_wait_ms=1, min_bytes=1, topics=[]), correlation_id=2))
    resp = response_bytes(
        FETCH,
        12,
        FetchResponse(
            responses=[
                FetchableTopicResponse(
                    topic="t", partitions=[PartitionData(partition_index=0, records=record_batch([b"x" * 5000]))]
                )
            ]
        ),
        correlation_id=2,
    )
    core.now_ns = 2_000
    core.receive_broker(resp[:100])
    assert reports.got == []  # reported once its last byte went
    core.now_ns = 3_000
    core.receive_broker(resp[100:3000])
    core.now_ns = 4_000
    core.receive_broker(resp[3000:])
    ((_ex, joined, size, end_ns),) = reports.got
    assert joined == resp
    assert size == len(resp)
    assert bytes(actions.client.data) == resp
    assert end_ns == 2_000  # when its first bytes went on


def test_close_reports_exchanges_still_owed_an_answer() -> None:
    reports = Reports()
    core, _actions = _core(reports)
    for cid in (1, 2):
        core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=cid))
    core.client_closed()
    assert [(r[0].cid, r[1], r[2]) for r in reports.got] == [(1, None, None), (2, None, None)]


def test_no_observer_no_stamps() -> None:
    core, _actions = _core(None)
    core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=1))
    (ex,) = core.pending
    assert not hasattr(ex, "t0_ns")
    assert not hasattr(ex, "req")


def test_top_level_error_codes_at_fixed_offsets() -> None:
    bad = response_bytes(API_VERSIONS, 3, ApiVersionsResponse(error_code=35), correlation_id=1)
    assert top_error_code(API_VERSIONS, 3, bad) == 35
    fetch = response_bytes(FETCH, 12, FetchResponse(error_code=71, responses=[]), correlation_id=1)
    assert top_error_code(FETCH, 12, fetch) == 71
    meta = response_bytes(METADATA, 12, MetadataResponse(brokers=[], topics=[]), correlation_id=1)
    assert top_error_code(METADATA, 12, meta) is None  # Metadata has no top-level code


def test_metrics_from_reports() -> None:
    m = ExchangeMetrics("metrics-test")
    core, _actions = _core(m.observe)
    req = request_bytes(
        API_VERSIONS, 3, ApiVersionsRequest(client_software_name="x", client_software_version="1"), correlation_id=1
    )
    core.receive_client(req)
    resp = response_bytes(API_VERSIONS, 3, ApiVersionsResponse(error_code=35), correlation_id=1)
    core.receive_broker(resp)
    core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=2))
    core.receive_broker(response_bytes(METADATA, 12, MetadataResponse(brokers=[], topics=[]), correlation_id=2))
    families = {f.name: f for f in _ExchangeCollector().collect()}
    samples = [
        (s.name, s.labels, s.value)
        for f in families.values()
        for s in f.samples
        if s.labels.get("cluster") == "metrics-test"
    ]
    assert ("kgate_request_bytes_total", {"cluster": "metrics-test", "api": "ApiVersions"}, len(req)) in samples
    assert ("kgate_response_bytes_total", {"cluster": "metrics-test", "api": "ApiVersions"}, len(resp)) in samples
    assert (
        "kgate_responses_total",
        {"cluster": "metrics-test", "api": "ApiVersions", "error": "UNSUPPORTED_VERSION"},
        1,
    ) in samples
    assert ("kgate_responses_total", {"cluster": "metrics-test", "api": "Metadata", "error": "NONE"}, 1) in samples
    counts = [s for s in samples if s[0] == "kgate_request_duration_seconds_count"]
    assert {c[1]["api"] for c in counts} == {"ApiVersions", "Metadata"}
    assert all(c[2] == 1 for c in counts)
    inf = [s for s in samples if s[0] == "kgate_request_duration_seconds_bucket" and s[1]["le"] == "+Inf"]
    assert len(inf) == 2
    assert len(BUCKETS_S) == 15


def _produce(acks: int, cid: int) -> bytes:
    msg = ProduceRequest(
        acks=acks,
        timeout_ms=100,
        topic_data=[
            TopicProduceData(
                name="big", partition_data=[PartitionProduceData(index=0, records=record_batch([b"v" * 3000] * 5))]
            )
        ],
    )
    return request_bytes(PRODUCE, 9, msg, correlation_id=cid)


def test_streamed_request_is_kept_as_its_pieces() -> None:
    """A Produce larger than a read goes upstream piece by piece (raw mode): the report carries
    those pieces, and the audit event counts its records from them."""
    from kgate.codec.generated.data.produce import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
    from kgate.filters.builtin.audit.event import Captured, build_event

    reports = Reports()
    core, actions = _core(reports)
    req = _produce(-1, 4)
    for a, b in ((0, 100), (100, 7000), (7000, len(req))):
        core.receive_client(req[a:b])
    assert bytes(actions.upstream.data) == req
    resp = response_bytes(
        PRODUCE,
        9,
        ProduceResponse(
            responses=[
                TopicProduceResponse(name="big", partition_responses=[PartitionProduceResponse(index=0, error_code=0)])
            ]
        ),
        correlation_id=4,
    )
    core.receive_broker(resp)
    ((ex, _answer, _size, _end),) = reports.got
    assert isinstance(ex.req, list)
    assert b"".join(bytes(p) for p in ex.req) == req
    assert ex.req_bytes == len(req)
    e = build_event(
        Captured(ex, ConnectionInfo("a:1", "t"), resp, len(resp), _end),
        instance="i",
        cluster="t",
        wall_offset_ns=0,
        names={},
    )
    assert e["topics"] == [
        {
            "id": None,
            "name": "big",
            "name_status": "given",
            "partitions": 1,
            "bytes": len(record_batch([b"v" * 3000] * 5)),
            "records": 5,
            "error_codes": [0],
        }
    ]


def test_streamed_acks0_request_is_reported_when_whole() -> None:
    reports = Reports()
    core, _actions = _core(reports)
    req = _produce(0, 8)
    core.receive_client(req[:50])
    assert reports.got == []  # its records are still coming
    core.receive_client(req[50:])
    ((ex, answer, _size, _end),) = reports.got
    assert answer is None
    assert b"".join(bytes(p) for p in ex.req) == req
