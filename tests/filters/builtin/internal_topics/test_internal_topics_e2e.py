"""``internal-topics`` end to end: KIP-619's table through kgate, on Tansu and on Apache Kafka 4.0.2.

Real clients (confluent-kafka, kafka-python, aiokafka) and kgate's own plain client for the
by-id versions (Metadata v12 by id, DeleteTopics v6 by id) talk to kgate subprocesses started
with the built-in filter. Apache Kafka refuses the topic config ``internal`` itself
(INVALID_CONFIG, "Unknown topic config name: internal"), so a CreateTopics that succeeds there
shows kgate took it out of the request; the mark lives in ``__kgate_internal_topics`` on the
broker, which a second instance and a restarted one read.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from typing import Any
from uuid import UUID

import pytest
from support.idtools import ZERO, client, create_topic, unique, wait_until

from kgate.api import ApiKey, ErrorCode
from kgate.codec.generated.admin.delete_topics import DeleteTopicsRequest, DeleteTopicState
from kgate.codec.generated.data.describe_producers import DescribeProducersRequest
from kgate.codec.generated.data.describe_producers import TopicRequest as DescribeProducersTopic
from kgate.codec.generated.data.fetch import FetchPartition, FetchRequest, FetchTopic
from kgate.codec.generated.data.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic

FILTERS = {"filters": [{"name": "internal-topics"}]}
MARKS = "__kgate_internal_topics"
OFFSETS = "__consumer_offsets"
INVALID_TOPIC = ErrorCode.INVALID_TOPIC_EXCEPTION
AUTHZ = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _kgate(kgate_factory: Any, broker: Any, name: str = "kgate") -> Any:
    return kgate_factory(broker.bootstrap, name=name, bootstrap_serves_node=True, extra=FILTERS)


_ADMINS: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _drop_admins() -> Any:
    """Admin clients live for one test: the kgates they talk to stop at its end."""
    yield
    _ADMINS.clear()


def _admin(bootstrap: str) -> Any:
    """One confluent-kafka AdminClient per address, kept alive (a dropped one fails its futures)."""
    from confluent_kafka.admin import AdminClient

    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return _ADMINS[bootstrap]


def _ensure_offsets_topic(bootstrap: str, broker: Any) -> None:
    """A ``__consumer_offsets`` topic for the system-defined rows to act on.

    Kafka creates it on the first group coordinator lookup: commit once through kgate. Tansu keeps
    committed offsets outside any topic and has none: the test creates one at the broker.
    """
    from confluent_kafka import Consumer, TopicPartition

    if broker.kind == "tansu":
        if _metadata_by_name(broker.port, OFFSETS).error_code:
            _create(broker.bootstrap, OFFSETS)
        return
    topic = unique("seed")
    create_topic(bootstrap, topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("seed-group"), "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()


def _create(bootstrap: str, name: str, **config: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    fs = admin.create_topics([NewTopic(name, 1, 1, config=config)], operation_timeout=20, request_timeout=20)
    fs[name].result(timeout=30)


def _describe_internal(bootstrap: str, names: list[str]) -> dict[str, bool]:
    """is_internal per topic as confluent-kafka's describe_topics reports it."""
    from confluent_kafka import TopicCollection

    admin = _admin(bootstrap)
    fs = admin.describe_topics(TopicCollection(names), request_timeout=20)
    return {name: f.result(timeout=30).is_internal for name, f in fs.items()}


def _config(bootstrap: str, name: str, key: str = "internal") -> str | None:
    from confluent_kafka.admin import ConfigResource

    admin = _admin(bootstrap)
    fs = admin.describe_configs([ConfigResource("TOPIC", name)], request_timeout=20)
    (f,) = fs.values()
    entry = f.result(timeout=30).get(key)
    return None if entry is None else entry.value


