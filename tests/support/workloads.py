"""Client workloads shared by the e2e tests: produce N distinct payloads, consume them back in a
consumer group with commits, and check exactly what arrived."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

from support.topics import wait_writable


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def payloads(n: int, size: int = 0, tag: str = "") -> list[bytes]:
    tag = tag or uuid.uuid4().hex[:8]
    out = []
    for i in range(n):
        head = f"{tag}-{i:06d}-".encode()
        out.append(head + b"x" * max(0, size - len(head)))
    return out


def assert_exact(expected: list[bytes], got: list[bytes]):
    """Same multiset: no loss, no duplicate, no stranger."""
    if Counter(got) == Counter(expected):
        return
    exp, g = Counter(expected), Counter(got)
    missing = exp - g
    extra = g - exp
    raise AssertionError(
        f"expected {len(expected)} messages, got {len(got)}; "
        f"missing {sum(missing.values())} (e.g. {[m[:40] for m in list(missing)[:3]]!r}), "
        f"unexpected/duplicate {sum(extra.values())} (e.g. {[m[:40] for m in list(extra)[:3]]!r})"
    )


# ------------------------------------------------------------------ confluent-kafka
def confluent_create_topic(bootstrap: str, topic: str, partitions: int = 3, **conf):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    fs = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=20, request_timeout=20
    )
    fs[topic].result(timeout=30)
    wait_topic_confluent(admin, topic, partitions)
    wait_writable(bootstrap, topic, partitions, **conf)
    return admin


def wait_topic_confluent(admin, topic: str, partitions: int, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return md
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} not ready: {t and (t.error, t.partitions)!r}")
        time.sleep(0.2)


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], **conf) -> list:
    """Produce and flush; returns delivery reports' (partition, offset); raises on any error."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports.append((msg.partition(), msg.offset()))

    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, value=v, key=str(i).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(60)
    assert left == 0, f"{left} messages not delivered after flush"
    assert not errors, f"delivery errors: {errors[:5]}"
    if conf.get("acks") not in (0, "0"):
        assert len(reports) == len(values)
    return reports


def confluent_consume(
    bootstrap: str,
    topic: str,
    n: int,
    group: str | None = None,
    timeout: float = 60,
    settle: float = 1.0,
    **conf: Any,
) -> tuple[list[bytes | None], dict[int, int]]:
    """Consume ``n`` messages in a group, commit synchronously, read committed offsets back.

    Keeps polling ``settle`` seconds after the n-th message, so extra messages are seen too.
    Returns (values (None for a null value), {partition: committed offset}).
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or unique("g"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
            # Tansu holds JoinGroup for about half the session timeout: keep it short.
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 500,
            **conf,
        }
    )
    got: list[bytes | None] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        settle_until = None
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None:
                if msg.error():
                    raise KafkaException(msg.error())
                got.append(msg.value())
                if len(got) >= n and settle_until is None:
                    settle_until = time.monotonic() + settle
            if settle_until is not None and time.monotonic() >= settle_until:
                break
        assert len(got) >= n, f"consumed {len(got)} of {n} within {timeout}s"
        c.commit(asynchronous=False)
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        committed = c.committed([TopicPartition(topic, p) for p in parts], timeout=20)
        offsets = {tp.partition: tp.offset for tp in committed}
        for tp in committed:
            assert tp.error is None, tp.error
    finally:
        c.close()
    return got, offsets


def _poll_values(c: Any, expect: int, timeout: float, settle: float) -> list[bytes]:
    """Values an assigned consumer reads until ``expect`` are in and ``settle`` more seconds pass
    (so extra records show up), or ``timeout``; an error record raises."""
    from confluent_kafka import KafkaException

    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    settle_until = None
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None:
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
        if len(got) >= expect and settle_until is None:
            settle_until = time.monotonic() + settle
        if settle_until is not None and time.monotonic() >= settle_until:
            break
    return got


def confluent_read_topic(bootstrap: str, topic: str, n: int, timeout: float = 60, settle: float = 1.0) -> list[bytes]:
    """Read every partition of ``topic`` from its start, by assignment (no group: no join, which
    costs seconds on Tansu), until ``n`` messages and ``settle`` seconds more (extras are seen too).

    For tests that check what a topic holds, not how a group consumes it. Fails on a short count."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("ro"),
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    got: list[bytes] = []
    try:
        md = c.list_topics(topic, timeout=min(timeout, 20))
        parts = sorted(md.topics[topic].partitions)
        assert parts, f"{topic}: no partitions in {md.topics[topic]}"
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        got = _poll_values(c, n, timeout, settle)
    finally:
        c.close()
    assert len(got) >= n, f"read {len(got)} of {n} within {timeout}s"
    return got


