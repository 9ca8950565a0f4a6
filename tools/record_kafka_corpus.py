"""Record a frame corpus between real clients and Apache Kafka (tests/data/corpus-kafka, corpus-kafka43).

Usage::

    .venv/bin/python tools/record_kafka_corpus.py [--kafka 4.0.2|4.3.1] [--out DIR]

``--kafka 4.0.2`` (the default) records tests/data/corpus-kafka; ``--kafka 4.3.1`` records
tests/data/corpus-kafka43 from the Java 4.3 clients that use what 4.3 added (see ``java43``).

Starts a Kafka broker (../shared/kafka or ../shared/kafka43) that advertises a recording relay's port
(tests/support/recording_relay.py), so every client connection goes through the relay, then
runs the clients kgate's suite runs against Kafka: confluent-kafka (admin, idempotent and
transactional producers, classic and KIP-848 consumer groups), aiokafka, kafka-python, and
Kafka's own Java tools (console producer/consumer, topics, consumer-groups, log-dirs,
transactions, leader-election, delete-records, metadata-quorum). Payloads are small and frames
over 256 KiB are not kept, so the corpus stays a few hundred KiB. The codec round-trip tests
(tests/codec/test_corpus.py) run over it as over ../shared/corpus-tansu; it is committed so a
clone without ../shared still has it. Re-run it after upgrading the Kafka in ../shared.

The 4.3.1 corpus holds only what 4.3 adds for a proxy, from the Java 4.3 tools: Produce v13 (topics
by id only), Fetch v18, KIP-848 and share-group consumers (ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge, ShareGroupDescribe, DescribeShareGroupOffsets), a transactional producer with
transactions v2 (no AddPartitionsToTxn; EndTxn v5), group configs, and the Streams group admin
tool (StreamsGroupDescribe); frames over 32 KiB are not kept, so it stays small.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support import kafka_broker, workloads  # noqa: E402
from support.ports import free_port  # noqa: E402
from support.recording_relay import RecordingRelay  # noqa: E402

SPEC_DIR = REPO.parent / "shared" / "kafka-message-specs"
DEFAULT_OUT = {"4.0.2": REPO / "tests" / "data" / "corpus-kafka", "4.3.1": REPO / "tests" / "data" / "corpus-kafka43"}
DISTS = {"4.0.2": kafka_broker.KAFKA_40, "4.3.1": kafka_broker.KAFKA_43}
#: frames kept at most, per corpus (larger ones are forwarded, not stored)
MAX_FRAME = {"4.0.2": 256 * 1024, "4.3.1": 32 * 1024}


def java_tool(kafka: kafka_broker.Kafka, bootstrap: str, tool: str, *args: str, stdin: str | None = None) -> str:
    res = subprocess.run(
        [str(kafka.home / "bin" / tool), "--bootstrap-server", bootstrap, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=kafka.env,
        check=False,
    )
    print(f"  {tool} {' '.join(args)} -> {res.returncode}", flush=True)
    return res.stdout


def confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "rec-admin"})
    topics = ["rec-a", "rec-b", "rec-txn", "rec-py"]  # rec-py: no zstd (aiokafka has no zstd codec here)
    for t in topics:
        workloads.confluent_create_topic(bootstrap, t, partitions=2)
    admin.list_topics(timeout=10)
    admin.describe_cluster().result(timeout=10)
    res = ConfigResource(ResourceType.TOPIC, "rec-a")
    admin.describe_configs([res])[res].result(timeout=10)
    inc = ConfigResource(
        ResourceType.TOPIC,
        "rec-a",
        incremental_configs=[ConfigEntry("retention.ms", "600000", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([inc])[inc].result(timeout=10)
    admin.create_partitions([NewPartitions("rec-b", 3)])["rec-b"].result(timeout=10)

    workloads.confluent_produce(
        bootstrap,
        "rec-a",
        workloads.payloads(20, 100, "idem"),
        **{"enable.idempotence": True, "compression.type": "zstd", "client.id": "rec-idem"},
    )
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "rec-tx", "client.id": "rec-tx"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce("rec-txn", f"t{i}".encode())
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rec-txn-group", "enable.auto.commit": False})
    p.send_offsets_to_transaction([TopicPartition("rec-a", 0, 3)], c.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    c.close()

    conf: dict[str, Any] = {"client.id": "rec-classic"}  # a dotted key: no keyword argument
    got, _offsets = workloads.confluent_consume(bootstrap, "rec-a", 20, group="rec-classic", **conf)
    assert len(got) >= 20, len(got)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "rec-848",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "client.id": "rec-848",
        }
    )
    n, deadline = 0, time.monotonic() + 60
    c.subscribe(["rec-a"])
    while n < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        n += m is not None and not m.error()
    c.commit(asynchronous=False)
    c.close()
    assert n >= 20, n
    admin.list_consumer_groups().result(10)
    admin.describe_consumer_groups(["rec-classic", "rec-848"])["rec-classic"].result(timeout=10)
    from confluent_kafka import ConsumerGroupTopicPartitions

    req = ConsumerGroupTopicPartitions("rec-classic")
    admin.list_consumer_group_offsets([req])["rec-classic"].result(timeout=10)
    admin.delete_records([TopicPartition("rec-b", 0, 0)])
    admin.delete_consumer_groups(["rec-txn-group"])["rec-txn-group"].exception(timeout=10)
    admin.delete_topics(["rec-b"])["rec-b"].result(timeout=10)


async def python_clients(bootstrap: str) -> None:
    vals = workloads.payloads(10, 50, "aio")
    await workloads.aio_produce(bootstrap, "rec-py", vals)
    await workloads.aio_consume(bootstrap, "rec-py", 10, group="rec-aio")
    workloads.kp_produce(bootstrap, "rec-py", workloads.payloads(10, 50, "kp"))
    workloads.kp_consume(bootstrap, "rec-py", 10, group="rec-kp", session_timeout_ms=15000)


def java(kafka: kafka_broker.Kafka, bootstrap: str) -> None:
    java_tool(kafka, bootstrap, "kafka-console-producer.sh", "--topic", "rec-a", stdin="j1\nj2\nj3\n")
    java_tool(
        kafka,
        bootstrap,
        "kafka-console-consumer.sh",
        "--topic",
        "rec-a",
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "20000",
        "--group",
        "rec-java",
    )
    java_tool(kafka, bootstrap, "kafka-topics.sh", "--describe", "--topic", "rec-a")
    java_tool(kafka, bootstrap, "kafka-consumer-groups.sh", "--describe", "--all-groups")
    java_tool(kafka, bootstrap, "kafka-log-dirs.sh", "--describe", "--topic-list", "rec-a")
    java_tool(kafka, bootstrap, "kafka-transactions.sh", "list")
    java_tool(kafka, bootstrap, "kafka-transactions.sh", "describe", "--transactional-id", "rec-tx")
    java_tool(kafka, bootstrap, "kafka-transactions.sh", "describe-producers", "--topic", "rec-a", "--partition", "0")
    java_tool(
        kafka,
        bootstrap,
        "kafka-leader-election.sh",
        "--election-type",
        "preferred",
        "--topic",
        "rec-a",
        "--partition",
        "0",
    )
    java_tool(kafka, bootstrap, "kafka-metadata-quorum.sh", "describe", "--status")
    java_tool(
        kafka, bootstrap, "kafka-consumer-groups.sh", "--delete-offsets", "--group", "rec-java", "--topic", "rec-a"
    )


def java43(kafka: kafka_broker.Kafka, bootstrap: str, tmp: Path) -> None:
    """The Java 4.3 clients, each doing what only 4.3 clients do; every run must succeed."""
    from support.java_clients import JavaTools

    tools = JavaTools(kafka_broker.KAFKA_43, bootstrap, workdir=tmp)
    for t in ("rec43-a", "rec43-share", "rec43-txn"):
        workloads.confluent_create_topic(bootstrap, t, partitions=1, **{"client.id": "rec43-admin"})

    def step(what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:  # a line per JVM launch
        print(f"  {what}", flush=True)
        return fn(*args, **kw)

    step(
        "console producer (Produce v13)",
        tools.console_produce,
        "rec43-a",
        [f"p{i}" for i in range(20)],
        "client.id=rec43-producer",
        "linger.ms=5",
        "batch.size=256",
    )
    got = step(
        "KIP-848 console consumer (Fetch v18)",
        tools.console_consume,
        "rec43-a",
        20,
        group="rec43-848",
        props=["group.protocol=consumer", "client.id=rec43-848"],
    )
    assert len(got) == 20, got
    workloads.confluent_produce(
        bootstrap, "rec43-share", workloads.payloads(20, 40, "share"), **{"client.id": "rec43-confluent"}
    )
    step("group config", tools.set_group_config, "rec43-share-group", share_auto_offset_reset="earliest")
    run = step("share consumer", tools.share_consume, "rec43-share", "rec43-share-group", 20, idle_timeout_ms=20000)
    assert len(run.lines()) == 20, run.describe()
    step("share group describe", tools.describe_share_group, "rec43-share-group")
    step(
        "transactional producer (transactions v2)",
        tools.transactional_perf,
        "rec43-txn",
        30,
        "rec43-tx",
        duration_ms=200,
    )
    got = step(
        "read_committed consumer",
        tools.console_consume,
        "rec43-txn",
        30,
        isolation="read_committed",
        props=["client.id=rec43-rc"],
    )
    assert len(got) == 30, got
    step(
        "streams groups",
        tools.run,
        "kafka-streams-groups.sh",
        ["--bootstrap-server", bootstrap, "--describe", "--group", "rec43-streams"],
        check=False,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kafka", choices=sorted(DISTS), default="4.0.2", help="which Kafka to record against")
    ap.add_argument("--out", default=None, help="default: tests/data/corpus-kafka (4.0.2), corpus-kafka43 (4.3.1)")
    args = ap.parse_args(argv)
    dist = DISTS[args.kafka]
    why = kafka_broker.unavailable(dist)
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else DEFAULT_OUT[args.kafka]
    if out.exists():
        shutil.rmtree(out)
    relay_port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        kafka = kafka_broker.Kafka(Path(tmp) / "kafka", advertised_port=relay_port, dist=dist)
        # the relay first: Kafka.start warms the group coordinator up through the advertised port
        relay = RecordingRelay(relay_port, kafka.port, out, SPEC_DIR, max_frame_bytes=MAX_FRAME[args.kafka]).start()
        kafka.start()
        bootstrap = f"127.0.0.1:{relay_port}"
        try:
            if dist is kafka_broker.KAFKA_43:
                print("Java 4.3 tools", flush=True)
                java43(kafka, bootstrap, Path(tmp))
            else:
                print("confluent-kafka", flush=True)
                confluent(bootstrap)
                print("aiokafka, kafka-python", flush=True)
                asyncio.run(python_clients(bootstrap))
                print("Java tools", flush=True)
                java(kafka, bootstrap)
            time.sleep(1)
        finally:
            relay.stop()
            kafka.stop()
    rows = relay.rows
    combos = Counter((r["api_key"], r["api_name"], r["api_version"], r["direction"]) for r in rows)
    with open(out / "README.md", "w", encoding="utf-8") as fh:
        fh.write(
            f"# Kafka protocol frame corpus (captured against Apache Kafka {dist.version})\n\n"
            "Recorded by `tools/record_kafka_corpus.py` through `tests/support/recording_relay.py` "
            "(the broker advertised the relay, so every client connection went through it). Frames are "
            "stored verbatim with their size prefix; `index.jsonl` has one row per frame (the layout of "
            f"`../shared/corpus-tansu`). Frames over {MAX_FRAME[args.kafka] // 1024} KiB were forwarded but "
            f"not kept ({relay.skipped}).\n\n"
            f"{len(rows)} frames, {len({r['api_key'] for r in rows})} api keys, {len(combos)} "
            "(key, version, direction) combinations.\n\n| key | api | version | direction | frames |\n"
            "|---|---|---|---|---|\n"
        )
        for (key, name, version, direction), n in sorted(combos.items()):
            fh.write(f"| {key} | {name} | {version} | {direction} | {n} |\n")
    print(
        json.dumps(
            {"frames": len(rows), "api_keys": sorted({r["api_key"] for r in rows}), "skipped_large": relay.skipped}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