def _produce_errors(bootstrap: str, topic: str, **conf: Any) -> list[Any]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, **conf})
    errors: list[Any] = []
    p.produce(topic, b"value", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    return errors


def _request(port: int, api_key: int, message: Any, version: int | None = None) -> Any:
    async def go() -> Any:
        c = client(port)
        try:
            return (await c.request(api_key, message, version))[1]
        finally:
            c.close()

    return asyncio.run(go())


def _metadata_by_id(port: int, topic_id: UUID) -> Any:
    req = MetadataRequest(topics=[MetadataRequestTopic(name=None, topic_id=topic_id)], allow_auto_topic_creation=False)
    (t,) = _request(port, 3, req, 12).topics
    return t


def _metadata_by_name(port: int, name: str, version: int = 12) -> Any:
    req = MetadataRequest(topics=[MetadataRequestTopic(name=name, topic_id=ZERO)], allow_auto_topic_creation=False)
    (t,) = _request(port, 3, req, version).topics
    return t


# -- KIP-619's rows, both kinds, by name ------------------------------------------------------------
def test_kip_619_rows_by_name(broker: Any, kgate_factory: Any) -> None:
    k = _kgate(kgate_factory, broker)
    _ensure_offsets_topic(k.bootstrap, broker)
    user, plain, altered = unique("connect-offsets"), unique("orders"), unique("streams-changelog")

    # CreateTopics: allowed for both; internal=true is taken out (Kafka would refuse it) and recorded
    _create(k.bootstrap, user, internal="true")
    _create(k.bootstrap, plain)
    _create(k.bootstrap, altered)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = _admin(k.bootstrap)
    res = ConfigResource(
        "TOPIC",
        altered,
        incremental_configs=[ConfigEntry("internal", "true", incremental_operation=AlterConfigOpType.SET)],
    )
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)

    # Metadata / DescribeTopicPartitions: is_internal for both kinds (confluent-kafka describe_topics)
    assert _describe_internal(k.bootstrap, [user, plain, altered, OFFSETS]) == {
        user: True,
        plain: False,
        altered: True,
        OFFSETS: True,
    }
    # kafka-python (Metadata v12) and aiokafka (Metadata v5) see the same flag
    from kafka.admin import KafkaAdminClient

    ka = KafkaAdminClient(bootstrap_servers=k.bootstrap)
    try:
        flags = {t["name"]: t["is_internal"] for t in ka.describe_topics([user, plain, OFFSETS])}
        assert flags == {user: True, plain: False, OFFSETS: True}
        assert MARKS not in ka.list_topics()  # kgate's own topic is never listed
    finally:
        ka.close()
    assert _metadata_by_name(k.listen_port, user, 5).is_internal
    assert not _metadata_by_name(k.listen_port, plain, 5).is_internal
    assert _metadata_by_name(k.listen_port, user, 1).is_internal

    # DescribeConfigs shows the mark on both brokers (Tansu never saw the config: kgate took it out)
    assert (_config(k.bootstrap, user), _config(k.bootstrap, plain), _config(k.bootstrap, altered)) == (
        "true",
        "false",
        "true",
    )
    assert _config(broker.bootstrap, user) is None  # not stored at the broker

    # Produce: refused for system-defined as Kafka refuses appends to internal topics; allowed for user
    (err,) = _produce_errors(k.bootstrap, OFFSETS)
    assert err is not None
    assert err.code() == INVALID_TOPIC
    assert _produce_errors(k.bootstrap, user) == [None]

    # AddPartitionsToTxn: allowed for both (a transactional write to the user-defined one commits)
    if broker.kind == "kafka":
        from confluent_kafka import Producer

        tp = Producer({"bootstrap.servers": k.bootstrap, "transactional.id": unique("txn")})
        tp.init_transactions(30)
        tp.begin_transaction()
        tp.produce(user, b"in a transaction", partition=0)
        tp.commit_transaction(30)

    # DeleteRecords (KIP silent; as Kafka): refused on system-defined, allowed on user-defined
    from confluent_kafka import TopicPartition

    if broker.kind == "kafka":  # Tansu has no DeleteRecords
        (f,) = admin.delete_records([TopicPartition(user, 0, 1)], request_timeout=20).values()
        assert f.result(timeout=30).low_watermark == 1
    (f,) = admin.delete_records([TopicPartition(OFFSETS, 0, 0)], request_timeout=20).values()
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        f.result(timeout=30)
    assert refused.value.args[0].code() == INVALID_TOPIC

    # DeleteTopics: refused for system-defined (per topic, the rest goes on), allowed for user-defined
    fs = admin.delete_topics([OFFSETS, user], operation_timeout=20, request_timeout=20)
    fs[user].result(timeout=30)
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        fs[OFFSETS].result(timeout=30)
    assert refused.value.args[0].code() == INVALID_TOPIC
    assert _metadata_by_name(broker.port, OFFSETS).error_code == 0  # still there


