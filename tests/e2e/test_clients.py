"""Real clients (librdkafka, kafka-python, aiokafka) against a real broker (Tansu), through kgate.

Every workload runs under a ConnectionWatcher that samples this process's TCP sockets: no client
socket may ever be connected to the broker's port (no bypass), and the clients must have used
kgate's ports. Tansu advertises its real address, so a kgate that forwarded a broker address
unrewritten would make the clients connect straight to Tansu and fail the check.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support import workloads as w
from support.netconn import ConnectionWatcher
from support.procs import TANSU_NODE_ID
from support.wire import RawClient

PARTS = 3


def expected_ports(k) -> set[int]:
    # The bootstrap connection can be too short-lived for the sampler; the node's port carries the work.
    return {k.tansu_node_port}


def test_metadata_advertises_kgate_port(tansu, kgate_mode):
    """Metadata through kgate names Tansu's node 111 at kgate's port for that node: the bootstrap
    port with bootstrap_serves_node, base+111 otherwise; never Tansu's own port."""
    k = kgate_mode
    with RawClient(k.listen_port) as c:
        versions = c.api_versions()
        assert versions["error_code"] == 0
        assert 3 in versions["api_keys"]
        assert 0 in versions["api_keys"]
        md = c.metadata()
    assert [(b["node_id"], b["host"], b["port"]) for b in md["brokers"]] == [
        (TANSU_NODE_ID, "127.0.0.1", k.tansu_node_port)
    ]
    if not k.bootstrap_serves_node:
        # the node listener is open and serves Kafka too
        with RawClient(k.node_port(TANSU_NODE_ID)) as c:
            assert c.metadata()["brokers"][0]["port"] == k.node_port(TANSU_NODE_ID)


@pytest.mark.timeout(120)
def test_confluent_idempotent_producer_and_group_consumer(tansu, kgate_mode):
    k = kgate_mode
    topic, group = w.unique("cf"), w.unique("cfg")
    values = w.payloads(300)
    with ConnectionWatcher({tansu.port}) as watch:
        admin = w.confluent_create_topic(k.bootstrap, topic, PARTS)
        md = admin.list_topics(topic=topic, timeout=10)
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
            TANSU_NODE_ID: ("127.0.0.1", k.tansu_node_port)
        }
        reports = w.confluent_produce(k.bootstrap, topic, values, **{"enable.idempotence": True, "acks": "all"})
        assert len({p for p, _ in reports}) == PARTS, "keys should spread over all partitions"
        got, committed = w.confluent_consume(k.bootstrap, topic, len(values), group=group)
        w.assert_exact(values, got)
        w.assert_committed(committed, reports, PARTS)
        # a second member of the same group resumes from the committed offsets: nothing left
        more = w.payloads(5)
        w.confluent_produce(k.bootstrap, topic, more)
        got2, _ = w.confluent_consume(k.bootstrap, topic, len(more), group=group)
        w.assert_exact(more, got2)
    watch.assert_clean(must_use=expected_ports(k))


@pytest.mark.timeout(120)
def test_confluent_admin_create_describe_delete(tansu, kgate):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    topic = w.unique("cfadm")
    with ConnectionWatcher({tansu.port}) as watch:
        admin = AdminClient({"bootstrap.servers": kgate.bootstrap})
        fs = admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)], operation_timeout=20)
        fs[topic].result(timeout=30)
        md = w.wait_topic_confluent(admin, topic, 4)
        assert sorted(md.topics[topic].partitions) == [0, 1, 2, 3]
        for p in md.topics[topic].partitions.values():
            assert p.leader == TANSU_NODE_ID

        cluster = admin.describe_cluster(request_timeout=20).result(timeout=30)
        assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(TANSU_NODE_ID, "127.0.0.1", kgate.listen_port)]

        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        failure: Exception | None = None
        try:
            configs = admin.describe_configs([res], request_timeout=20)[res].result(timeout=30)
        except Exception as e:  # Tansu may not implement DescribeConfigs: the error must be Kafka's
            failure = e
        if failure is not None:
            assert "Broker" in str(failure) or "KafkaError" in repr(failure), repr(failure)
        else:
            assert isinstance(configs, dict)

        fs = admin.delete_topics([topic], operation_timeout=20)
        fs[topic].result(timeout=30)
        deadline = time.monotonic() + 20
        while topic in admin.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, "topic still listed after delete"
            time.sleep(0.2)
    watch.assert_clean(must_use={kgate.listen_port})


