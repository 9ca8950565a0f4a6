"""Real clients through kgate in front of a real Apache Kafka 4.0.2 broker (issue 12).

What Tansu cannot show: durable storage (a broker restart mid-stream), KIP-848 consumer groups
(``group.protocol=consumer``, ConsumerGroupHeartbeat), transactions with read_committed, the
newest Produce/Fetch versions with ``leader_hints``, and the Java clients. Every workload runs
under a ConnectionWatcher: no client socket may connect to the broker's own port (no bypass).
Kafka's node id is 1; with ``bootstrap_serves_node`` it is served on kgate's bootstrap port.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import kafka_broker
from support import workloads as w
from support.java_clients import run_tool
from support.netconn import ConnectionWatcher

from kgate.codec import api

POLICY = [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}]


def _kgate(kafka, kgate_factory, filters=None, **proxy):
    extra: dict = {"proxy": {"drain_timeout_s": 2, **proxy}}
    if filters:
        extra["filters"] = filters
    return kgate_factory(kafka.bootstrap, bootstrap_serves_node=True, extra=extra)


def _versions_used(k, api_key: int) -> set[int]:
    """api versions clients used for ``api_key``, from kgate's request metric."""
    out = set()
    for labels, v in k.metric_values("kgate_requests_total"):
        if f'api="{api.API_INFO[api_key].name}"' in labels and v > 0:
            out.add(int(labels.split('api_version="')[1].split('"')[0]))
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("policy", [False, True], ids=["passthrough", "topic-policy"])
async def test_three_clients_produce_and_consume(kafka, kgate_factory, policy: bool) -> None:
    k = _kgate(kafka, kgate_factory, POLICY if policy else None)
    topic = w.unique("kc")
    values = w.payloads(200, size=500)
    with ConnectionWatcher({kafka.port}) as watch:
        await asyncio.to_thread(w.confluent_create_topic, k.bootstrap, topic, 3)
        reports = await asyncio.to_thread(
            w.confluent_produce, k.bootstrap, topic, values, **{"enable.idempotence": True, "acks": "all"}
        )
        await asyncio.to_thread(w.kp_produce, k.bootstrap, topic, values[:20])
        await w.aio_produce(k.bootstrap, topic, values[:10], acks="all")
        total = len(values) + 30
        got, _committed = await asyncio.to_thread(w.confluent_consume, k.bootstrap, topic, total, w.unique("g"))
        assert sorted(got) == sorted(values + values[:20] + values[:10])
        assert len(reports) == len(values)
        # Kafka (unlike Tansu) evicts a member whose heartbeats lag its session timeout; on 2 busy
        # cores kafka-python's heartbeat thread can lag 3 s
        got_kp, _ = await asyncio.to_thread(
            w.kp_consume, k.bootstrap, topic, total, w.unique("g"), session_timeout_ms=15000, heartbeat_interval_ms=1000
        )
        got_aio, _ = await w.aio_consume(k.bootstrap, topic, total, w.unique("g"))
        assert len(got_kp) == len(got_aio) == total
    watch.assert_clean(must_use={k.listen_port})


