"""The strongest no-bypass check: a broker that only kgate is allowed to reach.

Set-up: Tansu listens on port P but advertises port G. At G runs a "gatekeeper" relay
(tests/support/relay.py) that forwards to P, and on every accepted connection looks up, via /proc,
which process owns the peer socket: connections from *this* test process (where the Kafka
clients run) are recorded as forbidden and closed at once. kgate's upstream is G, so kgate
reaches the broker through the gatekeeper like a real client would.

Why this proves no bypass: the only broker address that ever appears in Tansu's responses is G
(P is never advertised). A client learns broker addresses only from responses, so a client can
reach the broker directly only by connecting to G, and every such connection is caught at
accept time (unlike socket sampling, which can miss a short-lived connection). The test also
checks that the trap itself works (a direct connection from the test process is caught), and that
all connections the gatekeeper saw belong to kgate.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from support import workloads as w
from support.netconn import ConnectionWatcher
from support.ports import free_port
from support.wire import RawClient


@pytest.fixture
def gated(tansu_factory, relay_factory):
    g_port = free_port()
    tansu = tansu_factory(advertised_port=g_port)
    relay = relay_factory(tansu.port, [g_port], name="gatekeeper", node_ids=None, forbid_pid=os.getpid())
    return tansu, relay


def _check_gatekeeper(relay, kgate):
    events = relay.events()
    forbidden = [e for e in events if e["event"] == "forbidden"]
    accepts = [e for e in events if e["event"] == "accept"]
    assert not forbidden, f"Kafka clients connected straight to the broker's advertised address: {forbidden}"
    assert accepts, "kgate never went through the gatekeeper?"
    owners = {e["pid"] for e in accepts}
    assert owners == {kgate.pid}, f"gatekeeper connections owned by {owners}, kgate is {kgate.pid}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("serves", [True, False], ids=["bootstrap_serves_node", "node_port"])
async def test_clients_never_reach_broker_directly(gated, kgate_factory, serves):
    tansu, relay = gated
    g_port = relay.ports[0]
    kgate = kgate_factory(f"127.0.0.1:{g_port}", bootstrap_serves_node=serves)
    node_port = kgate.listen_port if serves else kgate.node_port(111)
    topic = w.unique("gate")
    values = w.payloads(60)
    with ConnectionWatcher({tansu.port, g_port}) as watch:
        # confluent: idempotent producer, group consumer, admin
        await asyncio.to_thread(w.confluent_create_topic, kgate.bootstrap, topic, 2)
        reports = await asyncio.to_thread(
            w.confluent_produce, kgate.bootstrap, topic, values, **{"enable.idempotence": True}
        )
        got, committed = await asyncio.to_thread(w.confluent_consume, kgate.bootstrap, topic, len(values))
        w.assert_exact(values, got)
        w.assert_committed(committed, reports, 2)
        # kafka-python
        await asyncio.to_thread(w.kp_produce, kgate.bootstrap, topic, values)
        got, _ = await asyncio.to_thread(w.kp_consume, kgate.bootstrap, topic, 2 * len(values))
        w.assert_exact(values * 2, got)
        # aiokafka
        await w.aio_produce(kgate.bootstrap, topic, values)
        got, _ = await w.aio_consume(kgate.bootstrap, topic, 3 * len(values))
        w.assert_exact(values * 3, got)
    watch.assert_clean(must_use={node_port})
    _check_gatekeeper(relay, kgate)

    # the trap works: this process connecting to G directly is caught and cut off
    with RawClient(g_port) as c:
        assert c.closed_by_peer(timeout=5)
    assert any(e["event"] == "forbidden" for e in relay.events())


def test_gatekeeper_catches_unproxied_clients(gated):
    """Control experiment: without kgate, the same client is caught at once (so the main test can
    fail). Metadata straight from Tansu names G; connecting there is refused and recorded."""
    tansu, relay = gated
    with RawClient(tansu.port) as c:
        md = c.metadata()
    assert [b["port"] for b in md["brokers"]] == [relay.ports[0]]
    with RawClient(relay.ports[0]) as c:
        assert c.closed_by_peer(timeout=5)
    assert [e["event"] for e in relay.events()] == ["accept", "forbidden"]