def test_by_id_metadata_and_delete_topics_v6(broker: Any, kgate_factory: Any) -> None:
    k = _kgate(kgate_factory, broker)
    _ensure_offsets_topic(k.bootstrap, broker)
    user = unique("connect-status")
    _create(k.bootstrap, user, internal="true")
    user_id = _metadata_by_name(broker.port, user).topic_id
    offsets_id = _metadata_by_name(broker.port, OFFSETS).topic_id

    t = _metadata_by_id(k.listen_port, user_id)
    assert (t.error_code, t.name, t.is_internal) == (0, user, True)
    assert _metadata_by_id(k.listen_port, offsets_id).is_internal
    if broker.kind == "kafka":  # DescribeTopicPartitions (KIP-966): Kafka 3.8+, not Tansu 0.6
        from kgate.codec.generated.data.describe_topic_partitions import DescribeTopicPartitionsRequest, TopicRequest

        plain = unique("orders")
        _create(k.bootstrap, plain)
        req = DescribeTopicPartitionsRequest(topics=[TopicRequest(name=n) for n in (user, plain, OFFSETS, MARKS)])
        resp = _request(k.listen_port, ApiKey.DESCRIBE_TOPIC_PARTITIONS, req, 0)
        got = {t.name: (t.error_code, t.is_internal) for t in resp.topics}
        assert got == {user: (0, True), plain: (0, False), OFFSETS: (0, True), MARKS: (AUTHZ, False)}

    req = DeleteTopicsRequest(
        topics=[DeleteTopicState(name=None, topic_id=offsets_id), DeleteTopicState(name=None, topic_id=user_id)],
        timeout_ms=20_000,
    )
    resp = _request(k.listen_port, 20, req, 6)
    by_id = {r.topic_id: r for r in resp.responses}
    assert by_id[offsets_id].error_code == INVALID_TOPIC
    assert "system-defined internal topic __consumer_offsets" in by_id[offsets_id].error_message
    assert by_id[user_id].error_code == 0
    wait_until(lambda: _metadata_by_name(broker.port, user).error_code != 0, 20, what="the user topic deleted")


def test_the_marks_topic_is_hidden_from_clients(broker: Any, kgate_factory: Any) -> None:
    k = _kgate(kgate_factory, broker)
    _create(k.bootstrap, unique("warm"), internal="true")  # the marks topic exists and holds a mark
    marks_id = _metadata_by_name(broker.port, MARKS).topic_id

    from confluent_kafka.admin import AdminClient

    assert MARKS not in AdminClient({"bootstrap.servers": k.bootstrap}).list_topics(timeout=20).topics
    t = _metadata_by_name(k.listen_port, MARKS)
    assert (t.error_code, t.topic_id, t.partitions) == (AUTHZ, ZERO, [])
    assert _metadata_by_id(k.listen_port, marks_id).error_code == AUTHZ
    (err,) = _produce_errors(k.bootstrap, MARKS)
    assert err is not None
    assert err.code() == AUTHZ
    for topic, topic_id, version in ((MARKS, ZERO, 12), ("", marks_id, 13)):
        if version == 13 and broker.kind == "tansu":
            continue  # Tansu fetches by id from v13 too; the by-name check covers it
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=10,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            forgotten_topics_data=[],
            rack_id="",
            topics=[
                FetchTopic(
                    topic=topic,
                    topic_id=topic_id,
                    partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
                )
            ],
        )
        resp = _request(k.listen_port, 1, req, version)
        assert [p.error_code for r in resp.responses for p in r.partitions] == [AUTHZ], version
    # its offsets and producers are not for clients either (ListOffsets would reveal it exists)
    offsets = _request(
        k.listen_port,
        ApiKey.LIST_OFFSETS,
        ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsTopic(
                    name=MARKS,
                    partitions=[ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)],
                )
            ],
        ),
        7,
    )
    assert [p.error_code for t in offsets.topics for p in t.partitions] == [AUTHZ]
    producers = _request(
        k.listen_port,
        ApiKey.DESCRIBE_PRODUCERS,
        DescribeProducersRequest(topics=[DescribeProducersTopic(name=MARKS, partition_indexes=[0])]),
        0,
    )
    assert [p.error_code for t in producers.topics for p in t.partitions] == [AUTHZ]
    fs = _admin(k.bootstrap).delete_topics([MARKS], operation_timeout=20)
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        fs[MARKS].result(timeout=30)
    assert refused.value.args[0].code() == AUTHZ
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        _config(k.bootstrap, MARKS, "cleanup.policy")
    assert refused.value.args[0].code() == AUTHZ
    assert _metadata_by_name(broker.port, MARKS).error_code == 0  # untouched at the broker


