"""The audit log end to end: real clients (confluent-kafka, kafka-python, aiokafka) through a kgate
process with ``audit-log`` on, in front of Tansu; then the JSON lines are read back and compared
with what the clients did and with kgate's own request counters. Also: a topic-policy denial shows
up in ``policy``, and the Kafka sink delivers the same events to a topic on the broker.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support import workloads as w

from kgate.api import ErrorCode
from kgate.codec import api
from kgate.codec.generated.api_keys import FETCH, PRODUCE
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.proxy.carrier.upstream_client import UpstreamClient

TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _events(directory: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    files = sorted(p for p in directory.iterdir() if not p.name.startswith("."))
    assert files, f"no audit file published in {directory}: {sorted(p.name for p in directory.iterdir())}"
    for p in files:
        opener: Any = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as f:
            out += [json.loads(line) for line in f]
    return out


_KEY_OF_NAME = {info.name: key for key, info in api.API_INFO.items()}


def _per_key(k: Any, name: str) -> Counter[int]:
    """A per-api counter of kgate's /metrics by api key (its ``api`` label is Kafka's api name)."""
    counts: Counter[int] = Counter()
    for labels, v in k.metric_values(name):
        api_name = labels.split('api="')[1].split('"')[0]
        if api_name != "unknown":
            counts[_KEY_OF_NAME[api_name]] += int(v)
    return counts


def _records(events: list[dict[str, Any]], api_key: int, topic: str, client_prefix: str = "") -> int:
    return sum(
        t["records"] or 0
        for e in events
        if e["api"]["key"] == api_key and (e["client"]["id"] or "").startswith(client_prefix)
        for t in e["topics"]
        if t["name"] == topic
    )


@pytest.mark.timeout(240)
async def test_three_clients_audited(tansu: Any, kgate_factory: Any, tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    filters = [
        {"name": "topic-policy", "config": {"deny": ["secret-*"]}},
        {"name": "audit-log", "config": {"directory": str(audit), "instance_id": "e2e-a"}},
    ]
    k = kgate_factory(tansu.bootstrap, extra={"filters": filters})
    topic, secret = w.unique("aud"), w.unique("secret-aud")
    values = w.payloads(200, size=300)
    await asyncio.to_thread(w.confluent_create_topic, k.bootstrap, topic, 3)
    await asyncio.to_thread(w.confluent_produce, k.bootstrap, topic, values)
    await asyncio.to_thread(w.kp_produce, k.bootstrap, topic, values[:20])
    await w.aio_produce(k.bootstrap, topic, values[:10])
    got, _ = await asyncio.to_thread(w.confluent_consume, k.bootstrap, topic, 230, w.unique("g"))
    assert len(got) == 230
    got_aio, _ = await w.aio_consume(k.bootstrap, topic, 230, w.unique("g"))
    assert len(got_aio) == 230
    # a Produce to a denied topic, by name: refused by topic-policy, nothing reaches the broker
    c = UpstreamClient(lambda: [("127.0.0.1", k.listen_port)], client_id="denied-client")
    try:
        msg = ProduceRequest(
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                TopicProduceData(name=secret, partition_data=[PartitionProduceData(index=0, records=w_record(b"no"))])
            ],
        )
        _v, resp = await c.request(PRODUCE, msg, 9)
        assert resp.responses[0].partition_responses[0].error_code == TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
    requests = _per_key(k, "kgate_requests_total")
    dropped = sum(v for _l, v in k.metric_values("kgate_audit_events_dropped_total") if "sampled_out" not in _l)
    assert dropped == 0
    assert k.stop_and_check() == 0  # SIGTERM: the writer drains and publishes its last file
    events = _events(audit)

    # one event per request kgate read, api key by api key
    assert Counter(e["api"]["key"] for e in events) == requests
    assert all(e["schema"] == 1 and e["instance"] == "e2e-a" and e["cluster"] == "default" for e in events)
    answered = [e for e in events if e["latency_us"] is not None]
    assert all(e["response_bytes"] > 8 and e["request_bytes"] > 8 and e["error_code"] is not None for e in answered)

    # what each producer wrote, from the Produce requests' record batches
    assert _records(events, PRODUCE, topic, "rdkafka") == 200
    assert _records(events, PRODUCE, topic, "kafka-python") == 20
    assert _records(events, PRODUCE, topic, "aiokafka") == 10
    produced = [t for e in events if e["api"]["key"] == PRODUCE for t in e["topics"] if t["name"] == topic]
    assert sum(t["bytes"] for t in produced) > 230 * 300  # record batches carry the 300-byte values
    assert all(t["error_codes"] == [0] and t["name_status"] == "given" for t in produced)

    # librdkafka fetches by topic id (Fetch v13+): resolved to the name, records counted
    by_id = [
        e
        for e in events
        if e["api"]["key"] == FETCH and e["api"]["version"] >= 13 and (e["client"]["id"] or "").startswith("rdkafka")
    ]
    assert by_id, "librdkafka used no Fetch v13+"
    ours = [t for e in by_id for t in e["topics"] if t["id"] is not None and t["name"] == topic]
    assert ours
    assert all(t["name_status"] == "resolved" for t in ours)
    assert _records(events, FETCH, topic, "rdkafka") >= 230
    # aiokafka fetches by name (Fetch v11)
    assert _records(events, FETCH, topic, "aiokafka") >= 230

    # the denial, with its policy decision
    (denied,) = [e for e in events if e["client"]["id"] == "denied-client" and e["api"]["key"] == PRODUCE]
    assert denied["error_code"] == TOPIC_AUTHORIZATION_FAILED
    assert denied["topics"][0]["name"] == secret
    assert denied["topics"][0]["error_codes"] == [TOPIC_AUTHORIZATION_FAILED]
    (decision,) = denied["policy"]
    assert decision["filter"] == "topic-policy"
    assert decision["resource"] == secret
    assert decision["error_code"] == TOPIC_AUTHORIZATION_FAILED
    assert decision["operation"] == "Produce"
    assert all(e["policy"] is None for e in events if e is not denied)


def w_record(value: bytes) -> bytes:
    from support.wire import record_batch

    return record_batch([value])


@pytest.mark.timeout(180)
async def test_kafka_sink_delivers_events_to_a_topic(tansu: Any, kgate_factory: Any, tmp_path: Path) -> None:
    sink_topic = w.unique("kgate-audit")
    await asyncio.to_thread(w.confluent_create_topic, tansu.bootstrap, sink_topic, 1)
    filters = [
        {
            "name": "audit-log",
            "config": {
                "directory": str(tmp_path / "audit"),
                "instance_id": "e2e-k",
                "kafka": {"bootstrap": tansu.bootstrap, "topic": sink_topic, "linger_ms": 20},
            },
        }
    ]
    k = kgate_factory(tansu.bootstrap, extra={"filters": filters})
    topic = w.unique("audk")
    await asyncio.to_thread(w.confluent_create_topic, k.bootstrap, topic, 1)
    await asyncio.to_thread(w.kp_produce, k.bootstrap, topic, w.payloads(15, size=50))
    assert k.stop_and_check() == 0  # the sink produces what it holds before the process exits
    file_events = _events(tmp_path / "audit")
    lines = await asyncio.to_thread(w.confluent_read_all, tansu.bootstrap, sink_topic, len(file_events))
    sunk = [json.loads(v) for v in lines]
    key = lambda e: (e["client"]["address"], e["correlation_id"], e["api"]["key"])  # noqa: E731
    assert sorted(map(key, sunk)) == sorted(map(key, file_events))
    assert _records(sunk, PRODUCE, topic, "kafka-python") == 15
    assert all(e["instance"] == "e2e-k" for e in sunk)
