"""client-id-policy in a real kgate process in front of a real Tansu broker, with librdkafka clients."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import requires_plugin
from kgate.api import ErrorCode
from kgate.testing.processes import RunningKgate

pytestmark = requires_plugin
confluent_kafka = pytest.importorskip("confluent_kafka")
POLICY = {"name": "client-id-policy", "config": {"allow": ["trusted-*"], "topics": ["orders-*"]}}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=20, request_timeout=20
    )[topic].result(timeout=30)
    deadline = time.monotonic() + 20
    while True:
        t = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        assert time.monotonic() < deadline, f"topic {topic} not ready"
        time.sleep(0.2)


def produce(
    bootstrap: str, client_id: str, topic: str, values: list[bytes], one_request: bool = False
) -> tuple[int, list]:
    """Produce and flush; returns (delivered count, delivery errors).

    ``one_request``: every value in one batch of one Produce request (one key, so one partition, and a
    linger longer than the produce loop). A refused topic needs it for an exact count of the records
    kgate refused: after the first refusal librdkafka fails what it still holds without sending it,
    so values spread over two requests (a busy machine stalls the loop past a 5 ms linger) were
    counted 4 of 7 once.
    """
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 500 if one_request else 5,
            "message.timeout.ms": 30000,
            "acks": "all",
        }
    )
    delivered, errors = [], []

    def on_delivery(err: object, msg: object) -> None:
        (errors if err is not None else delivered).append(err or msg)

    for v in values:
        p.produce(topic, value=v, key=b"one-partition" if one_request else None, on_delivery=on_delivery)
    assert p.flush(60) == 0, "messages left undelivered and unreported"
    return len(delivered), errors


def consume_all(bootstrap: str, topic: str, expected: int, partitions: int = 2, settle: float = 1.5) -> list[bytes]:
    """Read ``topic`` from the beginning until ``expected`` messages arrived, then ``settle`` seconds
    more so that any message beyond them is seen too (no consumer group join needed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
            "client.id": "trusted-reader",
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
            if len(got) >= expected:
                deadline = min(deadline, time.monotonic() + settle)
        return got
    finally:
        c.close()


def metric(k: RunningKgate, topic: str, outcome: str) -> float:
    """A sample of the filter's counter from kgate's /metrics (labels in any order)."""
    want = {"cluster": "example", "topic": topic, "outcome": outcome}
    for m in re.finditer(r"^kgate_client_id_policy_records_total\{([^}]*)\} (\S+)$", k.metrics(), re.M):
        if dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))) == want:
            return float(m.group(2))
    return 0.0


def test_allowed_client_writes_refused_client_gets_authorization_errors(kgate_proxy) -> None:
    k = kgate_proxy([POLICY], name="example")
    orders, audit = unique("orders"), unique("audit")  # orders-* is guarded, audit-* is not
    create_topic(k.bootstrap, orders)
    create_topic(k.bootstrap, audit)

    allowed = [f"ok-{i}".encode() for i in range(25)]
    assert produce(k.bootstrap, "trusted-billing", orders, allowed) == (25, [])

    refused = [f"no-{i}".encode() for i in range(7)]
    delivered, errors = produce(k.bootstrap, "intruder", orders, refused, one_request=True)
    assert delivered == 0
    assert len(errors) == 7
    assert {e.code() for e in errors} == {confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    # the same client may write to a topic the policy does not guard
    assert produce(k.bootstrap, "intruder", audit, [b"a1", b"a2", b"a3"]) == (3, [])

    assert sorted(consume_all(k.bootstrap, orders, len(allowed))) == sorted(allowed)  # exactly, nothing refused got in
    assert sorted(consume_all(k.bootstrap, audit, 3)) == [b"a1", b"a2", b"a3"]

    # the filter counted records per topic name, in kgate's own metrics endpoint
    assert metric(k, orders, "written") == 25
    assert metric(k, orders, "refused") == 7  # one request (one_request); librdkafka does not retry the refusal
    assert metric(k, audit, "written") == 3
    # the kit's own config is current: no deprecation warning in a plugin author's log
    assert "deprecated" not in k.log_text()


def check_config(tmp_path: Path, filters: list[dict]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "kgate.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "virtual_clusters": [{"name": "a", "listen": "127.0.0.1:19192", "upstream": "127.0.0.1:9092"}],
                "filters": filters,
            }
        )
    )
    return subprocess.run(
        [sys.executable, "-m", "kgate", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_kgate_check_config_finds_and_validates_the_plugin(tmp_path: Path) -> None:
    """Entry-point discovery and config validation, as `kgate check-config` reports them to a user."""
    ok = check_config(tmp_path, [{"name": "client-id-policy", "config": {"allow": "svc-*"}}])
    assert ok.returncode == 0, ok.stderr
    assert "client-id-policy" in ok.stdout
    bad = check_config(tmp_path, [{"name": "client-id-policy"}])
    assert bad.returncode == 2
    assert "filters[0].config: allow: required key is missing" in bad.stderr