# -- fleet: a second instance, a restart, a recreated topic ----------------------------------------
def test_marks_reach_a_second_instance_and_survive_a_restart(broker: Any, kgate_factory: Any) -> None:
    a = _kgate(kgate_factory, broker, "a")
    b = _kgate(kgate_factory, broker, "b")
    name = unique("connect-configs")
    _create(a.bootstrap, name)
    assert not _metadata_by_name(b.listen_port, name).is_internal  # b knows the topic, unmarked

    # mark it through a; measure how long b takes to list it as internal
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(
        "TOPIC",
        name,
        incremental_configs=[ConfigEntry("internal", "true", incremental_operation=AlterConfigOpType.SET)],
    )
    for f in _admin(a.bootstrap).incremental_alter_configs([res]).values():
        f.result(timeout=30)
    marked_at = time.monotonic()
    assert _metadata_by_name(a.listen_port, name).is_internal  # the writer honours it at once
    wait_until(lambda: _metadata_by_name(b.listen_port, name).is_internal, 10, interval=0.01, what="b honours the mark")
    took = time.monotonic() - marked_at
    print(f"\nmark propagation to a second instance ({broker.kind}): {took * 1000:.0f} ms")
    assert took < 1.0 + 2.0  # poll_interval_ms (1 s) + a round trip, with room for a loaded machine

    # a restarted instance (nothing cached) answers its first Metadata with the mark
    b.stop_and_check()
    c = _kgate(kgate_factory, broker, "c")
    assert _metadata_by_name(c.listen_port, name).is_internal
    assert _config(c.bootstrap, name) == "true"

    # deleted and created again under the same name: a new id, no mark (on every instance)
    fs = _admin(a.bootstrap).delete_topics([name], operation_timeout=20)
    fs[name].result(timeout=30)
    wait_until(lambda: _metadata_by_name(broker.port, name).error_code != 0, 20, what="the topic deleted")

    def recreate() -> bool:
        try:
            _create(a.bootstrap, name)
            return True
        except Exception:  # Kafka may still be finishing the delete
            return False

    wait_until(recreate, 30, interval=0.5, what="the topic recreated")

    def describable() -> bool:  # Kafka's broker applies a created topic a moment after the controller
        try:
            _config(broker.bootstrap, name)
            return True
        except Exception:  # UNKNOWN_TOPIC_OR_PART, straight from the broker too
            return False

    wait_until(describable, 20, interval=0.2, what="the recreated topic's configs describable at the broker")
    for inst in (a, c):
        assert not _metadata_by_name(inst.listen_port, name).is_internal
        assert _config(inst.bootstrap, name) == "false"


def test_unmarking_with_internal_false_reaches_the_fleet(broker: Any, kgate_factory: Any) -> None:
    a = _kgate(kgate_factory, broker, "a")
    b = _kgate(kgate_factory, broker, "b")
    name = unique("connect-status")
    _create(a.bootstrap, name, internal="true")
    wait_until(lambda: _metadata_by_name(b.listen_port, name).is_internal, 10, interval=0.02, what="b honours the mark")
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:  # kafka-python's alter_configs is AlterConfigs (the whole config is replaced)
        ka.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"internal": "false"})])
    finally:
        ka.close()
    assert not _metadata_by_name(b.listen_port, name).is_internal
    wait_until(
        lambda: not _metadata_by_name(a.listen_port, name).is_internal, 10, interval=0.02, what="a drops the mark"
    )


