"""Unit tests of TopicNameResolver.

``FakeUpstream`` stands in for the broker (it has UpstreamClient's ``request`` / ``pick_version`` /
``versions`` surface) only so that these tests can count upstream requests exactly and inject
failures and latency deterministically. Its answers are encoded and decoded with kgate's codec at
the version used, so every message is one a real broker could send. Behaviour against a real
broker (Tansu) is covered by tests/integration/test_topic_names_broker.py.
"""

from __future__ import annotations

import asyncio
import uuid
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from kgate.api import LOOKUP_FAILED, TopicNameError
from kgate.codec import api
from kgate.codec.generated.admin.create_topics import CreatableTopicResult, CreateTopicsResponse
from kgate.codec.generated.admin.delete_topics import DeletableTopicResult, DeleteTopicsResponse
from kgate.codec.generated.data.metadata import MetadataResponse, MetadataResponseTopic
from kgate.proxy.carrier.upstream_client import UpstreamError
from kgate.topic_ids import ZERO_ID_ERROR, TopicNameResolver
from kgate.topic_ids.lookup import UNKNOWN_TOPIC_ID

ZERO = UUID(int=0)


def uid() -> UUID:
    return uuid.uuid4()


class FakeUpstream:
    """Answers Metadata like a broker holding ``topics``; records every request."""

    def __init__(
        self,
        topics: dict[UUID, str] | None = None,
        *,
        metadata_max: int = 12,
        unknown_code: int = 3,
        latency: float = 0.0,
    ) -> None:
        self.topics: dict[UUID, str] = dict(topics or {})
        self.versions: dict[int, tuple[int, int]] = {3: (0, metadata_max), 18: (0, 3)}
        self.unknown_code = unknown_code  # Tansu answers an unknown id with 3, Kafka with 100
        self.latency = latency
        self.fail: Exception | None = None
        self.calls: list[tuple[int, int, object]] = []

    def pick_version(self, api_key: int, lo: int = 0, hi: int | None = None) -> int | None:
        info = api.API_INFO[api_key]
        broker = self.versions.get(api_key)
        if broker is None:
            return None
        top = min(broker[1], info.max_version, hi if hi is not None else info.max_version)
        bottom = max(broker[0], info.min_version, lo)
        return top if top >= bottom else None

    @property
    def metadata_calls(self) -> list[tuple[int, object]]:
        return [(v, m) for k, v, m in self.calls if k == 3]

    async def request(self, api_key, message, version=None, *, lo=0, hi=None, timeout_s=10.0):
        if version is None:
            version = self.pick_version(api_key, lo, hi)
            if version is None:
                raise UpstreamError(f"broker supports no version of api {api_key} in [{lo}, {hi}]")
        message.encode(version)  # must be encodable at the version chosen
        self.calls.append((api_key, version, message))
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.fail is not None:
            raise self.fail
        if api_key == 18:
            return version, api.API_INFO[18].response_class()
        assert api_key == 3
        if message.topics is not None:
            assert version >= 12, f"topic-id lookup at Metadata v{version}"
            assert message.allow_auto_topic_creation is False
            topics = []
            for t in message.topics:
                name = self.topics.get(t.topic_id)
                if name is None:
                    topics.append(MetadataResponseTopic(error_code=self.unknown_code, name=None, topic_id=t.topic_id))
                else:
                    topics.append(MetadataResponseTopic(error_code=0, name=name, topic_id=t.topic_id))
        else:
            topics = [MetadataResponseTopic(error_code=0, name=n, topic_id=i) for i, n in self.topics.items()]
        resp = MetadataResponse(topics=topics, cluster_id="fake", controller_id=1)
        return version, api.decode_response(3, version, bytes(resp.encode(version)))


def roundtrip(msg, version: int):
    """Encode a response with the codec and decode it back, as the proxy would see it."""
    return api.decode_response(msg.API_KEY, version, bytes(msg.encode(version)))


@pytest.fixture
def topics() -> dict[UUID, str]:
    return {uid(): f"topic-{i}" for i in range(5)}