@pytest.mark.timeout(180)
@pytest.mark.parametrize("policy", [False, True], ids=["passthrough", "topic-policy"])
def test_kip848_consumer_group(kafka, kgate_factory, policy: bool) -> None:
    """``group.protocol=consumer``: ConsumerGroupHeartbeat through kgate (by name; assignments by id)."""
    from confluent_kafka import Consumer

    k = _kgate(kafka, kgate_factory, POLICY if policy else None)
    topic = w.unique("kip848")
    values = w.payloads(100)
    w.confluent_create_topic(k.bootstrap, topic, 2)
    w.confluent_produce(k.bootstrap, topic, values)
    c = Consumer(
        {
            "bootstrap.servers": k.bootstrap,
            "group.id": w.unique("g848"),
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    w.assert_exact(values, got)
    assert _versions_used(k, 68), "no ConsumerGroupHeartbeat went through kgate"


@pytest.mark.timeout(180)
def test_transactions_read_committed(kafka, kgate_factory) -> None:
    from confluent_kafka import Consumer, Producer

    k = _kgate(kafka, kgate_factory, POLICY)
    topic = w.unique("tx")
    w.confluent_create_topic(k.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": k.bootstrap, "transactional.id": w.unique("txid")})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"aborted-{i}".encode())
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"committed-{i}".encode())
    p.commit_transaction(30)
    c = Consumer(
        {
            "bootstrap.servers": k.bootstrap,
            "group.id": w.unique("gtx"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        end = time.monotonic() + 1
        while time.monotonic() < end:  # nothing aborted may follow
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got == [f"committed-{i}".encode() for i in range(10)]


@pytest.mark.timeout(180)
def test_leader_hints_use_fetch_v17_and_produce_v12(kafka, kgate_factory) -> None:
    k = _kgate(kafka, kgate_factory, leader_hints=True)
    topic = w.unique("lh")
    values = w.payloads(50)
    with ConnectionWatcher({kafka.port}) as watch:
        w.confluent_create_topic(k.bootstrap, topic, 1)
        w.confluent_produce(k.bootstrap, topic, values)
        got, _ = w.confluent_consume(k.bootstrap, topic, len(values), group=w.unique("glh"))
    w.assert_exact(values, got)
    watch.assert_clean(must_use={k.listen_port})
    fetch, produce = _versions_used(k, 1), _versions_used(k, 0)
    assert max(fetch) >= 16, (fetch, produce)
    assert max(produce) >= 10, (fetch, produce)  # KIP-951 versions, rewritten by kgate


# The Java console producer and consumer through a kgate with topic-policy in its chain:
# tests/e2e/test_uncapped_versions.py's test_java_clients_use_produce_v13_and_fetch_v18 (the same two
# JVMs, watched run by run, with Produce v13 by topic id through the policy), not two JVMs more here


def _high_watermark(bootstrap: str, topic: str) -> int:
    """Partition 0's end offset (ListOffsets): how many records it holds."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": w.unique("hw")})
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        c.close()
    return int(high)


@pytest.fixture(scope="module")
def restartable_kafka(tmp_path_factory):
    """A Kafka 4.3 broker of this module's own, since its tests stop it (not the session's). One for
    both restart tests: a broker's format and first start cost as much as a restart."""
    why = kafka_broker.unavailable()
    if why is not None:
        pytest.skip(why)
    broker = kafka_broker.Kafka(tmp_path_factory.mktemp("restartable-kafka"))
    try:
        yield broker
    finally:
        broker.kill()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_broker_restart_mid_stream_loses_and_duplicates_nothing_acknowledged(
    restartable_kafka, kgate_factory, how
) -> None:
    """An idempotent acks=all producer through kgate while the broker restarts under it: every
    acknowledged message is there once."""
    from confluent_kafka import Producer

    broker = restartable_kafka
    if not broker.alive():  # the first test here, or one before it failed with the broker down
        broker.start()
    k = kgate_factory(broker.bootstrap, bootstrap_serves_node=True, extra={"proxy": {"drain_timeout_s": 2}})
    topic = w.unique("dur")
    w.confluent_create_topic(k.bootstrap, topic, 1)
    acked: list[bytes] = []
    failed = [0]
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:
        with lock:
            if err is None:
                acked.append(msg.value())
            else:
                failed[0] += 1

    p = Producer(
        {
            "bootstrap.servers": k.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": 120000,
            "linger.ms": 5,
        }
    )
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            p.produce(topic, f"m-{i:06d}".encode(), on_delivery=on_delivery)
            p.poll(0)
            i += 1
            time.sleep(0.002)

    def acked_count() -> int:
        with lock:
            return len(acked)

    def wait_acked(count: int) -> None:
        deadline = time.monotonic() + 60
        while acked_count() < count:
            assert time.monotonic() < deadline, (
                f"{acked_count()} of {count} acknowledged within 60 s, {failed[0]} failed"
            )
            time.sleep(0.05)

    t = threading.Thread(target=produce)
    t.start()
    try:
        wait_acked(200)  # mid-stream: acknowledged records before the restart...
        if how == "sigterm":
            broker.stop()
        else:
            broker.kill()
        broker.start()
        wait_acked(acked_count() + 200)  # ...and after it, through the same kgate and producer
    finally:
        stop.set()
        t.join()
    assert p.flush(120) == 0
    # what the topic holds, read by assignment: the restart is under test here, not a group join;
    # its end offset says how many records it holds (acknowledged ones and any whose ack was lost),
    # so the read stops at the last one instead of waiting for stragglers
    end = _high_watermark(k.bootstrap, topic)
    assert end >= len(acked), f"the log holds {end} records, {len(acked)} were acknowledged"
    got = w.confluent_read_topic(k.bootstrap, topic, end, settle=0)
    assert len(got) == end, f"read {len(got)} of the {end} records the log holds"
    assert len(got) == len(set(got)), "duplicates after the restart"
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"


@pytest.mark.timeout(120)
def test_metadata_quorum_tool_sees_no_controller_address(kafka, kgate_factory) -> None:
    """``kafka-metadata-quorum.sh describe --status`` through kgate: the quorum's state, but not the
    controller's ``CONTROLLER://host:port`` (DescribeQuorum v2 listeners are hidden)."""
    k = _kgate(kafka, kgate_factory)

    def describe(bootstrap: str) -> subprocess.CompletedProcess[str]:
        return run_tool(
            kafka.home,
            "kafka-metadata-quorum.sh",
            ["--bootstrap-server", bootstrap, "describe", "--status"],
            timeout=90,
        )

    # the control and the run through kgate side by side: two JVM start-ups in the time of one and a bit
    with ThreadPoolExecutor(2) as pool:
        direct_run, via_run = pool.submit(describe, kafka.bootstrap), pool.submit(describe, k.bootstrap)
        direct, via = direct_run.result(), via_run.result()
    assert f":{kafka.controller_port}" in direct.stdout, direct  # control: the broker does show it
    assert via.returncode == 0, via.stderr[-2000:]
    assert "LeaderId:" in via.stdout
    assert f":{kafka.controller_port}" not in via.stdout
