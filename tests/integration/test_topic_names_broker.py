"""TopicNameResolver against a real broker (Tansu, then Apache Kafka) through a real UpstreamClient.

Topics are created with confluent-kafka's AdminClient (and, where the test needs to observe the
broker's own answer, with CreateTopics / DeleteTopics sent over kgate's UpstreamClient); their
ids come from a Metadata v12 request by name. The resolver must map ids to names, answer 100 for
unknown ids (Tansu says 3), and never resolve a deleted topic's id to the topic recreated under
the same name.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from uuid import UUID

import pytest
from support.ports import HOST
from support.workloads import confluent_create_topic, unique

from kgate.api import TopicNameError
from kgate.codec.generated.admin.create_topics import CreatableTopic, CreateTopicsRequest
from kgate.codec.generated.admin.delete_topics import DeleteTopicsRequest, DeleteTopicState
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.proxy.carrier.upstream_client import UpstreamClient
from kgate.topic_ids import TopicNameResolver
from kgate.topic_ids.lookup import UNKNOWN_TOPIC_ID

pytestmark = pytest.mark.timeout(120)


def client_for(broker) -> UpstreamClient:
    return UpstreamClient(lambda: [(HOST, broker.port)], client_id="kgate-topic-names-test")


async def ids_by_name(client: UpstreamClient, names: list[str]) -> dict[str, UUID]:
    req = MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False)
    version, resp = await client.request(3, req, lo=12)
    assert version >= 12
    out = {}
    for t in resp.topics:
        assert t.error_code == 0, t
        assert t.topic_id.int != 0
        out[t.name] = t.topic_id
    return out


async def create(bootstrap: str, *names: str) -> None:
    await asyncio.gather(*(asyncio.to_thread(confluent_create_topic, bootstrap, n, 2) for n in names))


async def admin_delete(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    def run():
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([name], operation_timeout=20, request_timeout=20)[name].result(timeout=30)

    await asyncio.to_thread(run)


async def wait_listed(client: UpstreamClient, name: str) -> None:
    """Until a Metadata request names ``name`` without error.

    Kafka answers CreateTopics once the controller has committed the topic; the broker's metadata
    cache learns it moments later, so a Metadata request sent at once may still say
    UNKNOWN_TOPIC_OR_PARTITION (seen once in CI: error 3 right after a successful CreateTopics).
    """
    deadline = time.monotonic() + 20
    while True:
        req = MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
        _v, resp = await client.request(3, req, lo=12)
        if resp.topics[0].error_code == 0:
            return
        assert time.monotonic() < deadline, f"{name} not listed: {resp.topics[0]}"
        await asyncio.sleep(0.1)


async def wait_gone(client: UpstreamClient, name: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        req = MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
        _v, resp = await client.request(3, req, lo=12)
        if resp.topics[0].error_code != 0:
            return
        assert time.monotonic() < deadline, f"{name} still there"
        await asyncio.sleep(0.1)


async def test_resolve_ids_unknown_and_negative_cache(broker):
    client = client_for(broker)
    names = [unique("tn-a"), unique("tn-b"), unique("tn-c")]
    await create(broker.bootstrap, *names)
    ids = await ids_by_name(client, names)
    r = TopicNameResolver(client, cluster="it-resolve")
    try:
        res = await asyncio.gather(*(r.resolve([ids[n]]) for n in names))
        assert [x[ids[n]] for x, n in zip(res, names, strict=True)] == names
        assert r.stats.lookups == 1  # three concurrent misses, one batched v12 request
        assert all(r.cached(ids[n]) == n for n in names)

        unknown = uuid.uuid4()
        res = await r.resolve([unknown])
        err = res[unknown]
        assert isinstance(err, TopicNameError)
        assert err.code == UNKNOWN_TOPIC_ID
        assert not err.retriable
        assert r.stats.lookups == 2
        assert (await r.resolve([unknown]))[unknown].code == UNKNOWN_TOPIC_ID
        assert r.stats.lookups == 2
        assert r.stats.negative_hits == 1
    finally:
        await r.close()
        client.close()


async def test_fallback_all_topics_against_real_broker(broker):
    """A broker without Metadata v12 (simulated by capping the version kgate may use): the
    resolver asks v11 for all topics and never sends an id below v12."""

    class Capped(UpstreamClient):
        def pick_version(self, api_key, lo=0, hi=None):
            if api_key == 3:
                hi = 11 if hi is None else min(hi, 11)
            return super().pick_version(api_key, lo, hi)

    client = client_for(broker)
    name = unique("tn-fallback")
    await create(broker.bootstrap, name)
    tid = (await ids_by_name(client, [name]))[name]
    client.close()
    capped = Capped(lambda: [(HOST, broker.port)])
    r = TopicNameResolver(capped, cluster="it-fallback")
    try:
        unknown = uuid.uuid4()
        res = await r.resolve([tid, unknown])
        assert res[tid] == name
        assert res[unknown].code == UNKNOWN_TOPIC_ID
        assert r.stats.lookups == 1
    finally:
        await r.close()
        capped.close()


async def test_delete_recreate_observed_responses(broker):
    """Delete and recreate with kgate's own requests; the resolver sees the broker's answers."""
    client = client_for(broker)
    name = unique("tn-observed")
    await create(broker.bootstrap, name)
    old = (await ids_by_name(client, [name]))[name]
    r = TopicNameResolver(client, cluster="it-observed")
    try:
        assert (await r.resolve([old])) == {old: name}

        v, resp = await client.request(
            20, DeleteTopicsRequest(topics=[DeleteTopicState(name=None, topic_id=old)], timeout_ms=20000), lo=6
        )
        assert resp.responses[0].error_code == 0, resp
        r.observe_delete_topics_response(v, resp)
        assert r.cached(old) is None
        await wait_gone(client, name)

        v, resp = await client.request(
            19,
            CreateTopicsRequest(
                topics=[CreatableTopic(name=name, num_partitions=1, replication_factor=1)], timeout_ms=20000
            ),
            lo=7,
        )
        assert resp.topics[0].error_code == 0, resp
        r.observe_create_topics_response(v, resp)
        new = resp.topics[0].topic_id
        assert new != old
        assert new.int != 0
        lookups = r.stats.lookups
        assert r.cached(new) == name  # learnt passively, no lookup
        res = await r.resolve([old, new])
        assert res[new] == name
        assert isinstance(res[old], TopicNameError)
        assert res[old].code == UNKNOWN_TOPIC_ID
        assert r.stats.lookups == lookups  # old id negative-cached by the delete
        await wait_listed(client, name)
        assert (await ids_by_name(client, [name]))[name] == new
    finally:
        await r.close()
        client.close()


async def test_delete_recreate_unseen_sweep_evicts_old_id(broker):
    """Delete and recreate behind kgate's back (another client, another fleet member): the old
    id's entry is dead until the sweep re-validates it; it never resolves to the new topic."""
    client = client_for(broker)
    name = unique("tn-sweep")
    await create(broker.bootstrap, name)
    old = (await ids_by_name(client, [name]))[name]
    r = TopicNameResolver(client, cluster="it-sweep", idle_revalidate_s=0, negative_ttl_s=0.2)
    try:
        assert (await r.resolve([old])) == {old: name}
        await admin_delete(broker.bootstrap, name)
        await wait_gone(client, name)
        await create(broker.bootstrap, name)
        new = (await ids_by_name(client, [name]))[name]
        assert new != old

        res = await r.resolve([new])
        assert res[new] == name

        assert await r.sweep_once() == 1  # old id: Tansu says 3 -> dead
        assert r.cached(old) is None
        assert r.cached(new) == name
        res = await r.resolve([old])
        assert isinstance(res[old], TopicNameError)
        assert res[old].code == UNKNOWN_TOPIC_ID
        # after the negative TTL, a fresh lookup still says "does not exist"
        lookups = r.stats.lookups
        await asyncio.sleep(0.3)
        res = await r.resolve([old])
        assert r.stats.lookups == lookups + 1
        assert isinstance(res[old], TopicNameError)
        assert res[old].code == UNKNOWN_TOPIC_ID
    finally:
        await r.close()
        client.close()


async def test_broker_down_is_retriable_and_not_cached(tansu_factory):
    t = tansu_factory("short-lived")
    client = client_for(t)
    name = unique("tn-down")
    await create(t.bootstrap, name)
    tid = (await ids_by_name(client, [name]))[name]
    r = TopicNameResolver(client, cluster="it-down", lookup_timeout_s=3)
    try:
        t.kill()
        res = await r.resolve([tid])
        err = res[tid]
        assert isinstance(err, TopicNameError)
        assert err.retriable
        assert err.code == -1
        assert r.stats.lookup_failures >= 1
        res2 = await r.resolve([tid])
        assert res2[tid].retriable  # asked again, not answered from a negative cache
        assert r.stats.negative_hits == 0
    finally:
        await r.close()
        client.close()