async def on_the_wire(fake: FakeUpstream, n: int = 1) -> None:
    """Wait until ``n`` Metadata requests were sent (robust against a slow, loaded machine)."""
    for _ in range(1000):
        if len(fake.metadata_calls) >= n:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("no request sent")


async def make(fake: FakeUpstream, **kw) -> TopicNameResolver:
    kw.setdefault("batch_window_s", 0.002)
    return TopicNameResolver(fake, cluster=kw.pop("cluster", "unit"), **kw)


# ---------------------------------------------------------------- single flight and batching
async def test_single_flight_1000_concurrent_resolves_one_request(topics):
    fake = FakeUpstream(topics, latency=0.01)
    r = await make(fake)
    tid = next(iter(topics))
    results = await asyncio.gather(*(r.resolve([tid]) for _ in range(1000)))
    assert len(fake.metadata_calls) == 1
    assert r.stats.lookups == 1
    assert all(res == {tid: topics[tid]} for res in results)
    assert r.stats.coalesced == 999
    assert r.cached(tid) == topics[tid]
    await r.close()


async def test_single_flight_joins_a_lookup_already_in_flight(topics):
    fake = FakeUpstream(topics, latency=0.2)
    r = await make(fake)
    tid = next(iter(topics))
    first = asyncio.create_task(r.resolve([tid]))
    await on_the_wire(fake)
    assert len(fake.metadata_calls) == 1
    second = await r.resolve([tid])
    assert second == {tid: topics[tid]}
    assert (await first) == second
    assert len(fake.metadata_calls) == 1
    await r.close()


async def test_misses_while_a_lookup_is_in_flight_share_the_next_request(topics):
    # The first miss is sent alone before the others start: started together, a loop stalled for more
    # than the 2 ms stagger (a loaded machine) woke the first two in one turn and they shared the first
    # request. Latency and window are long next to the stagger for the same reason.
    fake = FakeUpstream(topics, latency=0.5)
    r = await make(fake, batch_window_s=0.2)
    ids = list(topics)
    unknown = uid()

    async def one(i, delay):
        await asyncio.sleep(delay)
        return await r.resolve([i])

    first = asyncio.ensure_future(r.resolve([ids[0]]))
    while not fake.metadata_calls:  # noqa: ASYNC110 - yields until the resolver's task has run
        await asyncio.sleep(0)
    later = await asyncio.gather(*(one(i, 0.002 * n) for n, i in enumerate([*ids[1:], unknown])))
    results = [await first, *later]
    assert len(fake.metadata_calls) == 2  # the first miss at once, every later one together
    first, second = (msg for _v, msg in fake.metadata_calls)
    assert [t.topic_id for t in first.topics] == [ids[0]]
    assert sorted(t.topic_id.int for t in second.topics) == sorted(i.int for i in [*ids[1:], unknown])
    assert all(t.name is None for t in second.topics)
    assert all(v == 12 for v, _m in fake.metadata_calls)
    for i, res in zip(ids, results, strict=False):
        assert res == {i: topics[i]}
    assert results[-1][unknown].code == UNKNOWN_TOPIC_ID
    await r.close()


async def test_misses_of_one_loop_turn_share_one_request_without_waiting(topics):
    fake = FakeUpstream(topics)
    r = await make(fake, batch_window_s=1.0)  # a window this long would show in the timing
    ids = list(topics)
    t0 = asyncio.get_running_loop().time()
    results = await asyncio.gather(*(r.resolve([i]) for i in ids))
    elapsed = asyncio.get_running_loop().time() - t0
    assert len(fake.metadata_calls) == 1
    assert sorted(t.topic_id.int for t in fake.metadata_calls[0][1].topics) == sorted(i.int for i in ids)
    assert [res[i] for res, i in zip(results, ids, strict=True)] == [topics[i] for i in ids]
    assert elapsed < 0.5, "a cold id with nothing in flight must not wait for the batch window"
    await r.close()


async def test_misses_after_the_window_make_a_new_request(topics):
    fake = FakeUpstream(topics)
    r = await make(fake, batch_window_s=0.005)
    a, b = list(topics)[:2]
    await r.resolve([a])
    await r.resolve([b])
    assert len(fake.metadata_calls) == 2
    await r.resolve([a, b])  # both cached now
    assert len(fake.metadata_calls) == 2
    await r.close()


