"""Topic-id resolution and fail-closed filtering end to end: in-process kgate with the built-in
``topic-policy`` filter in front of a real broker (each test runs against Tansu and against
Apache Kafka 4.0), requests built with kgate's codec classes and sent by ``UpstreamClient`` (a
pipelining Kafka client) to kgate or, for the ground truth, straight to the broker.

Topics are created and filled directly at the broker unless a test says otherwise, so kgate's
topic-name cache is cold: every id it knows it either looked up itself or saw in a response.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from support.idtools import (
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    client,
    create_topic,
    delete_topic,
    fetch_request,
    fetch_results,
    kgate_config,
    lookups_metric,
    produce,
    topic_id,
    unique,
)
from support.inproc_kgate import InprocKgate
from support.wire import record_batch

from kgate.codec.generated.api_keys import API_VERSIONS, FETCH, PRODUCE
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.codec.generated.session.api_versions import ApiVersionsRequest

POLICY = {"allow": ["idt-*"], "deny": ["idt-secret-*"]}
# Kafka refuses ApiVersions v3+ without a client software name and version (INVALID_REQUEST)
API_VERSIONS_V3 = ApiVersionsRequest(client_software_name="kgate-test", client_software_version="1.0")


def _start(broker: Any, unresolved: str | None = None, **topic_names: Any) -> InprocKgate:
    cfg = dict(POLICY)
    if unresolved:
        cfg["unresolved_error"] = unresolved
    return InprocKgate(
        kgate_config(broker.bootstrap, [{"name": "topic-policy", "config": cfg}], topic_names or None)
    ).start()


@pytest.fixture
def kg(broker):
    k = _start(broker, negative_ttl_s=0.3)
    yield k
    k.stop()


def _stats(k: InprocKgate) -> Any:
    return k.call(lambda: k.cluster.topic_names.stats)


def _cached(k: InprocKgate, tid: uuid.UUID) -> str | None:
    # through the same call a filter makes (counts a hit or a miss; harmless here)
    return k.call(lambda: k.cluster.topic_names.cached(tid))  # type: ignore[no-any-return]


async def _topic_at_broker(broker: Any, prefix: str, vals: list[bytes], partitions: int = 1) -> tuple[str, uuid.UUID]:
    name = unique(prefix)
    await asyncio.to_thread(create_topic, broker.bootstrap, name, partitions)
    if vals:
        await asyncio.to_thread(produce, broker.bootstrap, name, vals)
    direct = client(broker.port)
    try:
        tid = await topic_id(direct, name)
    finally:
        direct.close()
    return name, tid


async def _fetch(c: Any, topics: list[tuple[uuid.UUID, list[int]]], version: int = 16) -> list[Any]:
    _v, resp = await c.request(FETCH, fetch_request(topics), version)
    return fetch_results(resp)


# -- 2. single flight --------------------------------------------------------------------------
@pytest.mark.timeout(90)
async def test_thousand_concurrent_fetches_by_a_cold_id_make_one_lookup(broker, kg) -> None:
    vals = [f"sf-{i}".encode() for i in range(20)]
    name, tid = await _topic_at_broker(broker, "idt-sf", vals)
    assert _stats(kg).lookups == 0
    metric_before = lookups_metric()

    conns = [client(kg.port, client_id=f"sf{i}") for i in range(20)]
    try:
        # connect all 20 first (ApiVersions only: Tansu answers an empty Metadata topic list with
        # every topic, which would teach kgate the id passively)
        await asyncio.gather(*(c.request(API_VERSIONS, API_VERSIONS_V3, 3) for c in conns))
        assert _stats(kg).lookups == 0
        assert _cached(kg, tid) is None
        # Hold the lookup's answer until every connection's first Fetch has joined it: otherwise a
        # fast lookup can finish before the other connections' Fetches arrive (1 run in 3), and
        # nothing is left to coalesce. Each connection's later Fetches wait behind its first one.
        resolver = kg.cluster.topic_names
        gate: asyncio.Event = kg.call(asyncio.Event)
        original = resolver._request

        async def held(req: Any, lo: int, hi: int | None) -> Any:
            await gate.wait()
            return await original(req, lo, hi)

        kg.call(lambda: setattr(resolver, "_request", held))
        reqs = [
            asyncio.ensure_future(c.request(FETCH, fetch_request([(tid, [0])]), 13 + (j % 4), timeout_s=60))
            for j in range(50)
            for c in conns
        ]
        for _ in range(600):
            if _stats(kg).coalesced >= len(conns) - 1:
                break
            await asyncio.sleep(0.05)
        kg.call(gate.set)
        answers = await asyncio.gather(*reqs)
    finally:
        for c in conns:
            c.close()

    assert len(answers) == 1000
    for _v, resp in answers:
        assert fetch_results(resp) == [(tid, 0, 0, vals)]
    stats = _stats(kg)
    assert stats.lookups == 1, stats
    assert stats.lookup_failures == 0
    assert stats.coalesced == len(conns) - 1  # every other connection's first Fetch joined the one lookup
    assert lookups_metric() - metric_before == 1
    assert _cached(kg, tid) == name


# -- 3. delete and recreate ----------------------------------------------------------------------
@pytest.mark.timeout(90)
async def test_delete_and_recreate_through_kgate_never_serves_the_old_id(broker, kg) -> None:
    old_vals = [f"old-{i}".encode() for i in range(5)]
    name, id1 = await _topic_at_broker(broker, "idt-dr", old_vals)
    c = client(kg.port)
    direct = client(broker.port)
    try:
        assert await _fetch(c, [(id1, [0])]) == [(id1, 0, 0, old_vals)]
        assert _cached(kg, id1) == name

        await asyncio.to_thread(delete_topic, kg.bootstrap, name)  # DeleteTopics passes through kgate
        assert _cached(kg, id1) is None, "DeleteTopics through kgate did not evict the id"
        await asyncio.to_thread(create_topic, kg.bootstrap, name, 1)
        new_vals = [f"new-{i}".encode() for i in range(7)]
        await asyncio.to_thread(produce, broker.bootstrap, name, new_vals)
        id2 = await topic_id(direct, name)
        assert id2 != id1

        assert await _fetch(c, [(id2, [0])]) == [(id2, 0, 0, new_vals)]
        for version in (13, 16):
            assert await _fetch(c, [(id1, [0])], version) == [(id1, 0, UNKNOWN_TOPIC_ID, [])]
        # both in one request: split, the old id refused, the new one served, merged back
        got = await _fetch(c, [(id1, [0]), (id2, [0])])
        assert sorted(got, key=lambda r: r[0] == id1) == [(id2, 0, 0, new_vals), (id1, 0, UNKNOWN_TOPIC_ID, [])]

        # after the negative entry expires kgate asks the broker again: id1 stays dead
        await asyncio.sleep(0.5)
        lookups = _stats(kg).lookups
        assert await _fetch(c, [(id1, [0])]) == [(id1, 0, UNKNOWN_TOPIC_ID, [])]
        assert _stats(kg).lookups == lookups + 1
        assert _cached(kg, id1) is None
        assert _cached(kg, id2) == name
    finally:
        c.close()
        direct.close()


@pytest.mark.timeout(90)
async def test_delete_and_recreate_behind_kgates_back_evicts_the_old_id(broker, kg) -> None:
    """Another fleet instance (here: a client straight at Tansu) deletes and recreates the topic.

    kgate still maps id1 to the name; the first Fetch with id1 is allowed by name and reaches
    the broker, which answers partition error 3 with a ZERO topic id (Tansu). kgate must match
    that answer to the request by position, evict id1, and refuse the next Fetch itself.
    """
    old_vals = [f"old-{i}".encode() for i in range(5)]
    name, id1 = await _topic_at_broker(broker, "idt-drb", old_vals)
    c = client(kg.port)
    direct = client(broker.port)
    try:
        assert await _fetch(c, [(id1, [0])]) == [(id1, 0, 0, old_vals)]
        assert _cached(kg, id1) == name

        await asyncio.to_thread(delete_topic, broker.bootstrap, name)
        await asyncio.to_thread(create_topic, broker.bootstrap, name, 1)
        new_vals = [f"new-{i}".encode() for i in range(7)]
        await asyncio.to_thread(produce, broker.bootstrap, name, new_vals)
        id2 = await topic_id(direct, name)
        assert id2 != id1
        assert _cached(kg, id1) == name  # kgate saw nothing of it

        first = await _fetch(c, [(id1, [0])])
        assert len(first) == 1
        _tid, part, code, recs = first[0]
        assert part == 0, "the old id must never return the new topic's data"
        assert recs == [], "the old id must never return the new topic's data"
        assert code in (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION), first

        assert _cached(kg, id1) is None, (
            "kgate did not evict id1 after the broker answered error 3 for it (Tansu zeroes the topic id "
            f"of that answer, got {first}; the response must be matched to the request by position)"
        )
        assert await _fetch(c, [(id1, [0])]) == [(id1, 0, UNKNOWN_TOPIC_ID, [])]  # refused by the filter
        assert await _fetch(c, [(id2, [0])]) == [(id2, 0, 0, new_vals)]
    finally:
        c.close()
        direct.close()


# -- 4. unresolvable ids fail closed ---------------------------------------------------------------
def _produce_v13(tid: uuid.UUID, partitions: list[int]) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name="",
                topic_id=tid,
                partition_data=[PartitionProduceData(index=p, records=record_batch([b"never"])) for p in partitions],
            )
        ],
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("unresolved", "code"),
    [(None, UNKNOWN_TOPIC_ID), ("TOPIC_AUTHORIZATION_FAILED", TOPIC_AUTHORIZATION_FAILED)],
)
async def test_unresolvable_id_is_refused_in_fetch_and_produce_v13(broker, unresolved, code) -> None:
    k = _start(broker, unresolved)
    c = client(k.port)
    try:
        rand = uuid.uuid4()
        assert await _fetch(c, [(rand, [0, 1, 2])]) == [(rand, p, code, []) for p in (0, 1, 2)]
        transport = c._transport

        # Produce v13: Tansu does not support it and would drop the connection if it got it
        _v, resp = await c.request(PRODUCE, _produce_v13(uuid.uuid4(), [0, 3]), 13)
        assert [
            (t.topic_id.int != 0, [(p.index, p.error_code) for p in t.partition_responses]) for t in resp.responses
        ] == [(True, [(0, code), (3, code)])]
        # the same connection is still open and serves a later request
        _v, md = await c.request(API_VERSIONS, API_VERSIONS_V3, 3)
        assert md.error_code == 0
        assert md.api_keys
        assert c._transport is transport
        assert not transport.is_closing()
        assert k.call(lambda: len(k.cluster.connections)) == 1
    finally:
        c.close()
        k.stop()


@pytest.mark.timeout(60)
async def test_fetch_mixing_a_known_topic_a_denied_topic_and_a_random_id(broker, kg) -> None:
    vals = [f"mix-{i}".encode() for i in range(6)]
    name, known = await _topic_at_broker(broker, "idt-mix", vals, partitions=2)
    _secret, denied = await _topic_at_broker(broker, "idt-secret", [b"s1", b"s2"])
    rand = uuid.uuid4()
    c = client(kg.port)
    try:
        got = await _fetch(c, [(rand, [0]), (known, [0, 1]), (denied, [0])])
    finally:
        c.close()
    by_id: dict[uuid.UUID, list[Any]] = {}
    for tid, part, code, recs in got:
        by_id.setdefault(tid, []).append((part, code, recs))
    assert set(by_id) == {rand, known, denied}
    assert by_id[rand] == [(0, UNKNOWN_TOPIC_ID, [])]
    assert by_id[denied] == [(0, TOPIC_AUTHORIZATION_FAILED, [])]  # name-based deny applied to an id
    assert [p for p, code, _r in by_id[known]] == [0, 1]
    assert all(code == 0 for _p, code, _r in by_id[known])
    assert sorted(r for _p, _c, recs in by_id[known] for r in recs) == sorted(vals)
    assert _cached(kg, known) == name
