"""Address rewriting with several broker nodes.

Tansu is a single node, so tests/support/relay.py poses as a three-node cluster in front of it:
three relay ports R1..R3 (nodes 1, 2, 3), each a byte relay to Tansu, except that Metadata lists
the three nodes at R1..R3 with partition p led by node (p % 3) + 1, FindCoordinator names node 3
and DescribeCluster lists the three nodes. Tansu itself advertises R1, so its own port never
appears anywhere. The relay also refuses (and records) every connection owned by this test
process, so a client that skipped kgate would be caught at accept time.

kgate (bootstrap_serves_node: false, upstream R1..R3) must show the clients three brokers at
127.0.0.1:base+1..3, serve each of those ports, and carry produce/consume for partitions led by
every node.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest
from support import workloads as w
from support.netconn import ConnectionWatcher
from support.ports import free_ports
from support.wire import RawClient

NODES = [1, 2, 3]
PARTS = 6


@pytest.fixture
def cluster(tansu_factory, relay_factory, kgate_factory):
    relay_ports = free_ports(3)
    tansu = tansu_factory(advertised_port=relay_ports[0])
    relay = relay_factory(tansu.port, relay_ports, name="cluster", node_ids=NODES, forbid_pid=os.getpid())
    kgate = kgate_factory([f"127.0.0.1:{p}" for p in relay_ports], bootstrap_serves_node=False)
    return tansu, relay, kgate


def _relay_check(relay, kgate):
    events = relay.events()
    assert not [e for e in events if e["event"] in ("forbidden", "rewrite_error", "upstream_error")], events
    accepts = [e for e in events if e["event"] == "accept"]
    assert {e["pid"] for e in accepts} <= {kgate.pid}, accepts
    return Counter(e["port"] for e in accepts)


def test_metadata_shows_three_nodes_at_kgate_ports(cluster):
    _tansu, relay, kgate = cluster
    expected = [(n, "127.0.0.1", kgate.node_port(n)) for n in NODES]
    topic = w.unique("mn")
    w.confluent_create_topic(kgate.bootstrap, topic, PARTS)
    for port in [kgate.listen_port] + [kgate.node_port(n) for n in NODES]:
        with RawClient(port) as c:
            assert c.api_versions()["error_code"] == 0
            md = c.metadata(topics=[topic])
        assert [(b["node_id"], b["host"], b["port"]) for b in md["brokers"]] == expected, port
        leaders = {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}
        assert leaders == {p: NODES[p % 3] for p in range(PARTS)}
    # the bootstrap port is not a node: no node id is served there, and base+0 is not opened
    seen = _relay_check(relay, kgate)
    assert set(seen) <= set(relay.ports)


@pytest.mark.timeout(180)
def test_clients_across_three_nodes(cluster):
    tansu, relay, kgate = cluster
    node_ports = {n: kgate.node_port(n) for n in NODES}
    topic, group = w.unique("mn"), w.unique("mng")
    values = w.payloads(300)
    with ConnectionWatcher({tansu.port, *relay.ports}) as watch:
        admin = w.confluent_create_topic(kgate.bootstrap, topic, PARTS)
        md = admin.list_topics(topic=topic, timeout=10)
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
            n: ("127.0.0.1", p) for n, p in node_ports.items()
        }
        assert {p.id: p.leader for p in md.topics[topic].partitions.values()} == {p: NODES[p % 3] for p in range(PARTS)}

        reports = w.confluent_produce(kgate.bootstrap, topic, values, **{"enable.idempotence": True})
        assert {p for p, _ in reports} == set(range(PARTS))
        got, committed = w.confluent_consume(kgate.bootstrap, topic, len(values), group=group)
        w.assert_exact(values, got)
        w.assert_committed(committed, reports, PARTS)

        more = w.payloads(120)
        w.kp_produce(kgate.bootstrap, topic, more)
        got, _ = w.kp_consume(kgate.bootstrap, topic, len(values) + len(more))
        w.assert_exact(values + more, got)

        # aiokafka speaks Metadata v5 (kafka-python and librdkafka v12)
        async def aio():
            await w.aio_produce(kgate.bootstrap, topic, rest)
            return await w.aio_consume(kgate.bootstrap, topic, len(values) + len(more) + len(rest))

        rest = w.payloads(60)
        got, _ = asyncio.run(aio())
        w.assert_exact(values + more + rest, got)
    # produce and fetch went to every node's kgate port, never to a relay or to Tansu
    watch.assert_clean(must_use=set(node_ports.values()))
    seen = _relay_check(relay, kgate)
    assert set(seen) == set(relay.ports), f"kgate did not use every node's upstream: {seen}"


def test_each_node_port_reaches_its_own_node(cluster):
    """A connection to kgate's port for node N must be relayed to node N's upstream (relay port),
    not to the bootstrap server: open a fresh connection to each node port and watch which relay
    port kgate connects to."""
    _tansu, relay, kgate = cluster
    with RawClient(kgate.listen_port) as c:  # as a client would: learn the nodes first
        assert len(c.metadata()["brokers"]) == 3
    for n, rport in zip(NODES, relay.ports, strict=True):
        before = _relay_check(relay, kgate)
        with RawClient(kgate.node_port(n)) as c:
            assert c.api_versions()["error_code"] == 0
        after = _relay_check(relay, kgate)
        assert after[rport] > before[rport], f"node {n}: kgate did not connect to relay port {rport}"
