"""topic-policy against Apache Kafka: DescribeLogDirs, classic DescribeGroups, ElectLeaders (issue 12, item 3).

Seen only against a real broker: DescribeLogDirs listed denied topics, a classic group's description
showed a member's assignment of a denied topic, and ElectLeaders on a denied topic was accepted.
Each test asks Kafka directly (the control: it has the data) and through kgate with ``secret-*``
denied. Requests are built with kgate's codec and sent with its plain ``UpstreamClient``.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from kgate.codec.generated.admin import describe_log_dirs as dl
from kgate.codec.generated.admin import elect_leaders as el
from kgate.codec.generated.groups import describe_groups as dg
from kgate.proxy.carrier.upstream_client import UpstreamClient

POLICY = [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}]


@pytest.fixture
def setup(kafka, kgate_factory):
    tag = uuid.uuid4().hex[:8]
    secret, shown = f"secret-{tag}", f"shown-{tag}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in (secret, shown)]).values():
        f.result(30)
    k = kgate_factory(kafka.bootstrap, extra={"proxy": {"drain_timeout_s": 1}, "filters": POLICY})
    return kafka, k, secret, shown


async def _ask(port: int, api_key: int, req, version: int):
    c = UpstreamClient(lambda: [("127.0.0.1", port)])
    try:
        return (await c.request(api_key, req, version))[1]
    finally:
        c.close()


async def test_describe_log_dirs_hides_denied_topics(setup) -> None:
    kafka, k, secret, shown = setup
    req = dl.DescribeLogDirsRequest(topics=None)

    def names(resp) -> set[str]:
        return {t.name for r in resp.results for t in r.topics}

    # CreateTopics answers once the controller has the topics; the broker makes their logs when it
    # applies that metadata, a moment later (later still beside a busy core): wait for them there
    deadline = time.monotonic() + 30
    direct = names(await _ask(kafka.port, 35, req, 4))
    while not {secret, shown} <= direct and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        direct = names(await _ask(kafka.port, 35, req, 4))
    via = names(await _ask(k.listen_port, 35, req, 4))
    assert {secret, shown} <= direct
    assert shown in via
    assert secret not in via


async def test_elect_leaders_refuses_denied_topics(setup) -> None:
    _kafka, k, secret, shown = setup
    req = el.ElectLeadersRequest(
        election_type=0,
        timeout_ms=10000,
        topic_partitions=[
            el.TopicPartitions(topic=secret, partitions=[0]),
            el.TopicPartitions(topic=shown, partitions=[0]),
        ],
    )
    resp = await _ask(k.listen_port, 43, req, 2)
    codes = {r.topic: [p.error_code for p in r.partition_result] for r in resp.replica_election_results}
    assert codes[secret] == [29]
    assert codes[shown] != [29]  # the broker's own answer (ELECTION_NOT_NEEDED on a single replica)
    everything = el.ElectLeadersRequest(election_type=0, timeout_ms=10000, topic_partitions=None)
    resp = await _ask(k.listen_port, 43, everything, 2)
    assert resp.error_code == 31
    assert resp.replica_election_results == []


@pytest.mark.timeout(120)
async def test_classic_group_assigned_a_denied_topic_is_not_described(setup) -> None:
    kafka, k, secret, _shown = setup
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "session.timeout.ms": 10000,
        }
    )
    try:
        c.subscribe([secret])
        deadline = time.monotonic() + 60
        while not c.assignment() and time.monotonic() < deadline:
            await asyncio.to_thread(c.poll, 0.2)
        assert c.assignment()
        req = dg.DescribeGroupsRequest(groups=[group])
        direct = (await _ask(kafka.port, 15, req, 5)).groups[0]
        via = (await _ask(k.listen_port, 15, req, 5)).groups[0]
    finally:
        c.close()
    assert direct.error_code == 0
    assert direct.members
    assert secret.encode() in bytes(direct.members[0].member_assignment)
    assert via.error_code == 29
    assert via.members == []
