"""Suspension without blocking, ordering, short-circuit answers and hook failure outcomes.

kgate runs in-process (its own uvloop thread) in front of a real Tansu so that the filters
can be defined here. Clients are kgate's own ``UpstreamClient`` pointed at kgate: a plain
pipelining Kafka client whose requests and responses are decoded with the codec.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from support.inproc_kgate import InprocKgate, make_config

from kgate.api import FORWARD, ApiKey, Filter, FilterContext, on_request, on_response, respond
from kgate.codec import api
from kgate.codec.generated.api_keys import API_VERSIONS, METADATA
from kgate.filters.registry import register_filter
from kgate.proxy.carrier.upstream_client import UpstreamClient, UpstreamError

SLOW_S = 0.6


class SlowTopics(Filter):
    """Suspends Metadata requests naming a ``slow-*`` topic; answers ``local-*`` ones itself."""

    name = "test-slow-topics"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        names = [t.name for t in request.topics or []]
        if any(n.startswith("local-") for n in names):
            resp = api.API_INFO[METADATA].response_class()
            resp.topics = [_topic(n) for n in names]
            return respond(resp)
        if any(n.startswith("hang-") for n in names):
            return asyncio.sleep(3600)
        if any(n.startswith("boom-") for n in names):
            return self._boom()
        if any(n.startswith("sboom-") for n in names):
            raise RuntimeError("synchronous filter bug")
        if any(n.startswith("badans-") for n in names):
            return respond("not a response object")
        if any(n.startswith("slow-") for n in names):
            return self._slow()
        return FORWARD

    async def _slow(self) -> Any:
        await asyncio.sleep(SLOW_S)
        return FORWARD

    async def _boom(self) -> Any:
        raise RuntimeError("filter bug")


def _topic(name: str) -> Any:
    from kgate.codec.generated.data.metadata import MetadataResponseTopic

    return MetadataResponseTopic(error_code=0, name=name, is_internal=False, partitions=[])


register_filter("test-slow-topics", SlowTopics)


def _metadata(*names: str) -> Any:
    from kgate.codec.generated.data.metadata import MetadataRequestTopic

    return api.API_INFO[METADATA].request_class(
        topics=[MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False
    )


@pytest.fixture
def kgate(tansu):
    k = InprocKgate(make_config(tansu.bootstrap, [{"name": "test-slow-topics"}], filter_timeout_s=1.5)).start()
    yield k
    k.stop()


def _client(k: InprocKgate) -> UpstreamClient:
    return UpstreamClient(lambda: [("127.0.0.1", k.port)], client_id="test")


async def test_pipelined_responses_keep_order_while_other_connections_run(kgate) -> None:
    slow_conn, fast_conn = _client(kgate), _client(kgate)
    try:
        await fast_conn.request(API_VERSIONS, api.API_INFO[API_VERSIONS].request_class(), 3)
        arrivals: list[str] = []

        async def timed(label: str, coro: Any) -> Any:
            result = await coro
            arrivals.append(label)
            return result

        t0 = time.monotonic()
        first = asyncio.ensure_future(timed("slow", slow_conn.request(METADATA, _metadata("slow-a"), 12)))
        await asyncio.sleep(0.05)  # the slow request is on the wire and suspended in kgate
        second = asyncio.ensure_future(timed("after-slow", slow_conn.request(METADATA, _metadata(), 12)))
        third = asyncio.ensure_future(
            timed("after-slow-2", slow_conn.request(API_VERSIONS, api.API_INFO[API_VERSIONS].request_class(), 3))
        )
        # meanwhile another connection is served at normal speed
        fast_latencies = []
        for _ in range(10):
            s = time.monotonic()
            await fast_conn.request(METADATA, _metadata(), 12)
            fast_latencies.append(time.monotonic() - s)
        await asyncio.gather(first, second, third)
        elapsed = time.monotonic() - t0
    finally:
        slow_conn.close()
        fast_conn.close()
    assert arrivals == ["slow", "after-slow", "after-slow-2"]
    assert elapsed >= SLOW_S
    assert max(fast_latencies) < SLOW_S / 3, fast_latencies
    assert all(lat < 0.2 for lat in fast_latencies)


async def test_short_circuit_answer_takes_its_place_in_order(kgate) -> None:
    conn = _client(kgate)
    try:
        r1 = asyncio.ensure_future(conn.request(METADATA, _metadata("slow-b"), 12))
        await asyncio.sleep(0.02)
        r2 = asyncio.ensure_future(conn.request(METADATA, _metadata("local-x", "local-y"), 12))
        done_order: list[int] = []
        r1.add_done_callback(lambda _f: done_order.append(1))
        r2.add_done_callback(lambda _f: done_order.append(2))
        (_v1, resp1), (_v2, resp2) = await asyncio.gather(r1, r2)
    finally:
        conn.close()
    assert done_order == [1, 2]
    assert [t.name for t in resp2.topics] == ["local-x", "local-y"]  # answered by the filter
    assert resp2.brokers == []  # the broker never saw it
    assert [t.name for t in resp1.topics] == ["slow-b"]


async def test_hook_timeout_gets_an_error_answer_not_a_hung_connection(kgate) -> None:
    conn = _client(kgate)
    try:
        t0 = time.monotonic()
        _v, resp = await conn.request(METADATA, _metadata("hang-1"), 12, timeout_s=10)
        waited = time.monotonic() - t0
        # the connection is still usable afterwards
        _v, after = await conn.request(METADATA, _metadata(), 12)
    finally:
        conn.close()
    assert 1.4 <= waited < 5
    assert [(t.name, t.error_code) for t in resp.topics] == [("hang-1", 7)]  # REQUEST_TIMED_OUT
    assert after.brokers, "normal Metadata after the timeout"


async def test_hook_exception_closes_only_that_connection(kgate) -> None:
    bad, good = _client(kgate), _client(kgate)
    try:
        await good.request(API_VERSIONS, api.API_INFO[API_VERSIONS].request_class(), 3)
        with pytest.raises(UpstreamError):
            await bad.request(METADATA, _metadata("boom-1"), 12, timeout_s=5)
        _v, resp = await good.request(METADATA, _metadata(), 12)
    finally:
        bad.close()
        good.close()
    assert resp.brokers


@pytest.mark.parametrize("prefix", ["sboom-", "badans-"])
async def test_synchronous_filter_bug_closes_only_that_connection(kgate, prefix) -> None:
    bad, good = _client(kgate), _client(kgate)
    try:
        await good.request(API_VERSIONS, api.API_INFO[API_VERSIONS].request_class(), 3)
        with pytest.raises(UpstreamError):
            await bad.request(METADATA, _metadata(prefix + "1"), 12, timeout_s=5)
        _v, resp = await good.request(METADATA, _metadata(), 12)
    finally:
        bad.close()
        good.close()
    assert resp.brokers
    assert kgate.proxy is not None
    assert kgate._thread.is_alive()


async def test_sync_hooks_cost_no_task(kgate) -> None:
    conn = _client(kgate)
    try:
        await conn.request(METADATA, _metadata(), 12)  # connection set up (its tasks counted here)
        before = kgate.tasks_created
        for _ in range(50):
            await conn.request(METADATA, _metadata("plain-topic"), 12)
        after = kgate.tasks_created
        await conn.request(METADATA, _metadata("slow-c"), 12)
        with_suspension = kgate.tasks_created
    finally:
        conn.close()
    assert after == before, "a synchronous hook created tasks"
    assert with_suspension > after, "the suspending hook is expected to run as a task"


class SlowFirstAnswer(Filter):
    """Holds the first Metadata answer of each connection a while (a suspended response hook)."""

    name = "test-slow-first-answer"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.held = 0

    @on_response(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, response: Any) -> Any:
        if self.held == 0:
            self.held += 1
            return self._later()
        return FORWARD

    async def _later(self) -> Any:
        await asyncio.sleep(0.3)
        return FORWARD


register_filter("test-slow-first-answer", SlowFirstAnswer)


async def test_suspended_answer_with_more_requests_in_flight_than_the_queue_limit(tansu) -> None:
    """More requests in flight than max_queued_requests behind a suspended answer: kgate must keep
    reading the broker's answers (they drain the queue) instead of pausing it for good."""
    k = InprocKgate(make_config(tansu.bootstrap, [{"name": "test-slow-first-answer"}], max_queued_requests=3)).start()
    conn = _client(k)
    try:
        await conn.request(API_VERSIONS, api.API_INFO[API_VERSIONS].request_class(), 3)
        order: list[int] = []

        async def one(i: int) -> None:
            await conn.request(METADATA, _metadata(), 12, timeout_s=5)
            order.append(i)

        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(8))), 10)
    finally:
        conn.close()
        k.stop()
    assert order == list(range(8))
