"""Kafka 4.3.1 with its own Java clients through kgate (issue 25): what only the Java clients do.

Java 4.3 producers name topics by id only (Produce v13), commit transactions the KIP-890 part 2
way (``transaction.version`` 2: no AddPartitionsToTxn, the broker adds a partition on a
transactional Produce v12+), consume in KIP-848 groups and in share groups (KIP-932, ShareFetch
whose answers carry broker endpoints). Each test runs the tools of the distribution in
../shared (tests/support/java_clients.py) against kgate with its default configuration, counts
records exactly, checks from kgate's ``kgate_requests_total`` that the versions in question went
through kgate, and samples every JVM's sockets: none may reach the broker's own port.

kgate offers every Produce and Fetch version the broker offers (no cap since issue 25; the
KIP-951 leader hints are rewritten as the answers stream through), which Java 4.x producers need:
Produce v12+ for transactions v2, v13 when offered. Before, these tests ran kgate with
``proxy.leader_hints: true``; that setting is a deprecated no-op now, so they run on the default.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from support import java_clients, kafka_broker
from support import workloads as w
from support.java_clients import JavaTools
from support.procs import Kgate

from kgate.api import ApiKey
from kgate.codec import api

DENIED = "secret-*"
POLICY = [{"name": "topic-policy", "config": {"deny": [DENIED]}}]

_why = java_clients.unavailable(kafka_broker.KAFKA_43)
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")


def _kgate(broker, kgate_factory, filters: list | None = None) -> Kgate:
    extra: dict = {"proxy": {"drain_timeout_s": 2}}
    if filters:
        extra["filters"] = filters
    return kgate_factory(broker.bootstrap, bootstrap_serves_node=True, extra=extra)


def _tools(broker, k: Kgate, tmp_path, dist: kafka_broker.Dist = kafka_broker.KAFKA_43) -> JavaTools:
    return JavaTools.through(k, broker.port, tmp_path, dist)


def _versions_used(k: Kgate, key: ApiKey) -> dict[int, float]:
    """version -> requests of ``key`` that went through kgate (its ``kgate_requests_total``)."""
    out: dict[int, float] = {}
    name = api.API_INFO[key].name
    for labels, v in k.metric_values("kgate_requests_total"):
        if f'api="{name}"' in labels and v > 0:
            out[int(labels.split('api_version="')[1].split('"')[0])] = v
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _high_watermark(k: Kgate, topic: str) -> int:
    """Partition 0's end offset, asked through kgate (ListOffsets): how many records it holds."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": w.unique("hw")})
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        c.close()
    return int(high)


def _share_group_starts_at_earliest(k: Kgate, group: str) -> None:
    """``share.auto.offset.reset=earliest`` for ``group`` (a share group starts at the log's end),
    set through kgate with IncrementalAlterConfigs: setup, for which kafka-configs.sh took a JVM."""
    from kgate.codec.generated.admin import incremental_alter_configs as iac
    from kgate.proxy.carrier.upstream_client import UpstreamClient

    change = iac.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest")  # 0: SET
    request = iac.IncrementalAlterConfigsRequest(
        resources=[iac.AlterConfigsResource(resource_type=32, resource_name=group, configs=[change])],  # 32: GROUP
        validate_only=False,
    )

    async def alter() -> iac.IncrementalAlterConfigsResponse:
        c = UpstreamClient(lambda: [("127.0.0.1", k.listen_port)], client_id="share-setup")
        try:
            _v, resp = await c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, request, 1)
        finally:
            c.close()
        return resp

    resp = asyncio.run(alter())
    assert [(r.error_code, r.resource_name) for r in resp.responses] == [(0, group)], resp


#: per broker fixture: its release, and the Produce / Fetch versions its own Java clients send
RELEASES = {"kafka": (kafka_broker.KAFKA_43, 13, 18), "kafka40": (kafka_broker.KAFKA_40, 12, 17)}