async def test_one_resolve_with_many_ids_is_one_request_and_dedups(topics):
    fake = FakeUpstream(topics)
    r = await make(fake)
    ids = list(topics)
    res = await r.resolve(ids + ids)
    assert res == topics
    assert len(fake.metadata_calls) == 1
    assert len(fake.metadata_calls[0][1].topics) == len(ids)
    await r.close()


async def test_cancelled_waiter_does_not_cancel_the_shared_lookup(topics):
    fake = FakeUpstream(topics, latency=0.03)
    r = await make(fake)
    tid = next(iter(topics))
    t1 = asyncio.create_task(r.resolve([tid]))
    t2 = asyncio.create_task(r.resolve([tid]))
    await asyncio.sleep(0.01)
    t1.cancel()
    assert (await t2) == {tid: topics[tid]}
    with pytest.raises(asyncio.CancelledError):
        await t1
    assert len(fake.metadata_calls) == 1
    await r.close()


# ---------------------------------------------------------------- versions
@pytest.mark.parametrize("unknown_code", [3, 100])
async def test_v12_lookup_by_id_unknown_is_100_whatever_the_broker_says(topics, unknown_code):
    fake = FakeUpstream(topics, unknown_code=unknown_code)
    r = await make(fake)
    known, unknown = next(iter(topics)), uid()
    res = await r.resolve([known, unknown])
    assert res[known] == topics[known]
    assert res[unknown].code == UNKNOWN_TOPIC_ID
    assert res[unknown].retriable is False
    assert [v for v, _ in fake.metadata_calls] == [12]
    await r.close()


@pytest.mark.parametrize("metadata_max", [10, 11])
async def test_without_v12_asks_all_topics_never_an_id(topics, metadata_max):
    fake = FakeUpstream(topics, metadata_max=metadata_max)
    r = await make(fake)
    ids = list(topics)
    unknown = uid()
    res = await r.resolve([ids[0], unknown])
    assert len(fake.metadata_calls) == 1
    version, msg = fake.metadata_calls[0]
    assert version == metadata_max
    assert msg.topics is None
    assert res[ids[0]] == topics[ids[0]]
    assert res[unknown].code == UNKNOWN_TOPIC_ID
    # the all-topics answer taught the other names too: no further lookup for them
    assert (await r.resolve(ids[1:])) == {i: topics[i] for i in ids[1:]}
    assert len(fake.metadata_calls) == 1
    await r.close()


async def test_broker_without_topic_ids_never_asked(topics):
    fake = FakeUpstream(topics, metadata_max=9)
    r = await make(fake)
    tid = next(iter(topics))
    res = await r.resolve([tid])
    assert res[tid].code == UNKNOWN_TOPIC_ID
    assert fake.metadata_calls == []
    await r.close()


async def test_unknown_versions_are_learnt_through_the_client_first(topics):
    fake = FakeUpstream(topics)
    saved, fake.versions = fake.versions, {}

    real_request = fake.request

    async def request(api_key, message, version=None, **kw):
        if api_key == 18:
            fake.versions = saved  # what UpstreamClient does on connect
        return await real_request(api_key, message, version, **kw)

    fake.request = request  # type: ignore[method-assign]
    r = await make(fake)
    tid = next(iter(topics))
    assert (await r.resolve([tid])) == {tid: topics[tid]}
    assert [k for k, _v, _m in fake.calls] == [18, 3]
    await r.close()


# ---------------------------------------------------------------- zero uuid
async def test_zero_uuid_never_resolves_and_is_never_asked(topics):
    fake = FakeUpstream(topics)
    r = await make(fake)
    assert r.cached(ZERO) is None
    res = await r.resolve([ZERO])
    assert res[ZERO] is ZERO_ID_ERROR
    assert res[ZERO].code == UNKNOWN_TOPIC_ID
    r.learn(ZERO, "nope")
    assert r.cached(ZERO) is None
    assert len(r) == 0
    assert fake.calls == []
    await r.close()


