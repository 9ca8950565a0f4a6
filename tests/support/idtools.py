"""Helpers for the topic-id tests: id lookups at the broker, Fetch requests by id, record values.

Requests are built with kgate's codec classes and sent with ``UpstreamClient`` (a plain
pipelining Kafka client) pointed at Tansu or at kgate. Record batches are decoded with
kafka-python's record reader, independent of kgate.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from kgate.api import ErrorCode
from kgate.codec.generated.api_keys import METADATA
from kgate.codec.generated.data.fetch import FetchPartition, FetchRequest, FetchTopic
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.proxy.carrier.upstream_client import UpstreamClient
from support.workloads import confluent_create_topic

ZERO = UUID(int=0)
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def client(port: int, host: str = "127.0.0.1", client_id: str = "idtest") -> UpstreamClient:
    return UpstreamClient(lambda: [(host, port)], client_id=client_id)


async def topic_id(c: UpstreamClient, name: str) -> UUID:
    """The id of ``name`` from a Metadata v12 request by name (the broker's answer, no cache)."""
    req = MetadataRequest(topics=[MetadataRequestTopic(name=name, topic_id=ZERO)], allow_auto_topic_creation=False)
    _v, resp = await c.request(METADATA, req, 12)
    (t,) = resp.topics
    assert t.error_code == 0, (name, t.error_code)
    assert t.topic_id != ZERO
    return t.topic_id


def fetch_request(topics: Iterable[tuple[UUID, Iterable[int]]], offset: int = 0, max_wait_ms: int = 10) -> FetchRequest:
    """A full (sessionless) Fetch naming topics by id only; encode it at v13+."""
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=16 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic="",
                topic_id=tid,
                partitions=[
                    FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=4 << 20) for p in parts
                ],
            )
            for tid, parts in topics
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def values(records: Any) -> list[bytes]:
    """Record values of a Fetch partition's ``records`` (None or a memoryview of batches)."""
    from kafka.record import MemoryRecords

    if records is None or len(records) == 0:
        return []
    mr = MemoryRecords(bytes(records))
    out: list[bytes] = []
    while mr.has_next():
        batch = mr.next_batch()
        if batch is None:
            break
        out.extend(bytes(r.value) for r in batch)
    return out


def fetch_results(resp: Any) -> list[tuple[UUID, int, int, list[bytes]]]:
    """(topic id as answered, partition, error code, values) per partition, in answer order."""
    return [
        (t.topic_id, p.partition_index, p.error_code, values(p.records)) for t in resp.responses for p in t.partitions
    ]


# -- admin via confluent-kafka (AdminClient), against kgate or Tansu ---------------------------
def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    """Created, listed and writable on every partition (support.workloads.confluent_create_topic)."""
    confluent_create_topic(bootstrap, name, partitions)


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.delete_topics([name], operation_timeout=20, request_timeout=20)
    fs[name].result(timeout=30)


def produce(bootstrap: str, topic: str, vals: list[bytes], partition: int = 0) -> None:
    """Produce ``vals`` to one partition, in order, and flush (raises on any delivery error)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    errors: list[Any] = []
    delivered: list[int] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg.offset())

    for v in vals:
        p.produce(topic, value=v, partition=partition, on_delivery=report)
    left = p.flush(30)
    assert left == 0, (left, errors[:3])
    assert not errors, (left, errors[:3])
    assert len(delivered) == len(vals)


def wait_until(pred: Any, timeout: float = 10, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def kgate_config(
    upstream: str, filters: list[dict[str, Any]], topic_names: dict[str, Any] | None = None, **proxy: Any
) -> Any:
    """Like ``support.inproc_kgate.make_config``, plus the ``topic_names`` tuning section; ``proxy``:
    more keys of the ``proxy`` section (e.g. ``leader_hints``)."""
    from kgate.config import parse_config
    from support.ports import free_port, free_port_range

    data: dict[str, Any] = {
        "log_level": "debug",
        "proxy": {"drain_timeout_s": 2, **proxy},
        "virtual_clusters": [
            {
                "name": "default",
                "listen": f"127.0.0.1:{free_port()}",
                "advertised_host": "127.0.0.1",
                "upstream": [upstream],
                "node_ports": {"base": free_port_range(256), "count": 256},
            }
        ],
        "filters": filters,
    }
    if topic_names:
        data["topic_names"] = topic_names
    return parse_config(data, "test")


def lookups_metric(cluster: str = "default") -> float:
    """This process's ``kgate_topic_names_lookups_total`` (in-process kgate; read deltas)."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("kgate_topic_names_lookups_total", {"cluster": cluster}) or 0.0