def test_invalid_internal_values_are_refused_per_topic(broker: Any, kgate_factory: Any) -> None:
    from confluent_kafka.admin import NewTopic

    k = _kgate(kgate_factory, broker)
    bad, good = unique("bad"), unique("good")
    fs = _admin(k.bootstrap).create_topics(
        [NewTopic(bad, 1, 1, config={"internal": "maybe"}), NewTopic(good, 1, 1, config={"internal": "true"})],
        operation_timeout=20,
    )
    fs[good].result(timeout=30)
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        fs[bad].result(timeout=30)
    assert refused.value.args[0].code() == ErrorCode.INVALID_CONFIG
    assert _metadata_by_name(broker.port, bad).error_code != 0  # never reached the broker
    assert _describe_internal(k.bootstrap, [good]) == {good: True}


async def test_aiokafka_producer_to_both_kinds(broker: Any, kgate_factory: Any) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import InvalidTopicError

    k = _kgate(kgate_factory, broker)
    await asyncio.to_thread(_ensure_offsets_topic, k.bootstrap, broker)
    user = unique("connect-offsets")
    await asyncio.to_thread(_create, k.bootstrap, user, internal="true")
    p = AIOKafkaProducer(bootstrap_servers=k.bootstrap, request_timeout_ms=10_000)
    await p.start()
    try:
        meta = await p.send_and_wait(user, b"v", partition=0)
        assert meta.offset >= 0
        with pytest.raises(InvalidTopicError):
            await p.send_and_wait(OFFSETS, b"v", partition=0)
    finally:
        await p.stop()


# -- the user-visible effect: default listings leave internal topics out -----------------------------
def test_default_listings_leave_user_defined_internal_topics_out(broker: Any, kgate_factory: Any) -> None:
    """Kafka's Java AdminClient lists topics without internal ones unless asked (listInternal);
    kafka-topics.sh --exclude-internal is that. confluent-kafka's and kafka-python's list_topics
    return every topic (``__consumer_offsets`` too, with or without kgate): with them an application
    leaves internal topics out by the is_internal flag their describe_topics reports (checked in
    test_kip_619_rows_by_name)."""
    if broker.kind != "kafka":
        pytest.skip(f"kafka-topics.sh ships with Apache Kafka: runs in the [kafka] case only (this is [{broker.kind}])")
    if shutil.which("java") is None:
        pytest.skip("kafka-topics.sh needs java on PATH")
    from support import kafka_broker
    from support.java_clients import run_tool

    k = _kgate(kgate_factory, broker)
    user, plain = unique("connect-offsets"), unique("orders")
    _create(k.bootstrap, user, internal="true")
    _create(k.bootstrap, plain)

    def listing(*extra: str) -> set[str]:
        # the tools' JVM options and class archive: a third of the default JVM's CPU
        out = run_tool(
            kafka_broker.distribution(),
            "kafka-topics.sh",
            ["--bootstrap-server", k.bootstrap, "--list", *extra],
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return set(out.stdout.split())

    default = listing("--exclude-internal")
    assert plain in default
    assert user not in default
    assert MARKS not in default
    everything = listing()
    assert {plain, user} <= everything
    assert MARKS not in everything


def test_a_topic_recreated_behind_kgates_back_does_not_inherit_the_mark(broker: Any, kgate_factory: Any) -> None:
    """The mark is keyed by topic id: deleted and recreated at the broker (kgate sees neither), the
    new topic has a new id and is not internal, by id (Metadata v10+) and then by name too."""
    from support.idtools import delete_topic

    k = _kgate(kgate_factory, broker)
    name = unique("connect-offsets")
    _create(k.bootstrap, name, internal="true")
    assert _metadata_by_name(k.listen_port, name).is_internal
    old_id = _metadata_by_name(broker.port, name).topic_id
    delete_topic(broker.bootstrap, name)
    wait_until(lambda: _metadata_by_name(broker.port, name).error_code != 0, 20, what="the topic deleted")

    def recreate() -> bool:
        try:
            _create(broker.bootstrap, name)
            return True
        except Exception:  # Kafka may still be finishing the delete
            return False

    wait_until(recreate, 30, interval=0.5, what="the topic recreated at the broker")
    wait_until(lambda: _metadata_by_name(broker.port, name).error_code == 0, 20, what="the new topic has a leader")
    t = _metadata_by_name(k.listen_port, name)
    assert t.error_code == 0
    assert t.topic_id != old_id
    assert not t.is_internal
    assert not _metadata_by_name(k.listen_port, name, 5).is_internal  # by name: kgate knows the new id now
    assert _config(k.bootstrap, name) == "false"