# ---------------------------------------------------------------- negative cache and failures
async def test_negative_results_cached_until_ttl(topics):
    fake = FakeUpstream(topics)
    r = await make(fake, negative_ttl_s=0.1)
    unknown = uid()
    for _ in range(5):
        res = await r.resolve([unknown])
        assert res[unknown].code == UNKNOWN_TOPIC_ID
        assert not res[unknown].retriable
    assert len(fake.metadata_calls) == 1
    assert r.stats.negative_hits == 4
    await asyncio.sleep(0.15)
    await r.resolve([unknown])
    assert len(fake.metadata_calls) == 2
    # the topic now exists under that id (test-only: real ids are never reused) -> after the TTL
    fake.topics[unknown] = "late"
    await asyncio.sleep(0.15)
    assert (await r.resolve([unknown])) == {unknown: "late"}
    await r.close()


async def test_failures_are_retriable_and_not_cached(topics):
    fake = FakeUpstream(topics, latency=0.01)
    fake.fail = UpstreamError("connection to broker lost: boom")
    r = await make(fake)
    tid = next(iter(topics))
    results = await asyncio.gather(*(r.resolve([tid]) for _ in range(50)))
    assert len(fake.metadata_calls) == 1
    for res in results:
        err = res[tid]
        assert isinstance(err, TopicNameError)
        assert err.code == LOOKUP_FAILED
        assert err.retriable
        assert "boom" in err.message
    assert r.stats.lookup_failures == 1
    fake.fail = None
    assert (await r.resolve([tid])) == {tid: topics[tid]}  # not negative-cached: asked again
    assert len(fake.metadata_calls) == 2
    await r.close()


async def test_lookup_timeout_is_a_retriable_failure(topics):
    fake = FakeUpstream(topics, latency=1.0)
    r = await make(fake, lookup_timeout_s=0.05)
    tid = next(iter(topics))
    res = await asyncio.wait_for(r.resolve([tid]), 0.5)
    assert res[tid].code == LOOKUP_FAILED
    assert res[tid].retriable
    fake.latency = 0
    assert (await r.resolve([tid])) == {tid: topics[tid]}
    await r.close()


async def test_other_broker_errors_pass_through(topics):
    fake = FakeUpstream(topics)
    tid = next(iter(topics))
    real = fake.request

    async def request(api_key, message, version=None, **kw):
        v, resp = await real(api_key, message, version, **kw)
        for t in resp.topics:
            t.error_code, t.name = 29, None  # TOPIC_AUTHORIZATION_FAILED
        return v, resp

    fake.request = request  # type: ignore[method-assign]
    r = await make(fake)
    res = await r.resolve([tid])
    assert res[tid].code == 29
    assert not res[tid].retriable
    await r.close()


async def test_close_answers_waiters_with_retriable_error(topics):
    fake = FakeUpstream(topics, latency=5)
    r = await make(fake)
    tid = next(iter(topics))
    task = asyncio.create_task(r.resolve([tid]))
    await asyncio.sleep(0.02)
    await r.close()
    res = await asyncio.wait_for(task, 1)
    assert res[tid].code == LOOKUP_FAILED
    assert res[tid].retriable


# ---------------------------------------------------------------- LRU
async def test_lru_bound_evicts_least_recently_used():
    r = await make(FakeUpstream(), max_entries=3)
    a, b, c, d, e = (uid() for _ in range(5))
    r.learn(a, "a")
    r.learn(b, "b")
    r.learn(c, "c")
    assert r.cached(a) == "a"  # a is now the most recent
    r.learn(d, "d")
    assert len(r) == 3
    assert r.cached(b) is None
    assert r.cached(a) == "a"
    assert r.cached(c) == "c"
    assert r.cached(d) == "d"
    found, missing = r.get_cached([a, c])  # c most recent, then a
    assert found == {a: "a", c: "c"}
    assert missing == []
    r.learn(e, "e")
    assert r.cached(d) is None
    assert r.stats.evictions == {"lru": 2}
    assert {r.cached(x) for x in (a, c, e)} == {"a", "c", "e"}
    await r.close()


