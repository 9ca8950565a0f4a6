"""A node port that cannot be bound is retried until it can (issue 7, item 6).

Before: logged once and never retried, so the node stayed unservable while kgate looked healthy.
Here the port of Tansu's node is held by the test before kgate starts; kgate must count the
failures, log the retries at a bounded rate, leave the node out of Metadata meanwhile (never hand
out an address it does not serve), and serve the node once the port is free.
"""

from __future__ import annotations

import socket
import time

import pytest
from support import procs
from support.wire import RawClient


def _sum(kgate: procs.Kgate, name: str) -> float:
    """A metric's total; 0 while the metrics endpoint is not up yet (it starts after the listeners)."""
    try:
        return sum(v for _labels, v in kgate.metric_values(name))
    except OSError:
        return 0


@pytest.mark.timeout(120)
def test_node_listener_bind_is_retried(tansu, tmp_path) -> None:
    k = procs.Kgate(tmp_path / "kgate", [tansu.bootstrap], bootstrap_serves_node=False, log_level="info")
    node_port = k.node_port(procs.TANSU_NODE_ID)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", node_port))
    blocker.listen()
    k.start()
    try:
        deadline = time.monotonic() + 10
        while _sum(k, "kgate_node_listener_bind_failures_total") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sum(k, "kgate_node_listener_bind_failures_total") >= 2, "the bind was not retried"
        with RawClient(k.listen_port) as c:
            for cid in range(20):  # Metadata refreshes must not each retry the bind (or log)
                meta = c.metadata(cid, topics=[], version=1)
        assert meta["brokers"] == [], "kgate handed out a node address it does not serve"
        blocker.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with RawClient(k.listen_port) as c:
                meta = c.metadata(99, topics=[], version=1)
            if meta["brokers"]:
                break
            time.sleep(0.2)
        assert [(b["host"], b["port"]) for b in meta["brokers"]] == [("127.0.0.1", node_port)]
        with RawClient(node_port) as c:  # and the node is really served
            assert c.metadata(100, topics=[], version=1)["brokers"]
        log = k.log_text()
        failures = log.count(f"cannot listen on 127.0.0.1:{node_port} for node {procs.TANSU_NODE_ID}")
        assert 2 <= failures <= 6, f"{failures} bind-failure log lines in a few seconds"
        assert "bound on" in log
        assert "after retrying" in log
    finally:
        blocker.close()
        rc = k.stop_and_check()
    assert rc == 0
    assert "Traceback" not in k.log_text()
