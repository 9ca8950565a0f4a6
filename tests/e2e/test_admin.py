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
        assert "cluster default: upstream reachable (for " in body
        assert "since its last change of state" in body

        assert k.http("/livez") == (200, "ok\n")
        status, text = k.http("/metrics")
        assert status == 200
        assert "kgate_client_connections" in text
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
        # the broker is fine, only the port is missing; the first probe may still be out when the
        # node-listener line shows ("upstream not probed yet", seen once in a full run)
        while (
            f"node listener(s) not bound for node id(s) [{procs.TANSU_NODE_ID}]" not in body
            or "upstream reachable" not in body
        ):
            assert time.monotonic() < deadline, body
            time.sleep(0.05)
            body = k.http("/readyz")[1]
        assert body.startswith("not ready\n")
        blocker.close()  # kgate's bind retry takes the port, and it becomes ready
        assert k.wait_ready(True).startswith("ready\n")
    finally:
        blocker.close()
        assert k.stop_and_check() == 0


def _sample(k, name: str, **labels: str) -> float:
    """The value of ``name``'s sample whose labels include ``labels`` (0 if there is none)."""
    want = [f'{key}="{value}"' for key, value in labels.items()]
    found = [v for lbl, v in k.metric_values(name) if all(w in lbl for w in want)]
    return sum(found)


@pytest.mark.timeout(180)
def test_metrics_follow_real_clients(tansu, kgate_factory) -> None:
    """librdkafka produces and consumes through kgate with the admin listener on: the broker's time
    per Produce shows in the upstream histogram (no more observations than client-side ones), and
    the topic's record bytes come in and go out under its own name (ids named from the topic-id
    cache: a lookup in the background, ``<unresolved>`` until it answers)."""
    k = kgate_factory(tansu.bootstrap, admin=True)
    k.wait_ready(True)
    topic = w.unique("metrics")
    w.confluent_create_topic(k.bootstrap, topic, 1)
    first, second = w.payloads(100, size=1000), w.payloads(100, size=1000)
    w.confluent_produce(k.bootstrap, topic, first)
    if _sample(k, "kgate_topic_bytes_total", topic="<unresolved>", direction="in"):
        # Produce by topic id (v13+): wait for the name lookup it started, then its name counts
        deadline = time.monotonic() + 20
        while _sample(k, "kgate_topic_names_size", cluster="default") < 1:
            assert time.monotonic() < deadline, "the topic id was never named"
            time.sleep(0.05)
    w.confluent_produce(k.bootstrap, topic, second)
    named_in = _sample(k, "kgate_topic_bytes_total", topic=topic, direction="in")
    unresolved_in = _sample(k, "kgate_topic_bytes_total", topic="<unresolved>", direction="in")
    assert named_in >= sum(map(len, second)), (named_in, unresolved_in)  # record bytes: values and more
    assert named_in + unresolved_in >= sum(map(len, first + second))
    assert _sample(k, "kgate_topic_requests_total", topic=topic, api="Produce") >= 1

    up = _sample(k, "kgate_upstream_request_duration_seconds_count", api="Produce")
    client = _sample(k, "kgate_request_duration_seconds_count", api="Produce")
    assert 2 <= up <= client, (up, client)  # every Produce here was answered by the broker
    up_sum = _sample(k, "kgate_upstream_request_duration_seconds_sum", api="Produce")
    client_sum = _sample(k, "kgate_request_duration_seconds_sum", api="Produce")
    assert 0 < up_sum <= client_sum, (up_sum, client_sum)  # the broker's part of each exchange

    got = w.confluent_read_topic(k.bootstrap, topic, len(first + second))
    assert sorted(got) == sorted(first + second)
    out = _sample(k, "kgate_topic_bytes_total", topic=topic, direction="out")
    out += _sample(k, "kgate_topic_bytes_total", topic="<unresolved>", direction="out")
    assert out >= sum(map(len, first + second))
    assert _sample(k, "kgate_topic_requests_total", topic=topic, api="Fetch") >= 1
    assert _sample(k, "kgate_upstream_request_duration_seconds_count", api="Fetch") >= 1
    assert _sample(k, "kgate_topic_metrics_overflow_total", cluster="default") == 0


@pytest.mark.timeout(120)
def test_cli_takes_the_admin_listeners_base_url(tansu, kgate_factory, capsys) -> None:
    """``kgate healthcheck`` and ``kgate reload`` given only ``http://host:port`` ask /readyz and POST
    /reload there (an operator copies the listener's address, not each command's path), and print
    the answers as lines rather than raw JSON."""
    from kgate.proxy.runtime import cli

    k = kgate_factory(tansu.bootstrap, admin=True)
    k.wait_ready(True)
    base = f"http://127.0.0.1:{k.metrics_port}"
    assert cli.main(["healthcheck", "--url", base, "--timeout", "5"]) == 0
    assert cli.main(["healthcheck", "--url", base + "/", "--timeout", "5"]) == 0
    capsys.readouterr()
    assert cli.main(["reload", "--url", base, "--timeout", "10"]) == 0
    out = capsys.readouterr().out
    assert "result: success" in out, out
    assert "{" not in out.splitlines()[0], out
    # a full URL is still taken as given: a wrong path is a 404, not silently corrected
    assert cli.main(["healthcheck", "--url", base + "/nothing-here", "--timeout", "5"]) == 1


@pytest.mark.timeout(120)
def test_config_shows_what_runs_after_a_reload(tansu, kgate_factory) -> None:
    """``GET /config`` answers the configuration in force: the reloaded chain, not the start-up one
    (redaction is tests/proxy/runtime/test_config_view.py's: Tansu takes no upstream credentials)."""
    import json

    import yaml

    k = kgate_factory(
        tansu.bootstrap, admin=True, extra={"filters": [{"name": "topic-policy", "config": {"deny": ["cfg-secret-*"]}}]}
    )
    k.wait_ready(True)
    status, body = k.http("/config")
    assert status == 200, body
    doc = json.loads(body)
    assert doc["chains"] == {"default": ["topic-policy"]}
    assert doc["config"]["virtual_clusters"][0]["upstream"] == [tansu.bootstrap]

    config = dict(k.config, filters=[])
    k.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert k.http("/reload", method="POST")[0] == 200
    assert json.loads(k.http("/config")[1])["chains"] == {"default": []}
