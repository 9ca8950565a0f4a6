"""kgate's DEFAULT configuration in front of a real broker keeps a well-formed request from killing it.

Measured before the ``guardrails`` filter existed: CreateTopics asking 1,111,556,097 partitions,
then a Metadata, made Tansu abort allocating 106 GB, and the CreateTopics got no answer. Here the
same request is sent with a real client (confluent-kafka's AdminClient) through a kgate whose
config names no filters (so it runs the default chain), to Tansu and to Apache Kafka 4.3.1 (the
``broker`` fixture): kgate answers INVALID_PARTITIONS itself, its message names the limit, the
broker still answers Metadata, and the refusal is counted. A normal workload (create a topic with
configs, produce, consume back) through the same kgate is unaffected.
"""

from __future__ import annotations

import pytest
from support import workloads as w

HUGE = 1_111_556_097


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, topic: str, partitions: int, rf: int = 1, config: dict[str, str] | None = None):
    """The CreateTopics result for ``topic``: None when created, else the KafkaError."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)  # kept: a destroyed client fails its futures
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=rf, config=config or {})],
        operation_timeout=20,
        request_timeout=20,
    )
    try:
        futures[topic].result(timeout=30)
        return None
    except KafkaException as exc:
        return exc.args[0]


def create_unchecked(bootstrap: str, topic: str, partitions: int) -> dict:
    """CreateTopics with kafka-python, which (unlike librdkafka, capped at 100,000) sends any count as asked."""
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        result = client.create_topics(
            {topic: {"num_partitions": partitions, "replication_factor": 1}}, timeout_ms=20_000, raise_errors=False
        )
    finally:
        client.close()
    [entry] = result["topics"]
    return entry


@pytest.mark.timeout(180)
def test_default_config_refuses_the_partition_count_that_killed_the_broker(broker, kgate_factory) -> None:
    from kafka.errors import InvalidPartitionsError

    k = kgate_factory(broker.bootstrap)
    assert "filters" not in k.config  # no filters named: the default chain
    topic = w.unique("gr-huge")
    entry = create_unchecked(k.bootstrap, topic, HUGE)
    assert entry["error_code"] == InvalidPartitionsError.errno, entry
    assert "partitions.max_per_topic" in entry["error_message"], entry
    assert "10000" in entry["error_message"], entry
    # the broker is alive: it answers Metadata, through kgate and directly, and the topic does not exist
    for bootstrap in (k.bootstrap, broker.bootstrap):
        md = admin(bootstrap).list_topics(timeout=15)
        assert md.brokers
        assert topic not in md.topics
    assert k.alive()
    samples = dict(k.metric_values("kgate_guardrail_refusals_total"))
    assert samples.get('{api="CreateTopics",cluster="default",rule="partitions_per_topic"}') == 1.0, samples
    assert "guardrails: refused" in k.log_text()
    assert "rule=partitions_per_topic" in k.log_text()


@pytest.mark.timeout(180)
def test_a_refused_topic_does_not_stop_the_others_of_its_request(broker, kgate_factory) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    k = kgate_factory(broker.bootstrap)
    good, tiny = w.unique("gr-good"), w.unique("gr-tiny-segments")
    client = admin(k.bootstrap)  # kept: a destroyed client fails its futures
    futures = client.create_topics(
        [
            NewTopic(good, num_partitions=2, replication_factor=1),
            NewTopic(tiny, num_partitions=1, replication_factor=1, config={"segment.bytes": "1024"}),
        ],
        operation_timeout=20,
        request_timeout=20,
    )
    futures[good].result(timeout=30)
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        futures[tiny].result(timeout=30)
    err = refused.value.args[0]
    assert err.code() == KafkaError.POLICY_VIOLATION, err.str()
    assert "segment.bytes" in err.str(), err.str()
    md = w.wait_topic_confluent(admin(k.bootstrap), good, 2)
    assert tiny not in md.topics


@pytest.mark.timeout(240)
def test_a_normal_workload_is_unaffected(broker, kgate_factory) -> None:
    k = kgate_factory(broker.bootstrap)
    topic = w.unique("gr-normal")
    assert create(k.bootstrap, topic, 3, config={"retention.ms": "86400000", "segment.bytes": "104857600"}) is None
    w.wait_topic_confluent(admin(k.bootstrap), topic, 3)
    w.wait_writable(k.bootstrap, topic, 3)
    values = w.payloads(300, 200, tag=topic)
    reports = w.confluent_produce(k.bootstrap, topic, values, acks="all")
    assert len(reports) == 300
    got = w.confluent_read_topic(k.bootstrap, topic, 300)
    w.assert_exact(values, got)
    assert not k.metric_values("kgate_guardrail_refusals_total")  # nothing refused


def produce_errors(bootstrap: str, topic: str, values: list[bytes], **conf) -> tuple[int, list]:
    """(messages delivered, delivery errors) of one confluent-kafka producer, retries off."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "retries": 0, "message.timeout.ms": 15000, **conf})
    delivered, errors = [0], []

    def on_delivery(err, _msg) -> None:
        if err is None:
            delivered[0] += 1
        else:
            errors.append(err)

    for v in values:
        p.produce(topic, value=v, on_delivery=on_delivery)
    assert p.flush(30) == 0
    return delivered[0], errors


@pytest.mark.timeout(180)
def test_opt_in_produce_rules_refuse_acks_and_oversized_batches(tansu, kgate_factory) -> None:
    from confluent_kafka import KafkaError

    rules = {"produce": {"acks": ["all"], "max_batch_bytes": 64 * 1024}}
    k = kgate_factory(tansu.bootstrap, extra={"filters": [{"name": "guardrails", "config": rules}]})
    topic = w.unique("gr-produce")
    assert create(k.bootstrap, topic, 1) is None
    w.wait_writable(k.bootstrap, topic, 1)
    assert produce_errors(k.bootstrap, topic, w.payloads(20, 100), acks="all") == (20, [])
    delivered, errors = produce_errors(k.bootstrap, topic, w.payloads(5, 100), acks="1")
    assert delivered == 0, errors
    assert {e.code() for e in errors} == {KafkaError.POLICY_VIOLATION}, errors
    delivered, errors = produce_errors(k.bootstrap, topic, [b"x" * 200_000], acks="all", **{"compression.type": "none"})
    assert delivered == 0, errors
    assert {e.code() for e in errors} == {KafkaError.MSG_SIZE_TOO_LARGE}, errors
    got = w.confluent_read_all(k.bootstrap, topic, 20)
    assert len(got) == 20  # only what was allowed reached the broker
    samples = {labels: v for labels, v in k.metric_values("kgate_guardrail_refusals_total")}
    assert samples['{api="Produce",cluster="default",rule="produce_acks"}'] >= 1
    assert samples['{api="Produce",cluster="default",rule="produce_batch_bytes"}'] >= 1