async def test_lru_stays_exact_for_many_entries():
    r = await make(FakeUpstream(), max_entries=100)
    ids = [uid() for _ in range(100)]
    for n, i in enumerate(ids):
        r.learn(i, f"t{n}")
    for i in ids[:50]:  # touch the oldest half
        assert r.cached(i) is not None
    for n in range(50):
        r.learn(uid(), f"new{n}")
    assert all(r.cached(i) is not None for i in ids[:50])
    assert all(r.cached(i) is None for i in ids[50:])
    await r.close()


async def test_get_cached_and_hit_miss_counts():
    r = await make(FakeUpstream())
    a, b = uid(), uid()
    r.learn(a, "a")
    found, missing = r.get_cached([a, b, b])
    assert found == {a: "a"}
    assert missing == [b]
    assert (r.stats.hits, r.stats.misses) == (1, 2)
    await r.close()


# ---------------------------------------------------------------- sweep
async def test_sweep_evicts_dead_ids_and_keeps_live_ones(topics):
    fake = FakeUpstream(topics)
    r = await make(fake, idle_revalidate_s=0)
    dead = uid()
    for i, n in topics.items():
        r.learn(i, n)
    r.learn(dead, "gone")
    assert await r.sweep_once() == 1
    assert len(fake.metadata_calls) == 1  # one batched lookup for all idle entries
    assert len(fake.metadata_calls[0][1].topics) == len(topics) + 1
    assert r.cached(dead) is None
    assert all(r.cached(i) == n for i, n in topics.items())
    assert r.stats.evictions == {"sweep": 1}
    res = await r.resolve([dead])  # negative-cached by the sweep
    assert res[dead].code == UNKNOWN_TOPIC_ID
    assert len(fake.metadata_calls) == 1
    await r.close()


async def test_sweep_only_revalidates_idle_entries(topics):
    fake = FakeUpstream(topics)
    r = await make(fake, idle_revalidate_s=0.1)
    ids = list(topics)
    for i in ids:
        r.learn(i, topics[i])
    assert await r.sweep_once() == 0
    assert fake.metadata_calls == []
    await asyncio.sleep(0.12)
    r.cached(ids[0])  # used recently: not idle
    assert await r.sweep_once() == 0
    assert len(fake.metadata_calls) == 1
    asked = {t.topic_id for t in fake.metadata_calls[0][1].topics}
    assert asked == set(ids[1:])
    assert await r.sweep_once() == 0
    assert len(fake.metadata_calls) == 1
    await r.close()


async def test_sweep_failure_keeps_entries(topics):
    fake = FakeUpstream(topics)
    fake.fail = UpstreamError("down")
    r = await make(fake, idle_revalidate_s=0)
    tid = next(iter(topics))
    r.learn(tid, topics[tid])
    assert await r.sweep_once() == 0
    assert r.cached(tid) == topics[tid]
    await r.close()


async def test_periodic_sweep_task(topics):
    fake = FakeUpstream(topics)
    r = await make(fake, idle_revalidate_s=0, sweep_interval_s=0.02)
    dead = uid()
    r.learn(dead, "gone")
    r.start()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if r.stats.evictions.get("sweep"):
            break
    assert r.stats.evictions.get("sweep") == 1
    assert len(r) == 0
    await r.close()


async def test_sweep_with_all_topics_fallback(topics):
    fake = FakeUpstream(topics, metadata_max=11)
    r = await make(fake, idle_revalidate_s=0)
    dead = uid()
    r.learn(dead, "gone")
    for i, n in topics.items():
        r.learn(i, n)
    assert await r.sweep_once() == 1
    assert [m.topics for _v, m in fake.metadata_calls] == [None]
    await r.close()


# ---------------------------------------------------------------- passive learning
def md(version: int, *topics: MetadataResponseTopic) -> MetadataResponse:
    return roundtrip(MetadataResponse(topics=list(topics), cluster_id="c"), version)


