"""The admin listener: /livez, /readyz (broker down and back, drain on SIGTERM), /metrics, 404, 405.

The broker here is a Tansu of this test's own (stopped and restarted on the same port), not the
module's shared one.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time

import pytest
from support import procs, wire
from support import workloads as w


@pytest.mark.timeout(120)
def test_readyz_follows_the_broker_and_the_drain(tmp_path, kgate_factory) -> None:
    broker = procs.Tansu(tmp_path / "tansu.log").start()
    try:
        k = kgate_factory(broker.bootstrap, admin=True, drain_timeout_s=10)
        body = k.wait_ready(True)
        assert body.startswith("ready\n")
        assert "cluster default: listeners bound" in body
        assert "cluster default: upstream reachable" in body

        assert k.http("/livez") == (200, "ok\n")
        status, text = k.http("/metrics")
        assert status == 200 and "kgate_client_connections" in text
        assert k.http("/nope")[0] == 404
        assert k.http("/readyz", method="POST")[0] == 405
        assert k.http("/metrics?x=1", method="HEAD")[0] == 200

        broker.kill()  # the broker goes away: not ready, and the body says why
        body = k.wait_ready(False)
        assert "cluster default: upstream unreachable" in body, body
        assert k.http("/livez")[0] == 200  # alive all the same

        port = broker.port
        broker = procs.Tansu(tmp_path / "tansu2.log", port=port).start()
        assert k.wait_ready(True).startswith("ready\n")

        # SIGTERM with a long-poll Fetch in flight: not ready for the whole drain, the answer still comes
        topic = w.unique("admin-drain")
        w.confluent_create_topic(k.bootstrap, topic, 1)
        with wire.RawClient(k.listen_port, timeout=15) as c:
            c.send(wire.fetch_request(77, topic, 0, offset=0, max_wait_ms=4000, min_bytes=1 << 20))
            k.wait_ready(True)
            os.kill(k.pid, signal.SIGTERM)
            body = k.wait_ready(False, timeout=3)
            assert "draining" in body, body
            assert k.alive()
            resp = c.recv_frame()
            assert struct.unpack(">i", resp[:4])[0] == 77
        assert k.wait(timeout=15) == 0
    finally:
        broker.kill()


@pytest.mark.timeout(60)
def test_readyz_waits_for_every_node_listener(tmp_path, tansu, kgate_factory) -> None:
    """A node port kgate cannot bind keeps it not ready (clients would be sent to a dead port)."""
    k = procs.Kgate(tmp_path / "k", [tansu.bootstrap], admin=True, bootstrap_serves_node=False)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", k.node_port(procs.TANSU_NODE_ID)))
    blocker.listen(1)
    try:
        k.start()
        body = k.wait_ready(False)
        deadline = time.monotonic() + 20
        while f"node listener(s) not bound for node id(s) [{procs.TANSU_NODE_ID}]" not in body:
            assert time.monotonic() < deadline, body
            time.sleep(0.05)
            body = k.http("/readyz")[1]
        assert "upstream reachable" in body  # the broker is fine: only the port is missing
        blocker.close()  # kgate's bind retry takes the port, and it becomes ready
        assert k.wait_ready(True).startswith("ready\n")
    finally:
        blocker.close()
        assert k.stop_and_check() == 0