# ------------------------------------------------------------------ kafka-python
def kp_produce(bootstrap: str, topic: str, values: list[bytes], **conf):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **conf)
    try:
        futures = [p.send(topic, value=v, key=str(i).encode()) for i, v in enumerate(values)]
        p.flush(timeout=60)
        if conf.get("acks") != 0:
            metas = [f.get(timeout=30) for f in futures]
            assert len(metas) == len(values)
    finally:
        p.close(timeout=10)


def kp_consume(
    bootstrap: str, topic: str, n: int, group: str | None = None, timeout: float = 60, settle: float = 1.0, **conf
) -> tuple[list[bytes | None], dict[int, int]]:
    from kafka import KafkaConsumer, TopicPartition

    settings = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500, **conf}  # conf may override
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group or unique("g"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    got: list[bytes | None] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        settle_until = None
        while time.monotonic() < deadline:
            # Until the group hands this member partitions, one poll covers the whole join and sync:
            # kafka-python 3.0.12 loses an assignment whose SyncGroup completes after a poll's timeout
            # expired (the pending join task is only awaited again while need_rejoin(), which is False
            # by then), so the member never fetches nor heartbeats and the group evicts it. Seen with
            # 200 ms polls on a loaded machine; its debug log shows the SyncGroup answer received.
            wait_ms = 200 if c.assignment() else max(200, min(10_000, int((deadline - time.monotonic()) * 1000)))
            for records in c.poll(timeout_ms=wait_ms).values():
                got.extend(r.value for r in records)
            if len(got) >= n and settle_until is None:
                settle_until = time.monotonic() + settle
            if settle_until is not None and time.monotonic() >= settle_until:
                break
        assert len(got) >= n, f"consumed {len(got)} of {n} within {timeout}s"
        c.commit()
        parts = sorted(c.partitions_for_topic(topic))
        offsets = {}
        for p in parts:
            offsets[p] = c.committed(TopicPartition(topic, p))
    finally:
        c.close()
    return got, offsets


# ------------------------------------------------------------------ aiokafka
async def aio_produce(bootstrap: str, topic: str, values: list[bytes], **conf):
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, linger_ms=5, **conf)
    await p.start()
    try:
        futs = [await p.send(topic, value=v, key=str(i).encode()) for i, v in enumerate(values)]
        metas = await asyncio.gather(*futs)
        assert len(metas) == len(values)
    finally:
        await p.stop()


async def aio_consume(
    bootstrap: str, topic: str, n: int, group: str | None = None, timeout: float = 60, settle: float = 1.0, **conf
) -> tuple[list[bytes | None], dict[int, int]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group or unique("g"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=3000,
        heartbeat_interval_ms=500,
        **conf,
    )
    await c.start()
    got: list[bytes | None] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        settle_until = None
        while loop.time() < deadline:
            batches = await c.getmany(timeout_ms=200)
            for records in batches.values():
                got.extend(r.value for r in records)
            if len(got) >= n and settle_until is None:
                settle_until = loop.time() + settle
            if settle_until is not None and loop.time() >= settle_until:
                break
        assert len(got) >= n, f"consumed {len(got)} of {n} within {timeout}s"
        await c.commit()
        parts = sorted(c.partitions_for_topic(topic))
        offsets = {p: await c.committed(TopicPartition(topic, p)) for p in parts}
    finally:
        await c.stop()
    return got, offsets


def assert_committed(offsets: dict[int, int], reports_or_total, partitions: int):
    """Committed offsets cover exactly what was produced: offsets sum to the message count
    (each partition starts at 0), and every partition has an entry."""
    assert sorted(offsets) == list(range(partitions)), offsets
    total = reports_or_total if isinstance(reports_or_total, int) else len(reports_or_total)
    norm = {p: (o if o is not None and o >= 0 else 0) for p, o in offsets.items()}
    assert sum(norm.values()) == total, f"committed offsets {offsets} do not add up to {total}"
    if not isinstance(reports_or_total, int):
        per_part = Counter(p for p, _ in reports_or_total)
        assert norm == {p: per_part.get(p, 0) for p in norm}, (norm, dict(per_part))


def confluent_read_all(
    bootstrap: str, topic: str, expect: int, partitions: int = 1, timeout: float = 10, settle: float = 0.5
) -> list[bytes]:
    """Read a topic from offset 0 without a group (assign, no commits); stops ``settle`` seconds
    after ``expect`` messages, or at ``timeout``. Never raises for a short count."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("ro"),
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = _poll_values(c, expect, timeout, settle)
    finally:
        c.close()
    return got
