"""The authorizer against Apache Kafka 4.0.2: authorized operations and KIP-848 regex subscriptions.

Kafka 4.0 without an authorizer answers every ``*_authorized_operations`` field with all the
operations the resource supports (the controls below, straight at the broker). Through kgate a
client sees the operations kgate's rules give it (``filters.builtin.authz_operations``), asked with
real admin clients: confluent-kafka's describe_topics / describe_cluster / describe_consumer_groups
(Metadata v13, Metadata v10's cluster field, ConsumerGroupDescribe) and kafka-python's describe_groups
and describe_cluster (DescribeGroups, DescribeCluster).

A KIP-848 regex subscription (confluent-kafka ``group.protocol=consumer``) is resolved by the broker
over every topic; through kgate the member is assigned only the topics it may describe: librdkafka
consumes the allowed topic either way (it drops an assigned id whose Metadata kgate refuses), so the
heartbeat answers are also read from spec-built ConsumerGroupHeartbeat v1 frames, where the hidden
topic's id shows straight at the broker and not through kgate.
Against Kafka only: Tansu leaves the bitfields unset (confluent-kafka reads None for a topic and the
cluster there), and the regex subscription is Kafka 4.0's KIP-848 behaviour.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from kgate.codec.generated import consumer_group_heartbeat as cgh
from kgate.codec.generated import find_coordinator as fc
from kgate.codec.generated import metadata as md
from kgate.proxy.upstream_client import UpstreamClient

pytestmark = pytest.mark.timeout(150)

RULES = [
    {"allow": "all", "topic": "*", "client_id": "full-*"},
    {"allow": "all", "group": "*", "client_id": "full-*"},
    {"allow": "all", "cluster": True, "client_id": "full-*"},
    {"allow": ["read"], "topic": "*", "client_id": "reader-*"},
    {"allow": ["read"], "group": "*", "client_id": "reader-*"},
    {"allow": ["describe"], "cluster": True, "client_id": "reader-*"},
    {"deny": "all", "topic": {"glob": "*-hidden"}},
]
AUTHZ = [{"name": "authorizer", "config": {"default": "deny", "rules": RULES}}]
A = AclOperation
COORDINATOR_NOT_READY = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
TOPIC_OPS = {A.READ, A.WRITE, A.CREATE, A.DELETE, A.ALTER, A.DESCRIBE, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS}
GROUP_OPS = {A.READ, A.DESCRIBE, A.DELETE, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS}
CLUSTER_OPS = {A.CREATE, A.CLUSTER_ACTION, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS, A.IDEMPOTENT_WRITE, A.ALTER,
               A.DESCRIBE}


@pytest.fixture
def k(kafka, kgate_factory) -> Any:
    return kgate_factory(kafka.bootstrap, extra={"proxy": {"drain_timeout_s": 1}, "filters": AUTHZ})


def _topics(kafka: Any, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(30)


def _consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "client.id": client_id, "auto.offset.reset": "earliest", "enable.auto.commit": False})


def _poll_until(c: Consumer, done: Any, errors: list[KafkaError], seen: list[Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            errors.append(msg.error())
        else:
            seen.append(msg)
    assert done(), f"timed out; errors {errors}"


def test_authorized_operations_are_what_kgates_rules_allow(kafka, k) -> None:
    tag = uuid.uuid4().hex[:8]
    topic, group = f"ops-{tag}", f"ops-g-{tag}"
    _topics(kafka, topic)
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap})
    reader = AdminClient({"bootstrap.servers": k.bootstrap, "client.id": "reader-admin"})
    full = AdminClient({"bootstrap.servers": k.bootstrap, "client.id": "full-admin"})

    def topic_ops(admin: AdminClient) -> set[AclOperation]:
        desc = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
        return set(desc.authorized_operations)

    assert topic_ops(direct) == TOPIC_OPS  # control: Kafka reports every topic operation
    assert topic_ops(full) == TOPIC_OPS
    assert topic_ops(reader) == {A.READ, A.DESCRIBE}  # read implies describe, as in Kafka

    def cluster_ops(admin: AdminClient) -> set[AclOperation]:
        return set(admin.describe_cluster(include_authorized_operations=True).result(30).authorized_operations)

    assert cluster_ops(direct) == CLUSTER_OPS
    assert cluster_ops(full) == CLUSTER_OPS
    assert cluster_ops(reader) == {A.DESCRIBE}

    # a live KIP-848 group (ConsumerGroupDescribe) ...
    c = _consumer(k.bootstrap, group, "reader-consumer")
    try:
        c.subscribe([topic])
        _poll_until(c, lambda: bool(c.assignment()), [], [])

        def group_ops(admin: AdminClient) -> set[AclOperation]:
            futures = admin.describe_consumer_groups([group], include_authorized_operations=True)
            return set(futures[group].result(30).authorized_operations)

        assert group_ops(direct) == GROUP_OPS
        assert group_ops(reader) == {A.READ, A.DESCRIBE}
    finally:
        c.close()
    # ... and a classic one, described with DescribeGroups by kafka-python (which always asks for them)
    classic = f"ops-classic-{tag}"
    kc = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": classic, "group.protocol": "classic"})
    try:
        kc.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # creates the (empty) group
    finally:
        kc.close()
    # kafka-python: DescribeGroups for the classic group, DescribeCluster (confluent-kafka's describe_cluster
    # asks Metadata v10 instead)
    cases = (("reader-kp", {"READ", "DESCRIBE"}, {"DESCRIBE"}),
             ("full-kp", {o.name for o in GROUP_OPS}, {o.name for o in CLUSTER_OPS}))
    for client_id, group_expected, cluster_expected in cases:
        kp = KafkaAdminClient(bootstrap_servers=k.bootstrap, client_id=client_id)
        try:
            described = kp.describe_groups([classic])[classic]
            cluster = kp.describe_cluster()
        finally:
            kp.close()
        assert described["error"] is None, described
        assert {getattr(o, "name", o) for o in described["authorized_operations"]} == group_expected
        assert set(cluster["authorized_operations"]) == cluster_expected, cluster


def test_regex_subscription_is_assigned_only_describable_topics(kafka, k) -> None:
    """The broker resolves ``^rx-TAG-.*`` to both topics; through kgate the member gets only the open one."""
    tag = uuid.uuid4().hex[:8]
    open_topic, hidden = f"rx-{tag}-open", f"rx-{tag}-hidden"
    _topics(kafka, open_topic, hidden)
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    for t in (open_topic, hidden):
        p.produce(t, b"m-" + t.encode())
    assert p.flush(30) == 0
    group = f"rx-g-{tag}"
    c = _consumer(k.bootstrap, group, "reader-rx")
    errors: list[KafkaError] = []
    seen: list[Any] = []
    try:
        c.subscribe([f"^rx-{tag}-.*"])
        _poll_until(c, lambda: bool(seen), errors, seen)
        assert {tp.topic for tp in c.assignment()} == {open_topic}
        # control: the broker assigned the hidden topic to this member too
        direct = AdminClient({"bootstrap.servers": kafka.bootstrap})
        desc = direct.describe_consumer_groups([group])[group].result(30)
        assigned = {tp.topic for m in desc.members for tp in m.assignment.topic_partitions}
        assert assigned == {open_topic, hidden}
    finally:
        c.close()
    assert [m.topic() for m in seen] == [open_topic] and seen[0].value() == f"m-{open_topic}".encode()
    assert not [e for e in errors if e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED], errors


async def _regex_assignment(port: int, group: str, regex: str, client_id: str) -> set[uuid.UUID]:
    """Join ``group`` with a regex subscription (ConsumerGroupHeartbeat v1) and heartbeat until the broker,
    which resolves regexes in the background, assigns something; leave; return the assigned ids."""
    c = UpstreamClient(lambda: [("127.0.0.1", port)], client_id=client_id)
    member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    try:
        req = cgh.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_regex=regex, topic_partitions=[])
        deadline = time.monotonic() + 30
        find = fc.FindCoordinatorRequest(key_type=0, coordinator_keys=[group])
        while (code := (await c.request(10, find, 4))[1].coordinators[0].error_code) in COORDINATOR_NOT_READY:
            # a fresh broker creates __consumer_offsets on the first FindCoordinator: asked again, as clients do
            assert time.monotonic() < deadline, code
            await asyncio.sleep(0.2)
        assert code == 0, code
        while True:
            resp = (await c.request(68, req, 1))[1]
            if resp.error_code in COORDINATOR_NOT_READY and req.member_epoch == 0:
                assert time.monotonic() < deadline, resp  # the group's partition still loading: asked again
                await asyncio.sleep(0.2)
                continue
            assert resp.error_code == 0, resp
            if resp.assignment is not None and resp.assignment.topic_partitions:
                ids = {tp.topic_id for tp in resp.assignment.topic_partitions}
                break
            assert time.monotonic() < deadline, "no assignment within 30 s"
            await asyncio.sleep(0.2)  # heartbeat pacing: the broker resolves the regex on its own schedule
            req = cgh.ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id,
                                                    member_epoch=resp.member_epoch)
        leave = cgh.ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=-1)
        await c.request(68, leave, 1)
        return ids
    finally:
        c.close()


async def _topic_ids(port: int, *names: str) -> dict[str, uuid.UUID]:
    c = UpstreamClient(lambda: [("127.0.0.1", port)])
    try:
        req = md.MetadataRequest(topics=[md.MetadataRequestTopic(name=n) for n in names])
        return {t.name: t.topic_id for t in (await c.request(3, req, 12))[1].topics}
    finally:
        c.close()


@pytest.fixture(params=["authorizer", "topic-policy"])
def either(request, kafka, kgate_factory) -> Any:
    """kgate with the authorizer, or with topic-policy (sugar over the same rules) denying ``*-hidden``."""
    filters = AUTHZ if request.param == "authorizer" else [
        {"name": "topic-policy", "config": {"deny": ["*-hidden"]}}]
    return kgate_factory(kafka.bootstrap, extra={"proxy": {"drain_timeout_s": 1}, "filters": filters})


async def test_regex_heartbeat_answers_carry_no_hidden_topic_id(kafka, either) -> None:
    k = either
    tag = uuid.uuid4().hex[:8]
    open_topic, hidden = f"rh-{tag}-open", f"rh-{tag}-hidden"
    await asyncio.to_thread(_topics, kafka, open_topic, hidden)
    ids = await _topic_ids(kafka.port, open_topic, hidden)
    regex = f"rh-{tag}-.*"
    direct = await _regex_assignment(kafka.port, f"rh-d-{tag}", regex, "reader-raw")
    assert direct == {ids[open_topic], ids[hidden]}  # control: the broker's resolution includes the hidden one
    via = await _regex_assignment(k.listen_port, f"rh-k-{tag}", regex, "reader-raw")
    assert via == {ids[open_topic]}
