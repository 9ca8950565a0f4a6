"""``topic-policy`` hides denied topics' committed offsets and descriptions (real clients; Tansu and Apache Kafka).

Offsets are committed straight to the broker (kgate would refuse the commit for the denied topic),
then read back through kgate: asked for by name, the denied partition answers
TOPIC_AUTHORIZATION_FAILED and no offset; listed whole, the denied topic is not there. The direct
reads are the control that the broker has both.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.inproc_kgate import InprocKgate, make_config

from kgate.codec import api
from kgate.codec.generated.api_keys import DESCRIBE_TOPIC_PARTITIONS
from kgate.codec.generated.data.describe_topic_partitions import TopicRequest
from kgate.proxy.carrier.upstream_client import UpstreamClient


@pytest.fixture
def kgate(broker):
    k = InprocKgate(make_config(broker.bootstrap, [{"name": "topic-policy", "config": {"deny": ["hidden-*"]}}])).start()
    yield k
    k.stop()


@pytest.fixture
def topics(broker) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    shown, hidden = f"shown-{tag}", f"hidden-{tag}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in (shown, hidden)]).values():
        f.result(10)
    return shown, hidden


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def _committed(bootstrap: str, group: str, *names: str) -> dict[str, tuple[int, int | None]]:
    """Per topic: (offset, error code or None), as librdkafka reports OffsetFetch."""
    c = _consumer(bootstrap, group)
    try:
        got = c.committed([TopicPartition(n, 0) for n in names], timeout=10)
    finally:
        c.close()
    return {tp.topic: (tp.offset, tp.error.code() if tp.error else None) for tp in got}


def _listed(bootstrap: str, group: str) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = futures[group].result(10)
    return {tp.topic: tp.offset for tp in result.topic_partitions}


def test_committed_offsets_of_a_denied_topic_are_hidden(broker, kgate, topics) -> None:
    shown, hidden = topics
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = _consumer(broker.bootstrap, group)
    try:
        c.commit(offsets=[TopicPartition(shown, 0, 5), TopicPartition(hidden, 0, 7)], asynchronous=False)
    finally:
        c.close()

    assert _committed(broker.bootstrap, group, shown, hidden) == {shown: (5, None), hidden: (7, None)}  # control
    via = _committed(kgate.bootstrap, group, shown, hidden)
    assert via[shown] == (5, None)
    assert via[hidden][1] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert via[hidden][0] != 7

    assert _listed(broker.bootstrap, group) == {shown: 5, hidden: 7}  # control: the group has both
    assert _listed(kgate.bootstrap, group) == {shown: 5}


async def test_describe_topic_partitions_hides_denied_topics(broker, kgate, topics) -> None:
    shown, hidden = topics
    req = api.API_INFO[DESCRIBE_TOPIC_PARTITIONS].request_class(
        topics=[TopicRequest(name=shown), TopicRequest(name=hidden)]
    )

    async def describe(port: int) -> dict[str, tuple[int, int, bool]]:
        c = UpstreamClient(lambda: [("127.0.0.1", port)])
        try:
            _v, resp = await c.request(DESCRIBE_TOPIC_PARTITIONS, req, 0)
        finally:
            c.close()
        return {t.name: (t.error_code, len(t.partitions), t.topic_id.int != 0) for t in resp.topics}

    direct = await describe(broker.port)
    assert direct[hidden] == (0, 1, True)  # control: the broker describes it, id included
    via = await describe(kgate.port)
    assert via[shown] == direct[shown]
    assert via[hidden] == (29, 0, False)
