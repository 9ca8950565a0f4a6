"""The admin listener: /livez, /readyz (broker down and back, drain on SIGTERM), /metrics, 404, 405.

The broker here is a Tansu of this test's own (stopped and restarted on the same port), not the
module's shared one.
"""

from __future__ import annotations

import os
import signal
import struct

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
