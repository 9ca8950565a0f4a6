"""kgate never connects to itself (issue 7, blockers 1 and 2).

Blocker 1: a response hook that changed a Metadata answer (topic-policy hiding a denied topic
from a full listing) made kgate rewrite the already-rewritten answer again and learn its own
advertised address as the broker's; the next connection to that node port was forwarded to
kgate itself, which forwarded it again: ~20,000 self-connections in 2.5 s. Reproduced here
exactly as reported: one cluster with ``bootstrap_serves_node: false``, ``secret-*`` denied,
an existing ``secret-pay`` topic, an admin ``list_topics()`` through kgate, then a new
connection to the node port.

Blocker 2: an ``upstream`` that is one of kgate's own listeners is refused by ``check-config``
and ``run`` (exit 2, key path named); one that only resolves to kgate at run time (a name the
config check cannot see through) is refused on the connected socket, without a storm.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from support import procs
from support.ports import free_port, free_port_range
from support.wire import RawClient

POLICY = {"filters": [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}]}


def _metric(kgate: procs.Kgate, name: str) -> float:
    return sum(v for _labels, v in kgate.metric_values(name))


def _scrape(port: int, name: str) -> float:
    """Sum of a metric's samples from a kgate metrics endpoint (a process not started as procs.Kgate)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.mark.timeout(120)
def test_changed_metadata_answer_does_not_teach_kgate_its_own_address(tansu, kgate_factory) -> None:
    tag = uuid.uuid4().hex[:6]
    secret, shown = f"secret-pay-{tag}", f"shown-{tag}"
    direct = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for f in direct.create_topics([NewTopic(n, 1, 1) for n in (secret, shown)]).values():
        f.result(10)

    kgate = kgate_factory(tansu.bootstrap, bootstrap_serves_node=False, extra=POLICY)
    listed = AdminClient({"bootstrap.servers": kgate.bootstrap}).list_topics(timeout=10)
    assert shown in listed.topics
    assert secret not in listed.topics
    [broker] = listed.brokers.values()
    assert (broker.host, broker.port) == ("127.0.0.1", kgate.node_port(procs.TANSU_NODE_ID))

    # librdkafka sends several Metadata requests, and only the full listings are changed by the hook;
    # a last full listing makes sure the answer kgate saw most recently is one the hook changed.
    with RawClient(kgate.listen_port) as c:
        everything = c.metadata(topics=None, version=1)
    assert secret not in [t["name"] for t in everything["topics"]]

    accepted_before = _metric(kgate, "kgate_accepted_connections_total")
    # A new connection to the node port must reach Tansu, not kgate.
    with RawClient(kgate.node_port(procs.TANSU_NODE_ID)) as c:
        meta = c.metadata(topics=[shown], version=1)
    assert [t["name"] for t in meta["topics"]] == [shown]
    assert meta["topics"][0]["error_code"] == 0
    time.sleep(0.5)  # a loop would show as thousands of accepted connections by now
    accepted = _metric(kgate, "kgate_accepted_connections_total") - accepted_before
    assert accepted == 1, f"{accepted} connections accepted for one client connection (a self-connection loop)"
    assert _metric(kgate, "kgate_self_address_refused_total") == 0
    assert _metric(kgate, "kgate_self_connections_refused_total") == 0


def _config(tmp: Path, upstream: str, listen_port: int, base: int) -> Path:
    cfg = {
        "virtual_clusters": [
            {
                "name": "loop",
                "listen": f"127.0.0.1:{listen_port}",
                "upstream": [upstream],
                "node_ports": {"base": base, "count": 16},
            }
        ]
    }
    path = tmp / "kgate.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("which", ["bootstrap", "node-port"])
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_upstream_equal_to_own_listener_is_refused_at_load(tmp_path: Path, which: str, command: str) -> None:
    listen, base = free_port(), free_port_range(16)
    target = f"localhost:{listen}" if which == "bootstrap" else f"127.0.0.1:{base + 3}"
    path = _config(tmp_path, target, listen, base)
    argv = [procs.PYTHON, "-m", "kgate", command, *(["-c"] if command == "run" else []), str(path)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=procs.REPO)
    assert res.returncode == 2, res
    assert "virtual_clusters[0].upstream:" in res.stderr
    assert "kgate would connect to itself" in res.stderr
    assert "own bootstrap listener" in res.stderr if which == "bootstrap" else "own node port range" in res.stderr


def test_wildcard_listener_is_reached_through_any_loopback_address(tmp_path: Path) -> None:
    """A listener on 0.0.0.0 accepts on 127.0.0.3 too: the load-time check knows it."""
    listen, base = free_port(), free_port_range(16)
    cfg = {
        "virtual_clusters": [
            {
                "name": "w",
                "listen": f"0.0.0.0:{listen}",
                "advertised_host": "127.0.0.1",
                "upstream": [f"127.0.0.3:{listen}"],
                "node_ports": {"base": base, "count": 16},
            }
        ]
    }
    path = tmp_path / "wild.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [procs.PYTHON, "-m", "kgate", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=procs.REPO,
    )
    assert res.returncode == 2, res
    assert "kgate would connect to itself" in res.stderr, res


@pytest.mark.timeout(60)
def test_upstream_that_only_resolves_to_kgate_is_refused_on_the_socket(tmp_path: Path) -> None:
    """``[::ffff:127.0.0.1]`` (IPv4-mapped) passes the load-time check, which compares names, yet
    reaches the listener on 127.0.0.1: the connected socket shows the loop. kgate refuses it, the
    client gets a closed connection, and the chain of self-connections ends at once."""
    listen, base, metrics = free_port(), free_port_range(16), free_port()
    cfg = {
        "log_level": "debug",
        "metrics": {"listen": f"127.0.0.1:{metrics}"},
        "proxy": {"drain_timeout_s": 1},
        "virtual_clusters": [
            {
                "name": "loop",
                "listen": f"127.0.0.1:{listen}",
                "upstream": [f"[::ffff:127.0.0.1]:{listen}"],
                "node_ports": {"base": base, "count": 16},
            }
        ],
    }
    path = tmp_path / "mapped.yaml"
    path.write_text(yaml.safe_dump(cfg))
    kgate = procs.ManagedProcess([procs.PYTHON, "-m", "kgate", "run", "-c", str(path)], tmp_path / "kgate.log")
    kgate.cwd = str(procs.REPO)  # type: ignore[attr-defined]
    kgate.start()
    try:
        procs.wait_port(listen, 20, kgate.proc, "kgate")

        def refused_client() -> None:
            with RawClient(listen) as c:
                c.send(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")  # ApiVersions v0
                assert c.closed_by_peer(10), "kgate answered through a loop instead of refusing it"

        refused_client()
        time.sleep(0.3)
        first = _scrape(metrics, "kgate_accepted_connections_total")
        # The first self-connections (the client's, node discovery's) are accepted by kgate once each
        # and their own connects may race the first refusal by a link or two: a handful, not thousands.
        assert first <= 20, f"{first} connections accepted: a self-connection storm"
        refused_client()
        refused_client()
        time.sleep(1.5)  # node discovery retries at 0.5 s and 1 s: refused before connecting too
        later = _scrape(metrics, "kgate_accepted_connections_total")
        # Now the target is known to lead back: each client is refused before any connect is made.
        assert later - first == 2, (first, later)
        assert _scrape(metrics, "kgate_self_connections_refused_total") >= 3
        assert "refusing to connect" in kgate.log_text()
    finally:
        kgate.stop()
    assert "Traceback" not in kgate.log_text()