async def test_observe_metadata_learns_and_evicts():
    fake = FakeUpstream()
    r = await make(fake)
    a, b, c = uid(), uid(), uid()
    r.observe_metadata_response(
        12,
        md(
            12,
            MetadataResponseTopic(error_code=0, name="a", topic_id=a),
            MetadataResponseTopic(error_code=0, name="b", topic_id=b),
            MetadataResponseTopic(error_code=0, name="c", topic_id=c),
        ),
    )
    assert (r.cached(a), r.cached(b), r.cached(c)) == ("a", "b", "c")
    # a looked-up id answered with 100 (Kafka) or 3 (Tansu): evicted and negative-cached
    r.observe_metadata_response(
        12,
        md(
            12,
            MetadataResponseTopic(error_code=100, name=None, topic_id=a),
            MetadataResponseTopic(error_code=3, name=None, topic_id=b),
        ),
    )
    assert r.cached(a) is None
    assert r.cached(b) is None
    res = await r.resolve([a, b])
    assert res[a].code == res[b].code == UNKNOWN_TOPIC_ID
    assert fake.calls == []
    # a lookup by name that says the name does not exist kills every id it had
    r.observe_metadata_response(10, md(10, MetadataResponseTopic(error_code=3, name="c", topic_id=ZERO)))
    assert r.cached(c) is None
    assert r.stats.evictions == {"unknown_id": 3}
    await r.close()


async def test_observe_metadata_ignores_versions_without_ids_and_zero_ids():
    r = await make(FakeUpstream())
    a = uid()
    r.observe_metadata_response(9, md(9, MetadataResponseTopic(error_code=0, name="a")))
    r.observe_metadata_response(
        12,
        md(
            12,
            MetadataResponseTopic(error_code=0, name="z", topic_id=ZERO),
            MetadataResponseTopic(error_code=5, name="a", topic_id=a),
        ),
    )
    assert len(r) == 0
    await r.close()


async def test_observe_create_topics():
    r = await make(FakeUpstream())
    a, b, c = uid(), uid(), uid()
    msg = CreateTopicsResponse(
        topics=[
            CreatableTopicResult(name="a", topic_id=a, error_code=0),
            CreatableTopicResult(name="b", topic_id=b, error_code=36),
        ]
    )
    r.observe_create_topics_response(7, roundtrip(msg, 7))
    assert r.cached(a) == "a"
    assert r.cached(b) is None
    r.observe_create_topics_response(
        6, roundtrip(CreateTopicsResponse(topics=[CreatableTopicResult(name="c", error_code=0)]), 6)
    )
    r.observe_create_topics_response(
        7,
        roundtrip(CreateTopicsResponse(topics=[CreatableTopicResult(name="c", topic_id=c, error_code=0)]), 7),
        validate_only=True,
    )
    assert r.cached(c) is None
    assert len(r) == 1
    await r.close()


async def test_observe_delete_topics_by_id_and_by_name():
    fake = FakeUpstream()
    r = await make(fake)
    a, old_b, new_b, c = uid(), uid(), uid(), uid()
    for i, n in ((a, "a"), (old_b, "b"), (new_b, "b"), (c, "c")):
        r.learn(i, n)
    r.observe_delete_topics_response(
        6, roundtrip(DeleteTopicsResponse(responses=[DeletableTopicResult(name=None, topic_id=a, error_code=0)]), 6)
    )
    assert r.cached(a) is None
    assert r.cached(c) == "c"
    r.observe_delete_topics_response(
        5, roundtrip(DeleteTopicsResponse(responses=[DeletableTopicResult(name="b", error_code=0)]), 5)
    )
    assert r.cached(old_b) is None
    assert r.cached(new_b) is None
    r.observe_delete_topics_response(
        6, roundtrip(DeleteTopicsResponse(responses=[DeletableTopicResult(name="c", topic_id=c, error_code=41)]), 6)
    )  # failed delete: kept
    assert r.cached(c) == "c"
    assert r.stats.evictions == {"deleted": 3}
    res = await r.resolve([a, old_b])
    assert res[a].code == res[old_b].code == UNKNOWN_TOPIC_ID
    assert fake.calls == []
    await r.close()


