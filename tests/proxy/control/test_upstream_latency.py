"""``kgate_upstream_request_duration_seconds``: the broker's part of an exchange, driven through the
core without sockets (tests/support/core_driver.py) on a fake clock, so every duration is exact.

From kgate's last byte of a request to the broker to the answer in kgate's hands (the whole frame,
or the first bytes of one that streams through); nothing for what kgate answers itself or acks=0.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from support.core_driver import RecordingActions
from support.fake_cluster import FakeCluster
from support.wire import record_batch

from kgate.api import ApiKey, ConnectionInfo, Filter, FilterContext, Respond, on_request
from kgate.codec.generated.api_keys import FETCH, METADATA, PRODUCE
from kgate.codec.generated.data.fetch import FetchableTopicResponse, FetchRequest, FetchResponse, PartitionData
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataResponse
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData
from kgate.config import parse_config
from kgate.filters.chain import FilterChain
from kgate.proxy.control.exchange_metrics import ExchangeMetrics, _ExchangeCollector
from kgate.proxy.sansio.core import ConnectionCore
from kgate.testing.frames import request_bytes, response_bytes

MS = 1_000_000


class Clock:
    """The time the carrier hands the core with each event (``ConnectionCore.now_ns``): whatever the
    test set, given to every core made while the test runs (the core reads no clock itself)."""

    def __init__(self) -> None:
        self._now = 0
        self.cores: list[ConnectionCore] = []

    @property
    def now(self) -> int:
        return self._now

    @now.setter
    def now(self, value: int) -> None:
        self._now = value
        for core in self.cores:
            core.now_ns = value


_CLOCKS: list[Clock] = []


@pytest.fixture
def clock() -> Iterator[Clock]:
    c = Clock()
    _CLOCKS.append(c)
    yield c
    _CLOCKS.remove(c)


class AnswersMetadata(Filter):
    """Answers every Metadata request itself: the broker never sees it."""

    name = "test-answers-metadata"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        return Respond(MetadataResponse(brokers=[], topics=[]))


def _core(name: str, filters: Sequence[Filter] = ()) -> tuple[ConnectionCore, RecordingActions]:
    cfg = parse_config(
        {"virtual_clusters": [{"name": name, "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]}, "test"
    )
    cluster = FakeCluster(cfg.proxy, FilterChain(list(filters)), name)
    cluster.exchange_observer = ExchangeMetrics(name).observe
    actions = RecordingActions(cluster)
    core = ConnectionCore(cluster, ConnectionInfo("127.0.0.1:1", name), actions)
    for c in _CLOCKS:
        c.cores.append(core)
        core.now_ns = c.now
    return core, actions


def _samples(cluster: str, metric: str) -> dict[tuple[str, str], float]:
    """(api, le or "") -> value of ``metric``'s samples for ``cluster``."""
    out: dict[tuple[str, str], float] = {}
    for family in _ExchangeCollector().collect():
        for s in family.samples:
            if s.name == metric and s.labels.get("cluster") == cluster:
                out[(s.labels["api"], s.labels.get("le", ""))] = s.value
    return out


def _produce(acks: int, cid: int, size: int = 100) -> bytes:
    msg = ProduceRequest(
        acks=acks,
        timeout_ms=100,
        topic_data=[
            TopicProduceData(
                name="t", partition_data=[PartitionProduceData(index=0, records=record_batch([b"v" * size]))]
            )
        ],
    )
    return request_bytes(PRODUCE, 9, msg, correlation_id=cid)


def test_broker_time_is_separate_from_kgate_time(clock: Clock) -> None:
    core, _ = _core("up-1")
    clock.now = 1 * MS
    core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=1))
    clock.now = 4 * MS  # 3 ms later the broker answers, handed on in the same call
    core.receive_broker(response_bytes(METADATA, 12, MetadataResponse(brokers=[], topics=[]), correlation_id=1))
    up = _samples("up-1", "kgate_upstream_request_duration_seconds_sum")
    assert up == {("Metadata", ""): pytest.approx(0.003)}
    buckets = _samples("up-1", "kgate_upstream_request_duration_seconds_bucket")
    assert buckets[("Metadata", "0.0025")] == 0
    assert buckets[("Metadata", "0.005")] == 1
    client = _samples("up-1", "kgate_request_duration_seconds_sum")
    assert client == {("Metadata", ""): pytest.approx(0.003)}


def test_answers_kgate_makes_itself_have_no_upstream_time(clock: Clock) -> None:
    core, actions = _core("up-2", [AnswersMetadata({})])
    clock.now = 1 * MS
    core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=1))
    assert actions.client.data
    assert not actions.upstream.data
    assert _samples("up-2", "kgate_request_duration_seconds_count") == {("Metadata", ""): 1}
    assert _samples("up-2", "kgate_upstream_request_duration_seconds_count") == {}


