"""Wait until a freshly created topic can take writes, for tests that talk raw protocol.

Why: Kafka 4.0 answers CreateTopics once the controller has committed the topic, before the
broker has applied that record. In KRaft the broker publishes the new image to its metadata
cache first and makes itself the partition's leader a moment later, so in that window a raw
Produce gets NOT_LEADER_OR_FOLLOWER (6), and a Metadata request just before it can still
answer UNKNOWN_TOPIC_OR_PARTITION (3). Real clients retry both; a test that sends one raw
request does not. CI caught it once (``test_a_broker_accepts_and_returns_what_kgate_writes``:
``assert 6 == 0``). Listing the topic in Metadata is therefore not enough: we ask every
partition's leader for its end offset (ListOffsets), which only a broker that already leads the
partition answers without error, and nothing is written.
"""

from __future__ import annotations

import time


def wait_writable(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0, **conf: str) -> None:
    """Return once every partition of ``topic`` answers ListOffsets at its leader, or fail
    with the last error after ``timeout`` seconds (``conf``: extra client settings, e.g. SASL)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kgate-tests-wait-writable", "enable.auto.commit": False, **conf}
    )
    deadline = time.monotonic() + timeout
    try:
        pending = list(range(partitions))
        last: object = None
        while pending:
            try:
                consumer.get_watermark_offsets(TopicPartition(topic, pending[0]), timeout=5, cached=False)
                pending.pop(0)
                continue
            except KafkaException as e:
                last = e.args[0] if e.args else e
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic} partition {pending[0]} not led after {timeout:.0f} s: {last}")
            time.sleep(0.1)
    finally:
        consumer.close()