def _release(request, which: str) -> tuple:
    broker = request.getfixturevalue(which)
    dist, produce_v, fetch_v = RELEASES[which]
    why = java_clients.unavailable(dist)
    if why is not None:
        pytest.skip(why)
    return broker, dist, produce_v, fetch_v


@pytest.mark.timeout(300)
@pytest.mark.parametrize("which", ["kafka", "kafka40"])
def test_console_producer_newest_produce_then_kip848_consumer(request, kgate_factory, tmp_path, which: str) -> None:
    """(a) the release's Java console producer writes N records through kgate with its newest
    Produce (v13, topics by id only, on 4.3; v12 on 4.0); (b) a KIP-848 console consumer
    (``group.protocol=consumer``) reads exactly those N with its newest Fetch (KIP-951 node
    endpoints, rewritten by kgate)."""
    broker, dist, produce_v, fetch_v = _release(request, which)
    k = _kgate(broker, kgate_factory)
    tools = _tools(broker, k, tmp_path, dist)
    topic = w.unique("jcons")
    lines = [f"rec-{i:04d}" for i in range(200)]
    w.confluent_create_topic(k.bootstrap, topic, 1)
    tools.console_produce(topic, lines, "linger.ms=5", "batch.size=2048")  # a few batches, several Produce
    produce = _versions_used(k, ApiKey.PRODUCE)
    assert produce_v in produce, f"Java {dist.version} sent no Produce v{produce_v} through kgate: {produce}"

    # the consumer stops at the n-th record (no idle wait for an n + 1-th); that the log holds
    # exactly n, nothing written twice, is kgate's ListOffsets answer
    got = tools.console_consume(
        topic, len(lines), group=w.unique("g848"), props=["group.protocol=consumer"], idle_timeout_ms=6000
    )
    assert got == lines, f"{len(got)} of {len(lines)} records; first {got[:3]}"
    assert _high_watermark(k, topic) == len(lines)
    assert _versions_used(k, ApiKey.CONSUMER_GROUP_HEARTBEAT), "no ConsumerGroupHeartbeat went through kgate"
    fetch = _versions_used(k, ApiKey.FETCH)
    assert fetch_v in fetch, f"the Java {dist.version} consumer sent no Fetch v{fetch_v} through kgate: {fetch}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("which", ["kafka", "kafka40"])