def test_acks0_produce_has_no_upstream_time(clock: Clock) -> None:
    core, actions = _core("up-3")
    core.receive_client(_produce(0, 1))
    assert actions.upstream.data
    assert _samples("up-3", "kgate_upstream_request_duration_seconds_count") == {}


def test_streamed_request_counts_from_its_last_byte(clock: Clock) -> None:
    """A Produce larger than a read goes upstream in pieces: the broker's time starts at the last."""
    core, _ = _core("up-4")
    req = _produce(-1, 7, size=20_000)
    for now, (a, b) in zip((1, 2, 5), ((0, 100), (100, 9000), (9000, len(req))), strict=True):
        clock.now = now * MS
        core.receive_client(req[a:b])
    clock.now = 6 * MS
    core.receive_broker(response_bytes(PRODUCE, 9, ProduceResponse(responses=[]), correlation_id=7))
    assert _samples("up-4", "kgate_upstream_request_duration_seconds_sum") == {("Produce", ""): pytest.approx(0.001)}
    assert _samples("up-4", "kgate_request_duration_seconds_sum") == {("Produce", ""): pytest.approx(0.005)}


def test_streamed_answer_ends_at_its_first_bytes(clock: Clock) -> None:
    """A large Fetch answer is forwarded as it arrives: the broker's time ends at its first bytes."""
    core, actions = _core("up-5")
    clock.now = 1 * MS
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
    clock.now = 3 * MS
    core.receive_broker(resp[:100])
    clock.now = 9 * MS
    core.receive_broker(resp[100:])
    assert bytes(actions.client.data) == resp
    assert _samples("up-5", "kgate_upstream_request_duration_seconds_sum") == {("Fetch", ""): pytest.approx(0.002)}
    assert _samples("up-5", "kgate_request_duration_seconds_sum") == {("Fetch", ""): pytest.approx(0.002)}


def test_no_observer_no_stamps() -> None:
    """With the admin listener off nothing observes: exchanges get no timestamps at all."""
    cfg = parse_config(
        {"virtual_clusters": [{"name": "up-6", "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]}, "test"
    )
    cluster = FakeCluster(cfg.proxy, FilterChain([]), "up-6")
    core = ConnectionCore(cluster, ConnectionInfo("127.0.0.1:1", "up-6"), RecordingActions(cluster))
    core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=1))
    (ex,) = core.pending
    core.receive_broker(response_bytes(METADATA, 12, MetadataResponse(brokers=[], topics=[]), correlation_id=1))
    assert not hasattr(ex, "sent_ns")
    assert not hasattr(ex, "up_ns")


class AwaitsOnMetadata(Filter):
    """An async request hook: the core suspends the request and the test ends the run (hook_done)."""

    name = "test-awaits-metadata"

    @on_request(ApiKey.METADATA)
    async def metadata(self, ctx: FilterContext, request: Any) -> Any:
        return request


def test_waiting_on_a_hook_is_client_time_not_broker_time(clock: Clock) -> None:
    """A request that waited on an awaiting hook, and one read while it waited (the backlog): the
    client-side latency runs from when kgate read each, the broker's part from when it went on."""
    from kgate.filters.chain import Decision, Verdict

    core, actions = _core("up-7", [AwaitsOnMetadata({})])
    clock.now = 1 * MS
    core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=1))
    clock.now = 2 * MS
    core.receive_client(request_bytes(METADATA, 12, MetadataRequest(topics=[]), correlation_id=2))
    (first,) = actions.spawned
    clock.now = 5 * MS  # the hook ends; the first goes upstream, then the second (it suspends in turn)
    core.hook_done(first, Decision(Verdict.FORWARD, first.message))
    second = actions.spawned[1]
    clock.now = 6 * MS
    core.hook_done(second, Decision(Verdict.FORWARD, second.message))
    clock.now = 8 * MS
    for cid in (1, 2):
        core.receive_broker(response_bytes(METADATA, 12, MetadataResponse(brokers=[], topics=[]), correlation_id=cid))
    client = _samples("up-7", "kgate_request_duration_seconds_sum")
    assert client == {("Metadata", ""): pytest.approx(0.007 + 0.006)}  # read at 1 and 2 ms, answered at 8
    upstream = _samples("up-7", "kgate_upstream_request_duration_seconds_sum")
    assert upstream == {("Metadata", ""): pytest.approx(0.003 + 0.002)}  # sent at 5 and 6 ms
