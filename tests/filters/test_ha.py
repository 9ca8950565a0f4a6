"""Two kgate instances (an HA fleet) in front of one broker (Tansu, then Apache Kafka): a client gets Metadata from one
instance and fetches by topic id through the other, whose topic-name cache is empty.

Routing (loopback has many addresses): instance B listens on 127.0.0.2 (bootstrap and node
ports) and advertises 127.0.0.2. Instance A listens on 127.0.0.1, advertises 127.0.0.2, has
the SAME node_ports base/count (node N -> the same port number on every instance) and
``bootstrap_serves_node: false``; so A's Metadata sends the client to B's node listener, which
B opened at start-up by node discovery, before any client showed it Metadata. A's own node
listener binds on 127.0.0.1, no clash.

What the test proves, and how it rules out passive learning: B's topic-name cache can learn an
id only (a) passively, from a Metadata v10+ / CreateTopics / DeleteTopics response that passes
through B, or (b) actively, with a Metadata lookup over B's own upstream connection, counted by
``kgate_topic_names_lookups_total``. The topic is created and filled directly at the broker (no kgate
sees it), the consumer is bootstrapped at A only, and B's Metadata request counter
(``kgate_requests_total{api="Metadata"}``) is read right after the first message arrives. If it
is 0, no Metadata passed through B before the first Fetch was served, so the lookups counter
(>= 1) shows that B resolved the ids itself. A librdkafka that did send Metadata through B
first would make this test fail on that precondition (not on kgate), which the message says.
(librdkafka observed: one Metadata through A, none through B, Fetch only through B: v16, whatever
the deprecated ``leader_hints`` says; both values are run, and the version is read from
``kgate_requests_total{api_version}``.)
A ``ConnectionWatcher`` on this process checks that the consumer never connected to the broker.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import urllib.request
from pathlib import Path
from uuid import UUID

import pytest
import yaml
from support import idtools, netconn
from support.idtools import create_topic, produce, unique, wait_until
from support.ports import free_port, free_port_range, port_open
from support.procs import PYTHON, ManagedProcess

from kgate.codec.generated.api_keys import FETCH

B_HOST = "127.0.0.2"


class KgateProc(ManagedProcess):
    """``python -m kgate run -c FILE`` with a config written here (listen host is free to choose)."""

    name = "kgate"

    def __init__(self, workdir: Path, config: dict, listen: tuple[str, int], metrics_port: int) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.listen = listen
        self.metrics_port = metrics_port
        self.config_path = workdir / "kgate.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        super().__init__(
            [PYTHON, "-m", "kgate", "run", "-c", str(self.config_path)],
            workdir / "kgate.log",
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def start(self, timeout: float = 20) -> KgateProc:
        super().start()
        deadline = time.monotonic() + timeout
        while not port_open(self.listen[1], self.listen[0]):
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kgate did not listen on {self.listen}: {self.log_text()}")
            time.sleep(0.02)
        return self

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 if none)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)", line)
            if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
                total += float(m.group(2))
        return total


def _config(
    listen: str, advertised: str, upstream: str, base: int, metrics_port: int, filters: list, leader_hints: bool
) -> dict:
    return {
        "log_level": "debug",
        "proxy": {"drain_timeout_s": 2, "leader_hints": leader_hints},
        "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
        "virtual_clusters": [
            {
                "name": "default",
                "listen": listen,
                "advertised_host": advertised,
                "upstream": [upstream],
                "node_ports": {"base": base, "count": 256, "first_node_id": 0},
                "bootstrap_serves_node": False,
            }
        ],
        "filters": filters,
    }


@pytest.fixture(params=[False, True], ids=["leader-hints-false", "leader-hints-true"])
def fleet(request, broker, tmp_path):
    """A and B; ``leader_hints`` false or true (deprecated, no effect: Fetch v16+ either way)."""
    hints = request.param
    base = free_port_range(256)
    pa, pb = free_port(), free_port()
    policy = [{"name": "topic-policy", "config": {"allow": ["ha-*"], "deny": ["ha-secret-*"]}}]
    b_metrics = free_port()
    b = KgateProc(
        tmp_path / "b",
        _config(f"{B_HOST}:{pb}", B_HOST, broker.bootstrap, base, b_metrics, policy, hints),
        (B_HOST, pb),
        b_metrics,
    )
    a_metrics = free_port()
    a = KgateProc(
        tmp_path / "a",
        _config(f"127.0.0.1:{pa}", B_HOST, broker.bootstrap, base, a_metrics, [], hints),
        ("127.0.0.1", pa),
        a_metrics,
    )
    procs = [b.start(), a.start()]
    try:
        wait_until(lambda: "discovered nodes" in b.log_text(), 15, what="B's node discovery")
        wait_until(lambda: "discovered nodes" in a.log_text(), 15, what="A's node discovery")
        node_port = base + broker.node_id
        assert port_open(node_port, B_HOST), "B did not open node 111's listener at start-up"
        yield a, b, node_port, hints
    finally:
        rep = getattr(request.node, "rep_call", None)
        rcs = [p.stop(timeout=12) for p in procs]
        if rep is None or rep.failed or rcs != [0, 0]:
            for p in procs:
                print(f"\n===== {p.log_path} =====\n{p.log_text(tail=20_000)}")
        assert rcs == [0, 0], f"kgate exit codes on SIGTERM: {rcs}"


def _consume(
    bootstrap: str, assignments: list[tuple[str, int]], n: int, timeout: float = 30, on_first: object = None
) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("ha-g"),
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 600_000,
            "fetch.queue.backoff.ms": 10,
        }
    )
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(t, p, 0) for t, p in assignments])
        deadline = time.monotonic() + timeout
        settle = None
        while time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None:
                if msg.error():
                    raise KafkaException(msg.error())
                if not got and callable(on_first):
                    on_first()
                got.append(msg.value())
                if len(got) >= n and settle is None:
                    settle = time.monotonic() + 1.0  # extra messages would show up too
            if settle is not None and time.monotonic() >= settle:
                break
    finally:
        c.close()
    return got


def _sockets_to(port: int) -> set[tuple]:
    """(local, remote) of this process's open sockets to ``port``."""
    return {
        (c.local, c.remote)
        for c in netconn.tcp_connections()
        if c.remote[1] == port and c.state in ("ESTABLISHED", "SYN_SENT")
    }


