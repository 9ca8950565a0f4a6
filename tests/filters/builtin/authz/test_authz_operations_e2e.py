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
topic's id shows straight at the broker and not through kgate; and a second member shows that the
partitions kgate hid from the first are released to it at once when the broker rebalances.
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

from kgate.codec.generated.data import metadata as md
from kgate.codec.generated.groups import consumer_group_heartbeat as cgh
from kgate.codec.generated.groups import find_coordinator as fc
from kgate.proxy.carrier.upstream_client import UpstreamClient

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
CLUSTER_OPS = {A.CREATE, A.CLUSTER_ACTION, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS, A.IDEMPOTENT_WRITE, A.ALTER, A.DESCRIBE}


@pytest.fixture
def k(kafka, kgate_factory) -> Any:
    return kgate_factory(kafka.bootstrap, extra={"proxy": {"drain_timeout_s": 1}, "filters": AUTHZ})


def _topics(kafka: Any, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(30)


def _consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


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
    cases = (
        ("reader-kp", {"READ", "DESCRIBE"}, {"DESCRIBE"}),
        ("full-kp", {o.name for o in GROUP_OPS}, {o.name for o in CLUSTER_OPS}),
    )
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
    assert [m.topic() for m in seen] == [open_topic]
    assert seen[0].value() == f"m-{open_topic}".encode()
    assert not [e for e in errors if e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED], errors


class RawMember:
    """A KIP-848 consumer group member speaking spec-built ConsumerGroupHeartbeat v1 frames.

    It subscribes with a regex and, as a member must, reports in every heartbeat the partitions it owns:
    those of the last assignment it was given (what kgate let it see).
    """

    def __init__(self, port: int, group: str, regex: str, client_id: str) -> None:
        self.c = UpstreamClient(lambda: [("127.0.0.1", port)], client_id=client_id)
        self.group, self.regex = group, regex
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    async def join(self, deadline: float) -> None:
        find = fc.FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group])
        while (code := (await self.c.request(10, find, 4))[1].coordinators[0].error_code) in COORDINATOR_NOT_READY:
            # a fresh broker creates __consumer_offsets on the first FindCoordinator: asked again, as clients do
            assert time.monotonic() < deadline, code
            await asyncio.sleep(0.2)
        assert code == 0, code
        while True:
            req = cgh.ConsumerGroupHeartbeatRequest(
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_regex=self.regex,
                topic_partitions=[],
            )
            resp = (await self.c.request(68, req, 1))[1]
            if resp.error_code not in COORDINATOR_NOT_READY:
                break
            assert time.monotonic() < deadline, resp  # the group's partition still loading: asked again
            await asyncio.sleep(0.2)
        self._took(resp)

    async def heartbeat(self) -> None:
        owned = [cgh.TopicPartitions(topic_id=t, partitions=p) for t, p in self.owned.items()]
        req = cgh.ConsumerGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch, topic_partitions=owned
        )
        self._took((await self.c.request(68, req, 1))[1])

    def _took(self, resp: Any) -> None:
        assert resp.error_code == 0, resp
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            self.owned = {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}

    async def leave(self) -> None:
        leave = cgh.ConsumerGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id, member_epoch=-1)
        await self.c.request(68, leave, 1)
        self.c.close()


async def _until(members: list[RawMember], done: Any, deadline: float, what: str) -> None:
    """Heartbeat ``members`` (every 0.2 s, the pace the broker's regex resolution and assignor work at)
    until ``done()``."""
    while not done():
        assert time.monotonic() < deadline, f"{what}: {[m.owned for m in members]}"
        await asyncio.sleep(0.2)
        for m in members:
            await m.heartbeat()


async def _regex_assignment(port: int, group: str, regex: str, client_id: str) -> set[uuid.UUID]:
    """Join ``group`` with a regex subscription and heartbeat until the broker, which resolves regexes in
    the background, assigns something; leave; return the assigned ids."""
    m = RawMember(port, group, regex, client_id)
    try:
        await m.join(time.monotonic() + 30)
        await _until([m], lambda: bool(m.owned), time.monotonic() + 30, "no assignment")
    finally:
        await m.leave()
    return set(m.owned)


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
    filters = AUTHZ if request.param == "authorizer" else [{"name": "topic-policy", "config": {"deny": ["*-hidden"]}}]
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


async def test_a_stripped_partition_is_released_to_another_member_at_once(kafka, k) -> None:
    """The consequence docs/authorization.md describes: member A (through kgate) is assigned hidden
    partitions it never sees, so it never reports owning them; when member B (straight at the broker,
    allowed everything) joins, the broker moves some of them to B without waiting for A's rebalance
    timeout (30 s): KIP-848 waits for a revocation only while the member reports owning the partitions."""
    tag = uuid.uuid4().hex[:8]
    open_topic, hidden = f"rv-{tag}-open", f"rv-{tag}-hidden"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    futures = admin.create_topics([NewTopic(open_topic, 1, 1), NewTopic(hidden, 4, 1)])
    for f in futures.values():
        await asyncio.to_thread(f.result, 30)
    ids = await _topic_ids(kafka.port, open_topic, hidden)
    group, regex = f"rv-g-{tag}", f"rv-{tag}-.*"
    a = RawMember(k.listen_port, group, regex, "reader-raw")
    b = RawMember(kafka.port, group, regex, "other")
    try:
        await a.join(time.monotonic() + 30)
        await _until([a], lambda: bool(a.owned), time.monotonic() + 30, "A got nothing")
        assert a.owned == {ids[open_topic]: [0]}  # the four hidden partitions are A's at the broker, unseen
        await b.join(time.monotonic() + 30)

        # the uniform assignor balances 5 partitions 3/2: B gets at least two, of which at most one is the
        # open topic's, so at least one hidden partition is revoked from A; within 10 s, far below A's
        # 30 s rebalance timeout
        def balanced() -> bool:
            return sum(map(len, b.owned.values())) >= 2 and bool(b.owned.get(ids[hidden]))

        await _until([a, b], balanced, time.monotonic() + 10, "hidden partitions not released to B")
    finally:
        await a.leave()
        await b.leave()