async def test_observe_unknown_id_and_forget(topics):
    fake = FakeUpstream(topics)
    r = await make(fake)
    a, b = list(topics)[:2]
    r.learn(a, topics[a])
    r.learn(b, topics[b])
    r.observe_unknown_id(a)
    assert r.cached(a) is None
    assert (await r.resolve([a]))[a].code == UNKNOWN_TOPIC_ID
    assert fake.calls == []
    r.forget(b, "test")
    assert r.cached(b) is None
    assert (await r.resolve([b])) == {b: topics[b]}
    assert len(fake.metadata_calls) == 1
    r.learn(a, topics[a])  # a fresh response says it exists: the negative entry goes
    assert (await r.resolve([a])) == {a: topics[a]}
    assert r.stats.evictions == {"unknown_id": 1, "test": 1}
    await r.close()


async def test_delete_seen_while_lookup_in_flight_wins(topics):
    fake = FakeUpstream(topics, latency=0.2)
    r = await make(fake)
    tid = next(iter(topics))
    task = asyncio.create_task(r.resolve([tid]))
    await on_the_wire(fake)
    r.observe_delete_topics_response(
        6,
        roundtrip(
            DeleteTopicsResponse(responses=[DeletableTopicResult(name=topics[tid], topic_id=tid, error_code=0)]), 6
        ),
    )
    res = await task
    assert res[tid].code == UNKNOWN_TOPIC_ID
    assert r.cached(tid) is None
    await r.close()


# ---------------------------------------------------------------- metrics
async def test_prometheus_metrics(topics):
    fake = FakeUpstream(topics)
    r = await make(fake, cluster="metrics-test", max_entries=2)
    ids = list(topics)
    await r.resolve(ids[:1])
    r.cached(ids[0])
    r.learn(ids[1], topics[ids[1]])
    r.learn(ids[2], topics[ids[2]])  # evicts ids[0] (lru)

    def val(name, **labels):
        return REGISTRY.get_sample_value(name, {"cluster": "metrics-test", **labels})

    assert val("kgate_topic_names_hits_total") == r.stats.hits == 1
    assert val("kgate_topic_names_misses_total") == r.stats.misses == 1
    assert val("kgate_topic_names_lookups_total") == 1
    assert val("kgate_topic_names_lookup_seconds_count") == 1
    assert val("kgate_topic_names_evictions_total", reason="lru") == 1
    assert val("kgate_topic_names_size") == 2
    await r.close()
    assert val("kgate_topic_names_hits_total") == 1  # counters survive the resolver


# ---------------------------------------------------------------- invariants under random operations
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["learn", "hit", "forget", "delete_name", "unknown", "sweep_mark"]), st.integers(0, 15)
        ),
        max_size=80,
    ),
    st.integers(1, 8),
)
def test_cache_invariants_hold_under_random_operations(ops, max_entries):
    """Whatever happens: the bound holds, the name index matches the entries, entries stay sorted
    by epoch (the sweep relies on it), and a cached name is always the one learnt for that id."""
    r = TopicNameResolver(FakeUpstream(), cluster="hypothesis", max_entries=max_entries)
    ids = [UUID(int=i + 1) for i in range(16)]
    name_of = {i: f"n{n % 5}" for n, i in enumerate(ids)}  # several ids share a name (recreations)
    for op, n in ops:
        tid = ids[n]
        if op == "learn":
            r.learn(tid, name_of[tid])
        elif op == "hit":
            assert r.cached(tid) in (None, name_of[tid])
        elif op == "forget":
            r.forget(tid, "test")
        elif op == "delete_name":
            r.observe_delete_topics_response(
                5, DeleteTopicsResponse(responses=[DeletableTopicResult(name=name_of[tid], error_code=0)])
            )
            assert all(r.cached(i) is None for i in ids if name_of[i] == name_of[tid])
        elif op == "unknown":
            r.observe_unknown_id(tid)
            assert r.cached(tid) is None
        else:
            r.cache.epoch += 1  # what a sweep does to the clock
        assert len(r) <= max_entries
        epochs = [e.epoch for e in r.cache.entries.values()]
        assert epochs == sorted(epochs)
        indexed = {(k, name) for name, keys in r.cache.by_name.items() for k in keys}
        assert indexed == {(k, e.name) for k, e in r.cache.entries.items()}
        assert all(keys for keys in r.cache.by_name.values())