async def test_metadata_by_topic_id(request, kgate_factory, which: str) -> None:
    """Metadata v12 looks a topic up by id (KIP-516); through kgate the answer names it and every
    broker address is kgate's."""
    from kgate.codec.generated.data import metadata as md
    from kgate.proxy.carrier.upstream_client import UpstreamClient

    broker = request.getfixturevalue(which)
    k = _kgate(broker, kgate_factory)
    topic = w.unique("byid")
    w.confluent_create_topic(k.bootstrap, topic, 2)
    c = UpstreamClient(lambda: [("127.0.0.1", k.listen_port)], client_id="byid-test")
    try:
        _v, by_name = await c.request(
            ApiKey.METADATA,
            md.MetadataRequest(topics=[md.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False),
            12,
        )
        topic_id = by_name.topics[0].topic_id
        assert topic_id.int, by_name
        _v, by_id = await c.request(
            ApiKey.METADATA,
            md.MetadataRequest(
                topics=[md.MetadataRequestTopic(name=None, topic_id=topic_id)], allow_auto_topic_creation=False
            ),
            12,
        )
    finally:
        c.close()
    assert [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in by_id.topics] == [(0, topic, topic_id, 2)]
    assert {(b.host, b.port) for b in by_id.brokers} == {("127.0.0.1", k.listen_port)}


@pytest.mark.timeout(300)
def test_share_consumer_reads_every_record(kafka, kgate_factory, tmp_path) -> None:
    """(c) a share group (KIP-932): the console share consumer reads exactly the N records, its
    ShareFetch answers' broker endpoints rewritten; kafka-share-groups.sh describes the group."""
    k = _kgate(kafka, kgate_factory)
    tools = _tools(kafka, k, tmp_path)
    topic, group = w.unique("share"), w.unique("gshare")
    values = w.payloads(150, tag="share")
    w.confluent_create_topic(k.bootstrap, topic, 1)
    w.confluent_produce(k.bootstrap, topic, values)
    _share_group_starts_at_earliest(k, group)

    run = tools.share_consume(topic, group, len(values), idle_timeout_ms=30_000)
    w.assert_exact(values, [x.encode() for x in run.lines()])
    for key in (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH):
        assert _versions_used(k, key), f"no {key.name} went through kgate"
    rows = tools.describe_share_group(group)
    assert [(r["TOPIC"], r["PARTITION"]) for r in rows] == [(topic, "0")], rows


@pytest.mark.timeout(300)
@pytest.mark.parametrize("which", ["kafka", "kafka40"])
def test_java_transactional_producer_commits(request, kgate_factory, tmp_path, which: str) -> None:
    """(d) transactions v2 (``transaction.version`` 2, KIP-890 part 2) with the Java producer of the
    broker's own release: a commit every 200 ms; a read_committed consumer sees exactly the N
    committed records, in order. The producer sends no AddPartitionsToTxn: the broker adds
    partitions on transactional Produce v12+, which kgate must therefore offer."""
    broker, dist, _produce_v, _fetch_v = _release(request, which)
    k = _kgate(broker, kgate_factory)
    tools = _tools(broker, k, tmp_path, dist)
    topic, n = w.unique("jtx"), 400
    w.confluent_create_topic(k.bootstrap, topic, 1)
    tools.transactional_perf(topic, n, w.unique("jtxid"), duration_ms=200)
    got = tools.console_consume(topic, n, isolation="read_committed", idle_timeout_ms=6000)
    assert got == [str(i) for i in range(n)], f"{len(got)} committed records seen, expected {n}: {got[:5]}"
    # nothing more committed: librdkafka (read_committed by default) reads the whole log, a second
    # after the n-th record, where the Java consumer stopped at n (an idle wait for n + 1 cost 6 s)
    rest = w.confluent_read_topic(k.bootstrap, topic, n)
    assert rest == [str(i).encode() for i in range(n)], f"{len(rest)} committed records in the log, expected {n}"
    end_txn = _versions_used(k, ApiKey.END_TXN)
    assert end_txn, f"no EndTxn v5+ (transactions v2) through kgate: {end_txn}"
    assert max(end_txn) >= 5, f"no EndTxn v5+ (transactions v2) through kgate: {end_txn}"
    assert not _versions_used(k, ApiKey.ADD_PARTITIONS_TO_TXN), "the Java producer fell back to transactions v1"
    assert max(_versions_used(k, ApiKey.PRODUCE)) >= 12


@pytest.mark.timeout(180)
@pytest.mark.parametrize("which", ["kafka", "kafka40"])
def test_librdkafka_transactions(request, kgate_factory, which: str) -> None:
    """(e) librdkafka (transactions v1: AddPartitionsToTxn) commits and aborts through kgate: a
    read_committed consumer sees exactly the committed records."""
    from confluent_kafka import Consumer, Producer

    broker = request.getfixturevalue(which)
    k = _kgate(broker, kgate_factory)
    topic = w.unique("rdtx")
    w.confluent_create_topic(k.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": k.bootstrap, "transactional.id": w.unique("rdtxid"), "linger.ms": 5})
    p.init_transactions(30)
    for round_ in range(3):
        p.begin_transaction()
        for i in range(50):
            p.produce(topic, f"aborted-{round_}-{i}".encode(), partition=i % 2)
        p.abort_transaction(30)
        p.begin_transaction()
        for i in range(50):
            p.produce(topic, f"committed-{round_}-{i}".encode(), partition=i % 2)
        p.commit_transaction(30)
    expected = [f"committed-{r}-{i}".encode() for r in range(3) for i in range(50)]
    c = Consumer(
        {
            "bootstrap.servers": k.bootstrap,
            "group.id": w.unique("grdtx"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < len(expected) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        end = time.monotonic() + 2
        while time.monotonic() < end:  # nothing aborted, nothing twice, may follow
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    w.assert_exact(expected, got)
    assert _versions_used(k, ApiKey.ADD_PARTITIONS_TO_TXN), "librdkafka sent no AddPartitionsToTxn through kgate"


@pytest.mark.timeout(300)
def test_share_consumer_of_denied_topic_gets_nothing(kafka, kgate_factory, tmp_path) -> None:
    """(f) topic-policy denies the topic: the share consumer's subscription (ShareGroupHeartbeat by
    name) is refused and it reads nothing, though the records are there (a kgate without the policy
    serves them to the same consumer in test_share_consumer_reads_every_record)."""
    open_gate = _kgate(kafka, kgate_factory)
    k = _kgate(kafka, kgate_factory, POLICY)
    tools = _tools(kafka, k, tmp_path)
    topic, group = w.unique("secret"), w.unique("gsecret")
    values = w.payloads(20, tag="secret")
    w.confluent_create_topic(open_gate.bootstrap, topic, 1)
    w.confluent_produce(open_gate.bootstrap, topic, values)
    got = w.confluent_read_topic(open_gate.bootstrap, topic, len(values))
    w.assert_exact(values, got)  # the records are there
    _share_group_starts_at_earliest(k, group)

    cpu_before = _cpu_seconds(k.pid)
    run = tools.share_consume(topic, group, 1, idle_timeout_ms=8000)
    cpu = _cpu_seconds(k.pid) - cpu_before
    assert run.lines() == [], f"the share consumer read a denied topic:\n{run.describe()}"
    heartbeats = sum(_versions_used(k, ApiKey.SHARE_GROUP_HEARTBEAT).values())
    assert heartbeats, "the share consumer never asked kgate to join"
    assert "TOPIC_AUTHORIZATION_FAILED" in run.stderr, f"the refusal never reached the consumer:\n{run.describe()}"
    # A refused member stays JOINING, and the Java client sends a joining member's next heartbeat as soon
    # as the last is answered: answered at once, it sent thousands a second (docs/authorization.md). kgate
    # answers a member refused again after refused_heartbeat_delay_ms (1 s): about one a second.
    print(f"ShareGroupHeartbeat through kgate: {heartbeats:.0f} in {run.seconds:.1f}s; kgate CPU {cpu:.2f}s")
    assert heartbeats < 100, f"the refused share consumer spun: {heartbeats:.0f} heartbeats in {run.seconds:.1f}s"


@pytest.mark.timeout(300)
def test_kip848_consumer_that_keeps_polling_a_denied_topic_is_paced(kafka, kgate_factory, tmp_path) -> None:
    """(f) The same refusal for a KIP-848 consumer application that catches the refusal and polls on
    (kafka-console-consumer.sh exits at the first one): its member stays JOINING and, answered at
    once, heartbeats as fast as it is answered (docs/authorization.md); kgate answers a repeat after 1 s."""
    k = _kgate(kafka, kgate_factory, POLICY)
    tools = _tools(kafka, k, tmp_path)
    topic, group = w.unique("secret"), w.unique("gsecret")
    w.confluent_create_topic(kafka.bootstrap, topic, 1)  # the policy refuses creating it through kgate
    app = Path(__file__).parent / "java_apps" / "RefusedConsumer.java"
    run = tools.run("kafka-run-class.sh", [str(app), k.bootstrap, topic, group, "8000"])
    summary = [line for line in run.lines() if line.startswith("records=")]
    assert summary, f"the consumer application printed no summary:\n{run.describe()}"
    records, refused = (int(part.split("=")[1]) for part in summary[-1].split())
    assert records == 0, f"the consumer read a denied topic:\n{run.describe()}"
    assert refused >= 1, f"the consumer never saw TopicAuthorizationException:\n{run.describe()}"
    heartbeats = sum(_versions_used(k, ApiKey.CONSUMER_GROUP_HEARTBEAT).values())
    print(f"ConsumerGroupHeartbeat through kgate: {heartbeats:.0f} in {run.seconds:.1f}s ({refused} refusals seen)")
    assert 0 < heartbeats < 100, f"the refused KIP-848 consumer spun: {heartbeats:.0f} heartbeats"


@pytest.mark.timeout(120)
def test_socket_watch_catches_a_java_client_that_bypasses_kgate(kafka, tmp_path) -> None:
    """Control experiment: the same watch on a Java client pointed at the broker itself fails the
    run, so the no-bypass checks above can fail.

    A consumer that holds its broker connection for 4 s, not ``kafka-topics.sh --list``: the watch
    samples, and beside a busy core its samples came 0.33 s apart while the list's connection
    lived for less, so the control missed it (a bypass that short is what kgate's accepted-connections
    check is for)."""
    tools = JavaTools(kafka_broker.KAFKA_43, kafka.bootstrap, forbidden_ports={kafka.port}, workdir=tmp_path)
    args = ["--bootstrap-server", kafka.bootstrap, "--topic", w.unique("bypass"), "--timeout-ms", "4000"]
    with pytest.raises(AssertionError, match="connected straight to the broker"):
        tools.run("kafka-console-consumer.sh", args, check=False)


@pytest.mark.timeout(300)
def test_tool_jvms_write_then_map_their_class_archive(tmp_path, monkeypatch) -> None:
    """The tools' class-data archive (support/jvm_cds.py): a tool's first run writes it at its clean
    exit, the next maps it (its classes come from the archive), and one damaged in the cache is
    refused by the JVM and deleted, that run going on without it."""
    from support import jvm_cds
    from support.java_clients import run_tool

    cache = tmp_path / "cds"
    monkeypatch.setattr(jvm_cds, "cache_dir", lambda: cache)
    monkeypatch.delenv(jvm_cds.ENV, raising=False)
    home = kafka_broker.distribution(kafka_broker.KAFKA_43)

    def random_uuid(classes_log: str) -> int:
        """``kafka-storage.sh random-uuid`` (no broker needed); how many classes it took from the archive."""
        log = tmp_path / classes_log
        monkeypatch.setenv("KAFKA_OPTS", f"-Xlog:class+load=info:file={log}")
        run = run_tool(home, "kafka-storage.sh", ["random-uuid"], timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert len(run.stdout.strip()) == 22, run.stdout  # the uuid alone: the JVM's CDS messages go elsewhere
        return sum("source: shared objects file (top)" in line for line in log.read_text().splitlines())

    assert random_uuid("first.log") == 0
    [archive] = cache.glob("*.jsa")
    assert archive.stat().st_size == int(archive.stem.rpartition("-")[2])
    assert sorted(p.suffix for p in cache.iterdir()) == [".jsa"]  # no log nor partial dump left behind
    assert random_uuid("second.log") > 1000  # the tool's own classes, mapped
    assert list(cache.glob("*.jsa")) == [archive]

    # one damaged in the cache (its published size kept) is refused and deleted; the run goes on. A
    # JVM that loads nothing of Kafka's (``java -version`` on the tools' class path) shows it cheaply
    monkeypatch.delenv("KAFKA_OPTS")
    probe = jvm_cds.prepare(home, "kafka-run-class.sh", java_clients.tool_jvm_opts())
    jvm_cds.done(probe, None)  # only its archive's name wanted: nothing ran, nothing is kept
    assert probe.final is not None
    damaged = probe.final.with_name(f"{probe.final.stem}-{archive.stat().st_size}.jsa")
    damaged.write_bytes(os.urandom(archive.stat().st_size))
    run = run_tool(home, "kafka-run-class.sh", ["-version"], timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert not damaged.exists()
    assert archive.exists()  # the tool's own archive untouched
