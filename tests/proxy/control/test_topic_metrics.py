"""Per-topic metrics (proxy/control/topic_metrics.py): the cardinality cap (pure), names from ids without
waiting, and the counts from real Produce and Fetch frames driven through the core without sockets
(tests/support/core_driver.py). ``Names`` stands in for the topic-id service (kgate/topic_ids,
tested against brokers in tests/topic_ids): here only its two calls matter, and the e2e test in
tests/e2e/test_admin.py runs the real one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any
from uuid import UUID, uuid4

from support.core_driver import RecordingActions
from support.fake_cluster import FakeCluster
from support.wire import record_batch

from kgate.api import ConnectionInfo, TopicNameError
from kgate.codec.generated.api_keys import FETCH, PRODUCE
from kgate.codec.generated.data.fetch import FetchableTopicResponse, FetchRequest, FetchResponse, PartitionData
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData
from kgate.config import parse_config
from kgate.filters.chain import FilterChain
from kgate.proxy.control.exchange_metrics import ExchangeMetrics
from kgate.proxy.control.topic_metrics import OTHER, UNRESOLVED, TopicCap, TopicMetrics, _TopicCollector
from kgate.proxy.sansio.core import ConnectionCore
from kgate.testing.frames import request_bytes, response_bytes


def test_cap_names_the_first_topics_and_counts_the_rest_as_other() -> None:
    cap = TopicCap(2)
    assert [cap.label(t) for t in ("a", "b", "a", "c", "b", "d", "c")] == ["a", "b", "a", OTHER, "b", OTHER, OTHER]
    assert cap.overflowed == 3
    assert cap.seen == {"a", "b"}


class Names:
    """The topic-id service's two calls: a cache read and a lookup that fills the cache."""

    def __init__(self, known: dict[UUID, str]) -> None:
        self.cache: dict[UUID, str] = {}
        self.known = known
        self.asked: list[UUID] = []

    def cached(self, topic_id: UUID) -> str | None:
        return self.cache.get(topic_id)

    async def resolve(self, ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        out: dict[UUID, str | TopicNameError] = {}
        for tid in ids:
            self.asked.append(tid)
            self.cache[tid] = out[tid] = self.known[tid]
        return out


def _core(name: str, names: Names, max_topics: int = 100) -> tuple[ConnectionCore, TopicMetrics]:
    cfg = parse_config(
        {"virtual_clusters": [{"name": name, "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]}, "test"
    )
    cluster = FakeCluster(cfg.proxy, FilterChain([]), cfg.virtual_clusters[0].name)
    metrics = ExchangeMetrics(name)
    metrics.topics = TopicMetrics(name, max_topics, names)
    cluster.exchange_observer = metrics.observe
    return ConnectionCore(cluster, ConnectionInfo("127.0.0.1:1", name), RecordingActions(cluster)), metrics.topics


def _produce(version: int, cid: int, topics: dict[str | UUID, list[bytes]], acks: int = -1) -> bytes:
    data = [
        TopicProduceData(
            name=k if isinstance(k, str) else "",
            topic_id=k if isinstance(k, UUID) else UUID(int=0),
            partition_data=[PartitionProduceData(index=i, records=r) for i, r in enumerate(parts)],
        )
        for k, parts in topics.items()
    ]
    msg = ProduceRequest(acks=acks, timeout_ms=100, topic_data=data)
    return request_bytes(PRODUCE, version, msg, correlation_id=cid)


def _fetch_answer(version: int, cid: int, topics: dict[str | UUID, list[bytes]]) -> bytes:
    responses = [
        FetchableTopicResponse(
            topic=k if isinstance(k, str) else "",
            topic_id=k if isinstance(k, UUID) else UUID(int=0),
            partitions=[PartitionData(partition_index=i, records=r) for i, r in enumerate(parts)],
        )
        for k, parts in topics.items()
    ]
    return response_bytes(FETCH, version, FetchResponse(responses=responses), correlation_id=cid)


def _collected(cluster: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for family in _TopicCollector().collect():
        for s in family.samples:
            if s.labels.get("cluster") == cluster:
                rest = tuple(v for k, v in sorted(s.labels.items()) if k != "cluster")
                out[(s.name, *rest)] = s.value
    return out


def test_produce_and_fetch_bytes_per_topic_by_name() -> None:
    core, _ = _core("tm-1", Names({}))
    a, b = record_batch([b"x" * 300]), record_batch([b"y" * 50] * 3)
    core.receive_client(_produce(9, 1, {"orders": [a, b], "audit": [b]}))
    core.receive_broker(response_bytes(PRODUCE, 9, ProduceResponse(responses=[]), correlation_id=1))
    core.receive_client(_produce(3, 2, {"orders": [a]}, acks=0))  # no answer: its data came in all the same
    core.receive_client(request_bytes(FETCH, 12, FetchRequest(max_wait_ms=1, min_bytes=1, topics=[]), correlation_id=3))
    core.receive_broker(_fetch_answer(12, 3, {"orders": [a], "idle": []}))
    got = _collected("tm-1")
    assert got[("kgate_topic_requests_total", "Produce", "orders")] == 2
    assert got[("kgate_topic_requests_total", "Produce", "audit")] == 1
    assert got[("kgate_topic_requests_total", "Fetch", "orders")] == 1
    assert got[("kgate_topic_requests_total", "Fetch", "idle")] == 1
    assert got[("kgate_topic_bytes_total", "in", "orders")] == 2 * len(a) + len(b)
    assert got[("kgate_topic_bytes_total", "in", "audit")] == len(b)
    assert got[("kgate_topic_bytes_total", "out", "orders")] == len(a)
    assert ("kgate_topic_bytes_total", "out", "idle") not in got  # no bytes, no series
    assert got[("kgate_topic_metrics_overflow_total",)] == 0


def test_streamed_fetch_answer_is_walked_over_its_pieces() -> None:
    core, _ = _core("tm-2", Names({}))
    core.receive_client(request_bytes(FETCH, 11, FetchRequest(max_wait_ms=1, min_bytes=1, topics=[]), correlation_id=5))
    big = record_batch([b"z" * 9000])
    answer = _fetch_answer(11, 5, {"big": [big, big]})
    for a, b in ((0, 60), (60, 7000), (7000, len(answer))):
        core.receive_broker(answer[a:b])
    assert _collected("tm-2")[("kgate_topic_bytes_total", "out", "big")] == 2 * len(big)


def test_past_the_cap_topics_count_as_other() -> None:
    core, _ = _core("tm-3", Names({}), max_topics=2)
    batch = record_batch([b"v"])
    core.receive_client(_produce(9, 1, {"a": [batch], "b": [batch], "c": [batch], "d": [batch]}, acks=0))
    got = _collected("tm-3")
    assert got[("kgate_topic_requests_total", "Produce", "a")] == 1
    assert got[("kgate_topic_requests_total", "Produce", OTHER)] == 2
    assert got[("kgate_topic_bytes_total", "in", OTHER)] == 2 * len(batch)
    assert got[("kgate_topic_metrics_overflow_total",)] == 2


def test_ids_are_named_from_the_cache_and_looked_up_in_the_background() -> None:
    """Produce v13 carries ids: an unknown one counts as <unresolved> at once (the exchange never
    waits) and is asked of the cluster once; the next exchange of that topic has its name."""
    orders, known = uuid4(), uuid4()
    names = Names({orders: "orders", known: "known"})
    names.cache[known] = "known"
    batch = record_batch([b"v" * 10])

    kept: list[Any] = []  # the metrics are reported while their core lives (a weak set): kept to the end

    async def run() -> None:
        core, _ = _core("tm-4", names)
        kept.append(core)
        core.receive_client(_produce(13, 1, {orders: [batch], known: [batch]}, acks=0))
        core.receive_client(_produce(13, 2, {orders: [batch]}, acks=0))  # still unknown: asked once only
        await asyncio.sleep(0)  # let the background lookup run (one loop turn: it does not block)
        core.receive_client(_produce(13, 3, {orders: [batch]}, acks=0))

    asyncio.run(run())
    assert names.asked == [orders]
    got = _collected("tm-4")
    assert got[("kgate_topic_requests_total", "Produce", UNRESOLVED)] == 2
    assert got[("kgate_topic_requests_total", "Produce", "orders")] == 1
    assert got[("kgate_topic_requests_total", "Produce", "known")] == 1
    assert got[("kgate_topic_bytes_total", "in", "orders")] == len(batch)


def test_fetch_v13_answer_names_its_ids() -> None:
    tid = uuid4()
    names = Names({tid: "events"})
    names.cache[tid] = "events"
    core, _ = _core("tm-5", names)
    batch = record_batch([b"e" * 40])
    core.receive_client(request_bytes(FETCH, 13, FetchRequest(max_wait_ms=1, min_bytes=1, topics=[]), correlation_id=1))
    core.receive_broker(_fetch_answer(13, 1, {tid: [batch]}))
    assert _collected("tm-5")[("kgate_topic_bytes_total", "out", "events")] == len(batch)