@pytest.mark.timeout(90)
def test_fetch_through_an_instance_that_never_saw_the_metadata(broker, fleet) -> None:
    a, b, node_port, _hints = fleet
    # another test's client in this process may still hold a socket to the shared broker: not ours
    before = _sockets_to(broker.port)
    topic = unique("ha-t")
    vals = {p: [f"{topic}-{p}-{i}".encode() for i in range(40)] for p in (0, 1)}
    create_topic(broker.bootstrap, topic, partitions=2)
    for p, vs in vals.items():
        produce(broker.bootstrap, topic, vs, partition=p)
    # the direct clients above are gone before the consumer starts (the watcher checks this process)
    wait_until(lambda: not (_sockets_to(broker.port) - before), 10, what="direct broker sockets to close")
    assert b.metric("kgate_topic_names_lookups_total") == 0

    with netconn.ConnectionWatcher(forbidden_ports={broker.port}, ignore=before) as watch:
        got = _consume(f"127.0.0.1:{a.listen[1]}", [(topic, 0), (topic, 1)], 80)
    # the bootstrap connection to A can be too short-lived for the sampler; A's counters show it
    watch.assert_clean(must_use={node_port})
    assert a.metric("kgate_requests_total", api="Metadata") >= 1  # the consumer's Metadata came from A

    expected = vals[0] + vals[1]
    assert sorted(got) == sorted(expected), f"got {len(got)} of {len(expected)}"
    assert [v for v in got if v.startswith(f"{topic}-0-".encode())] == vals[0]  # per-partition order
    assert [v for v in got if v.startswith(f"{topic}-1-".encode())] == vals[1]
    assert b.metric("kgate_requests_total", api="Fetch") >= 1  # Fetch went through B
    # The proof that B names an id it never met by a lookup of its own, made deterministic:
    # librdkafka may send B a Metadata refresh before its first Fetch (it did in CI beside a
    # burner), teaching B the name, so the consumer above cannot prove it. A Fetch by id (v13+)
    # for a topic no request through B ever named must make B look it up, and answer the records.
    other = unique("ha-u")
    create_topic(broker.bootstrap, other, partitions=1)
    produce(broker.bootstrap, other, [b"only-by-id"], partition=0)
    before_lookups = b.metric("kgate_topic_names_lookups_total")

    async def fetch_by_id_through_b() -> list[tuple[UUID, int, int, list[bytes]]]:
        direct = idtools.client(broker.port)
        through_b = idtools.client(node_port, host=B_HOST)
        try:
            tid = await idtools.topic_id(direct, other)
            _v, resp = await through_b.request(FETCH, idtools.fetch_request([(tid, [0])]), lo=13)
            return [(tid, *row[1:]) for row in idtools.fetch_results(resp) if row[0] == tid]
        finally:
            direct.close()
            through_b.close()

    rows = asyncio.run(fetch_by_id_through_b())
    assert [row[1:] for row in rows] == [(0, 0, [b"only-by-id"])], rows
    assert b.metric("kgate_topic_names_lookups_total") == before_lookups + 1, "B did not look the id up itself"
    by_id = {v: b.metric("kgate_requests_total", api="Fetch", api_version=str(v)) for v in range(13, 18)}
    # KIP-951 versions whatever leader_hints says (deprecated, no effect: kgate caps no version since
    # issue 25): v16+ (librdkafka's newest), topic ids
    assert by_id[16] + by_id[17] >= 1, by_id
    assert sum(by_id.values()) == by_id[16] + by_id[17], by_id
    assert a.metric("kgate_requests_total", api="Fetch") == 0  # and not through A
    assert a.metric("kgate_topic_names_lookups_total") == 0  # A had no filter needing names
