"""Produce v13 by topic id, share groups and Streams groups through a real kgate (in process) to Apache
Kafka 4.3.1, with the authorizer and topic-policy in the chain.

Requests are built with kgate's codec classes and sent raw by ``UpstreamClient`` (the Streams library
is not available here, and the Java share consumer needs no help from this test: the point is what
kgate refuses and what it lets the broker answer). Ground truth is read straight from the broker.

Tansu is not used: it does not support Produce v13 (the connection drops; ../shared/PROTOCOL.md) nor
share or Streams groups.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from support.idtools import (
    TOPIC_AUTHORIZATION_FAILED,
    client,
    create_topic,
    fetch_request,
    fetch_results,
    kgate_config,
    lookups_metric,
    topic_id,
    unique,
)
from support.inproc_kgate import InprocKgate
from support.wire import record_batch

from kgate.api import ApiKey, ErrorCode
from kgate.codec.generated.api_keys import API_VERSIONS, FETCH, PRODUCE
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.codec.generated.groups import streams_group_heartbeat as stream
from kgate.codec.generated.session.api_versions import ApiVersionsRequest
from kgate.codec.generated.share import share_fetch as sf
from kgate.codec.generated.share import share_group_heartbeat as sgh

API_VERSIONS_V3 = ApiVersionsRequest(client_software_name="kgate-test", client_software_version="1.0")
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED

CHAIN = [
    # topic-policy hides "*-hidden-*" from everyone; the authorizer denies "*-secret-*" and "secret-" groups
    {"name": "topic-policy", "config": {"deny": ["*-hidden-*"]}},
    {
        "name": "authorizer",
        "config": {
            "default": "deny",
            "rules": [
                {"allow": "all", "topic": "*"},
                {"allow": "all", "group": "*"},
                {"allow": ["describe"], "cluster": True},
                {"deny": "all", "topic": {"glob": "*-secret-*"}},
                {"deny": "all", "group": {"prefix": "secret-"}},
                {"deny": ["create"], "topic": "*", "client_id": "no-create"},
                {"deny": ["create"], "cluster": True, "client_id": "no-create"},
            ],
        },
    },
]


def start(kafka: Any) -> InprocKgate:
    # the default configuration: kgate offers Produce v13 (no version cap since issue 25)
    return InprocKgate(kgate_config(kafka.bootstrap, CHAIN)).start()


async def topic_at_broker(kafka: Any, prefix: str, partitions: int = 1) -> tuple[str, uuid.UUID]:
    name = unique(prefix)
    await asyncio.to_thread(create_topic, kafka.bootstrap, name, partitions)
    direct = client(kafka.port)
    try:
        return name, await topic_id(direct, name)
    finally:
        direct.close()


def produce_v13(*ids: uuid.UUID, value: bytes = b"v") -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name="", topic_id=t, partition_data=[PartitionProduceData(index=0, records=record_batch([value]))]
            )
            for t in ids
        ],
    )


def produced(resp: Any) -> dict[uuid.UUID, int]:
    return {t.topic_id: t.partition_responses[0].error_code for t in resp.responses}


async def at_broker(kafka: Any, tid: uuid.UUID) -> list[bytes]:
    direct = client(kafka.port)
    try:
        _v, resp = await direct.request(FETCH, fetch_request([(tid, [0])]), 16)
        ((_t, _p, code, vals),) = fetch_results(resp)
        assert code == 0
        return vals
    finally:
        direct.close()


# -- Produce v13 ---------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
async def test_produce_v13_by_id_through_an_instance_that_never_saw_the_ids(kafka) -> None:
    """Instance A creates a topic (and learns its id from the answer); instance B never saw it nor the two
    topics created behind kgate's back. Concurrent Produce v13 through B: one lookup names all three ids,
    the allowed topic is written, the denied ones are answered TOPIC_AUTHORIZATION_FAILED per partition and
    nothing of them reaches the broker."""
    a, b = start(kafka), start(kafka)
    try:
        ha = unique("p13-ha")
        await asyncio.to_thread(create_topic, a.bootstrap, ha)  # through A: A learns the id
        _s, secret = await topic_at_broker(kafka, "p13-secret")
        _h, hidden = await topic_at_broker(kafka, "p13-hidden")
        direct = client(kafka.port)
        ha_id = await topic_id(direct, ha)
        direct.close()
        assert a.call(lambda: a.cluster.topic_names.cached(ha_id)) == ha
        assert b.call(lambda: b.cluster.topic_names.cached(ha_id)) is None

        conns = [client(b.port, client_id=f"p13-{i}") for i in range(5)]
        try:
            await asyncio.gather(*(c.request(API_VERSIONS, API_VERSIONS_V3, 3) for c in conns))
            before = lookups_metric()
            answers = await asyncio.gather(
                *(
                    c.request(PRODUCE, produce_v13(ha_id, secret, hidden, value=f"{i}-{j}".encode()), 13, timeout_s=30)
                    for i, c in enumerate(conns)
                    for j in range(4)
                )
            )
        finally:
            for c in conns:
                c.close()
        for version, resp in answers:
            assert version == 13
            assert produced(resp) == {ha_id: 0, secret: TOPIC_AUTHORIZATION_FAILED, hidden: TOPIC_AUTHORIZATION_FAILED}
        assert lookups_metric() - before == 1  # single flight: 20 requests, three cold ids, one lookup
        assert len(await at_broker(kafka, ha_id)) == 20
        assert await at_broker(kafka, secret) == []
        assert await at_broker(kafka, hidden) == []
    finally:
        a.stop()
        b.stop()


# -- share groups ------------------------------------------------------------------------------------
def share_heartbeat(group: str, *topics: str) -> sgh.ShareGroupHeartbeatRequest:
    return sgh.ShareGroupHeartbeatRequest(
        group_id=group,
        member_id=uuid.uuid4().hex[:22],
        member_epoch=0,
        rack_id=None,
        subscribed_topic_names=list(topics),
    )


def share_fetch(group: str, member: str, *ids: uuid.UUID) -> sf.ShareFetchRequest:
    return sf.ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=0,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=10,
        batch_size=10,
        topics=[
            sf.FetchTopic(topic_id=t, partitions=[sf.FetchPartition(partition_index=0, acknowledgement_batches=[])])
            for t in ids
        ],
        forgotten_topics_data=[],
    )


@pytest.mark.timeout(180)
async def test_share_group_heartbeat_and_fetch(kafka) -> None:
    k = start(kafka)
    ok, ok_id = await topic_at_broker(kafka, "sh-ok")
    _secret, secret_id = await topic_at_broker(kafka, "sh-secret")
    c = client(k.port, client_id="share-app")
    try:
        await c.request(API_VERSIONS, API_VERSIONS_V3, 3)
        _v, denied_group = await c.request(ApiKey.SHARE_GROUP_HEARTBEAT, share_heartbeat("secret-sg", ok), 1)
        assert denied_group.error_code == GROUP_DENIED
        _v, denied_topic = await c.request(ApiKey.SHARE_GROUP_HEARTBEAT, share_heartbeat(unique("sg"), ok, _secret), 1)
        assert denied_topic.error_code == TOPIC_AUTHORIZATION_FAILED
        group, join = unique("sg"), share_heartbeat("", ok)
        join.group_id = group
        _v, joined = await c.request(ApiKey.SHARE_GROUP_HEARTBEAT, join, 1)
        assert joined.error_code == 0, joined
        assert joined.member_epoch >= 1, joined  # the broker's answer

        _v, fetched = await c.request(ApiKey.SHARE_FETCH, share_fetch(group, join.member_id, ok_id, secret_id), 1)
        codes = {t.topic_id: t.partitions[0].error_code for t in fetched.responses}
        assert codes[secret_id] == TOPIC_AUTHORIZATION_FAILED  # refused by kgate, never asked of the broker
        # the member's own topic went to the broker, which leaves out a partition with nothing to say yet
        assert codes.get(ok_id, 0) != TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
        k.stop()


# -- Streams groups ----------------------------------------------------------------------------------
def streams_join(group: str, source: str, changelog: str) -> stream.StreamsGroupHeartbeatRequest:
    info = stream.TopicInfo(name=changelog, partitions=0, replication_factor=0, topic_configs=[])
    topology = stream.Topology(
        epoch=0,
        subtopologies=[
            stream.Subtopology(
                subtopology_id="0",
                source_topics=[source],
                source_topic_regex=[],
                state_changelog_topics=[info],
                repartition_sink_topics=[],
                repartition_source_topics=[],
                copartition_groups=[],
            )
        ],
    )
    return stream.StreamsGroupHeartbeatRequest(
        group_id=group,
        member_id=uuid.uuid4().hex[:22],
        member_epoch=0,
        endpoint_information_epoch=0,
        rebalance_timeout_ms=30000,
        topology=topology,
        active_tasks=[],
        standby_tasks=[],
        warmup_tasks=[],
        process_id=str(uuid.uuid4()),
        client_tags=[],
    )


async def exists(c: Any, name: str, wait_s: float) -> bool:
    """Whether the broker has topic ``name`` (waiting up to ``wait_s`` for it to appear)."""
    req = MetadataRequest(
        topics=[MetadataRequestTopic(name=name, topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False
    )
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        _v, resp = await c.request(ApiKey.METADATA, req, 12)
        if resp.topics[0].error_code == 0:
            return True
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.2)


@pytest.mark.timeout(180)
async def test_streams_group_heartbeat(kafka) -> None:
    """Kafka 4.3.1 serves Streams groups (``streams.version`` finalized by default, see below). kgate refuses a
    denied group, a topology naming a denied topic, and a missing internal topic the client may not create
    (which the broker would create with kgate's identity); everything else is the broker's answer."""
    k = start(kafka)
    source, _sid = await topic_at_broker(kafka, "st-in")
    direct = client(kafka.port, client_id="streams-app")
    c = client(k.port, client_id="streams-app")
    nc = client(k.port, client_id="no-create")
    try:
        for x in (direct, c, nc):
            await x.request(API_VERSIONS, API_VERSIONS_V3, 3)
        app = unique("st-app")
        _v, at_broker_answer = await direct.request(
            ApiKey.STREAMS_GROUP_HEARTBEAT, streams_join(app, source, f"{app}-store-changelog"), 0
        )
        # Kafka 4.3.1 serves Streams groups out of the box: the member joins (epoch 1) and the answer's
        # status says MISSING_INTERNAL_TOPICS (3) while the broker creates the changelog itself
        assert at_broker_answer.error_code == 0, at_broker_answer.error_message
        assert 3 in [s.status_code for s in at_broker_answer.status or []]

        _v, denied = await c.request(
            ApiKey.STREAMS_GROUP_HEARTBEAT, streams_join("secret-app", source, "secret-app-store-changelog"), 0
        )
        assert denied.error_code == GROUP_DENIED
        app2 = unique("st-app")
        _v, denied = await c.request(
            ApiKey.STREAMS_GROUP_HEARTBEAT, streams_join(app2, source, f"{app2}-secret-store-changelog"), 0
        )
        assert denied.error_code == TOPIC_AUTHORIZATION_FAILED
        assert f"{app2}-secret-store-changelog" in denied.error_message

        # may not create, and the changelog does not exist: refused before the broker creates it
        app3 = unique("st-app")
        _v, refused = await nc.request(
            ApiKey.STREAMS_GROUP_HEARTBEAT, streams_join(app3, source, f"{app3}-store-changelog"), 0
        )
        assert refused.error_code == TOPIC_AUTHORIZATION_FAILED
        assert refused.error_message == f"Unauthorized to CREATE on topics {app3}-store-changelog"

        # allowed: the broker's answer, as it answers the same request sent directly
        app4 = unique("st-app")
        _v, through = await c.request(
            ApiKey.STREAMS_GROUP_HEARTBEAT, streams_join(app4, source, f"{app4}-store-changelog"), 0
        )
        assert through.error_code == at_broker_answer.error_code
        assert through.member_epoch == at_broker_answer.member_epoch
        assert [s.status_code for s in through.status or []] == [s.status_code for s in at_broker_answer.status or []]
        # the broker created app4's changelog (forwarded), never app3's (refused before the broker saw it)
        assert await exists(direct, f"{app4}-store-changelog", wait_s=20)
        assert not await exists(direct, f"{app3}-store-changelog", wait_s=0)
    finally:
        for x in (direct, c, nc):
            x.close()
        k.stop()
