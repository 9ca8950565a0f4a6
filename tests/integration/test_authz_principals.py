"""The authorizer per principal: SASL PLAIN and SCRAM-SHA-256 clients through kgate, and chains per cluster.

The test SASL gate (``support/sasl_gate.py``) stands in for a secured broker in front of Tansu, as in
``test_sasl.py``; clients authenticate through kgate, which learns their principal. The rules give
``alice`` read and write on ``orders-*`` and its groups, ``bob`` only read (and his own groups), and
nobody anything else (default deny). Per mechanism, with confluent-kafka:

* alice produces and consumes back exactly what she wrote;
* bob's writes fail with TOPIC_AUTHORIZATION_FAILED while his reads work;
* neither sees ``audit-*`` in Metadata (no describe);

and, in one kgate process with two virtual clusters in front of the same broker, a cluster's own
``filters:`` replaces the top-level chain: the same write is refused on one and allowed on the other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support import procs
from support.inproc_kgate import InprocKgate
from support.ports import HOST, free_port, free_port_range
from support.sasl_gate import SaslGate
from support.workloads import assert_exact, payloads, unique

from kgate.api import ApiKey
from kgate.codec.generated.admin.create_topics import CreatableTopic, CreateTopicsRequest
from kgate.config import parse_config
from kgate.proxy.carrier.upstream_client import UpstreamClient

pytestmark = pytest.mark.timeout(180)

SVC, SVC_PASSWORD = "kgate-svc", "svc-secret"
USERS = {SVC: SVC_PASSWORD, "alice": "alice-secret", "bob": "bob-secret"}
MECHS = ["PLAIN", "SCRAM-SHA-256"]
RULES = [
    {"allow": ["read", "write"], "topic": {"prefix": "orders-"}, "principal": "alice"},
    {"allow": ["read"], "topic": {"prefix": "orders-"}, "principal": "User:bob"},
    {"allow": ["read"], "group": {"prefix": "g-"}, "principal": ["alice", "bob"]},
    {"allow": ["describe", "idempotent_write"], "cluster": True, "principal": ["alice", "bob"]},
]
AUTHZ = [{"name": "authorizer", "config": {"default": "deny", "rules": RULES}}]


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[tuple[procs.Tansu, SaslGate]]:
    gate_port = free_port()
    tansu = procs.Tansu(tmp_path_factory.mktemp("tansu-authz") / "tansu.log", advertised_port=gate_port)
    tansu.start()
    gate = SaslGate((HOST, tansu.port), USERS, port=gate_port)
    try:
        gate.start()
        yield tansu, gate
    finally:
        gate.stop()
        tansu.kill()


def _cluster(name: str, gate: SaslGate, filters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "listen": f"{HOST}:{free_port()}",
        "advertised_host": HOST,
        "upstream": [gate.address],
        "node_ports": {"base": free_port_range(256), "count": 256},
        "bootstrap_serves_node": False,
        "upstream_auth": {"mechanism": "PLAIN", "username": SVC, "password": SVC_PASSWORD},
    }
    if filters is not None:
        c["filters"] = filters
    return c


@pytest.fixture
def kgate(secured) -> Iterator[InprocKgate]:
    _tansu, gate = secured
    cfg = parse_config(
        {
            "log_level": "debug",
            "proxy": {"drain_timeout_s": 2},
            "virtual_clusters": [_cluster("default", gate)],
            "filters": AUTHZ,
        },
        "test",
    )
    k = InprocKgate(cfg).start()
    yield k
    k.stop()


async def _create(tansu: procs.Tansu, name: str) -> None:
    """Created straight at Tansu (setup): Tansu advertises the gate, so an admin client cannot be used."""
    client = UpstreamClient(lambda: [(HOST, tansu.port)], client_id="authz-setup")
    try:
        req = CreateTopicsRequest(
            topics=[CreatableTopic(name=name, num_partitions=1, replication_factor=1)], timeout_ms=20000
        )
        _v, resp = await client.request(ApiKey.CREATE_TOPICS, req, lo=7)
    finally:
        client.close()
    assert resp.topics[0].error_code == 0, resp.topics[0]


def sasl(mechanism: str, user: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def _produce(bootstrap: str, topic: str, values: list[bytes], conf: dict[str, str]) -> list[Any]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 15000, **conf})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _m: errors.append(err))
    p.flush(30)
    return errors


def _consume(bootstrap: str, topic: str, n: int, conf: dict[str, str]) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            got.append(msg.value())
    finally:
        c.close()
    return got


@pytest.mark.parametrize("mechanism", MECHS)
async def test_rules_per_principal(secured, kgate, mechanism) -> None:
    tansu, _gate = secured
    topic, hidden = unique("orders"), unique("audit")
    await _create(tansu, topic)
    await _create(tansu, hidden)
    values = payloads(10, 50, tag=mechanism)
    alice, bob = sasl(mechanism, "alice"), sasl(mechanism, "bob")

    errors = await asyncio.to_thread(_produce, kgate.bootstrap, topic, values, alice)
    assert [e for e in errors if e is not None] == []
    assert_exact(values, await asyncio.to_thread(_consume, kgate.bootstrap, topic, len(values), alice))

    denied = await asyncio.to_thread(_produce, kgate.bootstrap, topic, [b"bob"], bob)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert_exact(values, await asyncio.to_thread(_consume, kgate.bootstrap, topic, len(values), bob))

    def listing(conf: dict[str, str]) -> set[str]:
        return set(AdminClient({"bootstrap.servers": kgate.bootstrap, **conf}).list_topics(timeout=10).topics)

    for who in (alice, bob):
        seen = await asyncio.to_thread(listing, who)
        assert topic in seen
        assert hidden not in seen

    counts = kgate.call(lambda: dict(kgate.cluster.chain.filters[0].report.counts))
    assert counts[("default", ApiKey.PRODUCE, False)] >= 1
    assert counts[("default", ApiKey.PRODUCE, True)] >= 1


async def test_each_cluster_runs_its_own_chain(secured) -> None:
    """``virtual_clusters[i].filters`` replaces the top-level chain for that cluster only."""
    tansu, gate = secured
    topic = unique("orders")
    await _create(tansu, topic)
    open_cluster = _cluster("open", gate, filters=[])  # its own, empty chain
    guarded = _cluster("guarded", gate)  # the top-level chain
    cfg = parse_config(
        {
            "log_level": "debug",
            "proxy": {"drain_timeout_s": 2},
            "virtual_clusters": [guarded, open_cluster],
            "filters": AUTHZ,
        },
        "test",
    )
    k = InprocKgate(cfg).start()
    try:
        conf = sasl("PLAIN", "bob")  # bob may not write through the guarded cluster
        refused = await asyncio.to_thread(_produce, str(cfg.virtual_clusters[0].listen), topic, [b"x"], conf)
        assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        written = await asyncio.to_thread(_produce, str(cfg.virtual_clusters[1].listen), topic, [b"y"], conf)
        assert written == [None]
        chains = k.call(lambda: [[f.name for f in c.chain.filters] for c in k.proxy.clusters])
        assert chains == [["authorizer"], []]
    finally:
        k.stop()