@pytest.mark.timeout(120)
def test_kafka_python_producer_and_group_consumer(tansu, kgate_mode):
    k = kgate_mode
    topic, group = w.unique("kp"), w.unique("kpg")
    values = w.payloads(200)
    with ConnectionWatcher({tansu.port}) as watch:
        w.confluent_create_topic(k.bootstrap, topic, PARTS)
        w.kp_produce(k.bootstrap, topic, values, acks="all")
        got, committed = w.kp_consume(k.bootstrap, topic, len(values), group=group)
        w.assert_exact(values, got)
        w.assert_committed(committed, len(values), PARTS)
        assert all(o > 0 for o in committed.values()), committed
    watch.assert_clean(must_use=expected_ports(k))


@pytest.mark.timeout(120)
def test_kafka_python_admin_create_describe_delete(tansu, kgate):
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = w.unique("kpadm")
    with ConnectionWatcher({tansu.port}) as watch:
        admin = KafkaAdminClient(bootstrap_servers=kgate.bootstrap, request_timeout_ms=20000)
        try:
            admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
            deadline = time.monotonic() + 20
            while True:
                described = admin.describe_topics([topic])
                if described and described[0]["error_code"] == 0 and len(described[0]["partitions"]) == 2:
                    break
                assert time.monotonic() < deadline, described
                time.sleep(0.2)
            assert topic in admin.list_topics()
            cluster = admin.describe_cluster()
            assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
                (TANSU_NODE_ID, "127.0.0.1", kgate.listen_port)
            ]
            admin.delete_topics([topic])
            deadline = time.monotonic() + 20
            while topic in admin.list_topics():
                assert time.monotonic() < deadline, "topic still listed after delete"
                time.sleep(0.2)
        except BaseException:
            admin.close()
            raise
    # closed only after the watcher's last sample, which must see the admin's connection
    admin.close()
    watch.assert_clean(must_use={kgate.listen_port})


@pytest.mark.timeout(120)
async def test_aiokafka_producer_and_group_consumer(tansu, kgate):
    topic, group = w.unique("aio"), w.unique("aiog")
    values = w.payloads(200)
    with ConnectionWatcher({tansu.port}) as watch:
        await asyncio.to_thread(w.confluent_create_topic, kgate.bootstrap, topic, PARTS)
        await w.aio_produce(kgate.bootstrap, topic, values, acks="all")
        got, committed = await w.aio_consume(kgate.bootstrap, topic, len(values), group=group)
        w.assert_exact(values, got)
        w.assert_committed(committed, len(values), PARTS)
    watch.assert_clean(must_use={kgate.listen_port})


@pytest.mark.timeout(120)
async def test_aiokafka_admin_create_delete(tansu, kgate):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = w.unique("aioadm")
    with ConnectionWatcher({tansu.port}) as watch:
        admin = AIOKafkaAdminClient(bootstrap_servers=kgate.bootstrap, request_timeout_ms=20000)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while topic not in await admin.list_topics():
                assert loop.time() < deadline, "created topic never listed"
                await asyncio.sleep(0.2)
            await admin.delete_topics([topic])
            deadline = loop.time() + 20
            while topic in await admin.list_topics():
                assert loop.time() < deadline, "topic still listed after delete"
                await asyncio.sleep(0.2)
        except BaseException:
            await admin.close()
            raise
    await admin.close()  # after the watcher's last sample, which must see the admin's connection
    watch.assert_clean(must_use={kgate.listen_port})
