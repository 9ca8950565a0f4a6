"""Configuration reload (issue 11): SIGHUP and ``POST /reload`` while a producer keeps producing.

Real Tansu, real librdkafka (confluent-kafka), kgate as a subprocess re-reading its YAML file.
The producer runs with acks=all and idempotence through every reload; at the end every acked
message must be read back exactly once, and the producer must have seen no error.
"""

from __future__ import annotations

import copy
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from support import procs
from support import workloads as w
from support.ports import free_port, free_port_range


class SteadyProducer:
    """A librdkafka producer sending to one topic in a loop (a thread) until ``stop``."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2}
        )
        self.acked: list[bytes] = []
        self.errors: list[Any] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append(msg.value())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, value=f"m-{self.sent}".encode(), on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001)

    def wait_acked(self, n: int, timeout: float = 30) -> None:
        """Poll until ``n`` more messages than now are acknowledged (the producer is alive)."""
        target = len(self.acked) + n
        deadline = time.monotonic() + timeout
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acked; errors {self.errors[:3]}"
            assert not self.errors, self.errors[:3]
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0


class SteadyConsumer:
    """A librdkafka consumer reading one partition from the start (a thread): long-poll Fetches in flight."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": w.unique("steady"),
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 500,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.got: list[bytes] = []
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(msg.error())
            else:
                self.got.append(msg.value())

    def stop_after(self, n: int, timeout: float = 30) -> None:
        wait_for(lambda: len(self.got) >= n or self.errors, timeout, f"consumed {len(self.got)} of {n}")
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def wait_for(what: Callable[[], Any], timeout: float = 20, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, message or f"timed out waiting for {what}"
        time.sleep(0.02)


def write_config(k: procs.Kgate, config: dict[str, Any]) -> None:
    tmp = k.config_path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(k.config_path)  # whole or not at all, as an operator's deploy tool would


def reloads(k: procs.Kgate, result: str) -> float:
    return sum(v for labels, v in k.metric_values("kgate_config_reloads_total") if f'result="{result}"' in labels)


def produce_once(producer: Any, topic: str, value: bytes, timeout: float = 15) -> Any:
    """Produce one message and wait for its delivery report: the error, or None."""
    from confluent_kafka import KafkaException

    outcome: list[Any] = []
    try:
        producer.produce(topic, value=value, on_delivery=lambda err, msg: outcome.append(err))
    except KafkaException as exc:  # librdkafka already knows the topic is refused (an earlier answer)
        return exc.args[0]
    wait_for(lambda: producer.poll(0.05) is not None and outcome, timeout, f"no delivery report for {value!r}")
    return outcome[0]


@pytest.mark.timeout(180)
def test_sighup_and_post_reload_change_the_policy_while_a_producer_keeps_producing(tansu, kgate_factory) -> None:
    from confluent_kafka import Producer

    k = kgate_factory(tansu.bootstrap, admin=True)
    config = copy.deepcopy(k.config)
    allowed, secret = w.unique("reload-ok"), w.unique("reload-secret")
    w.confluent_create_topic(k.bootstrap, allowed, partitions=1)
    w.confluent_create_topic(k.bootstrap, secret, partitions=1)
    assert reloads(k, "success") == 0
    assert reloads(k, "failure") == 0
    started_at = k.metric_values("kgate_config_last_reload_success_timestamp_seconds")[0][1]
    assert abs(started_at - time.time()) < 120

    steady = SteadyProducer(k.bootstrap, allowed)
    reader = SteadyConsumer(k.bootstrap, allowed)  # its Fetches wait at the broker across each reload
    # a second client whose connection is open before the reload: the new policy must reach it
    other = Producer({"bootstrap.servers": k.bootstrap, "acks": "all", "message.timeout.ms": 10000})
    try:
        steady.wait_acked(200)
        assert produce_once(other, secret, b"before") is None

        # (a) SIGHUP, valid: the chain gains a topic-policy denying the secret topic
        accepted = k.metric_values("kgate_accepted_connections_total")
        config["filters"] = [{"name": "topic-policy", "config": {"deny": ["reload-secret*"]}}]
        write_config(k, config)
        k.signal(signal.SIGHUP)
        wait_for(lambda: reloads(k, "success") == 1, message=k.log_text()[-3000:])
        assert "config reloaded (SIGHUP): filter chains replaced: default" in k.log_text()
        err = produce_once(other, secret, b"after")
        assert err is not None, "the existing connection still produced to a topic the new policy denies"
        steady.wait_acked(200)
        # on the connections they had: none was closed to get there
        assert k.metric_values("kgate_accepted_connections_total") == accepted
        # the old chain is let go once its last exchange (the consumer's long-poll Fetch: up to its
        # max wait) has ended: that can come after the producer's 200 acks on a busy machine
        wait_for(lambda: "the replaced filter chain's last exchange ended" in k.log_text(), message=k.log_text())

        # (b) SIGHUP, invalid: logged with its key path, counted, and the deny stays in force
        bad = copy.deepcopy(config)
        bad["filters"] = [{"name": "topic-policy", "config": {"deny": ["reload-secret*"], "bogus": 1}}]
        bad["virtual_clusters"][0]["max_connections"] = 5  # restart-only: must not half-apply either
        write_config(k, bad)
        k.signal(signal.SIGHUP)
        wait_for(lambda: reloads(k, "failure") == 1, message=k.log_text()[-3000:])
        log = k.log_text()
        assert "config reload (SIGHUP) failed; the running config stays in force" in log
        assert "filters[0]" in log.split("config reload (SIGHUP) failed", 1)[1].splitlines()[0]
        assert reloads(k, "success") == 1
        assert (
            produce_once(
                Producer({"bootstrap.servers": k.bootstrap, "message.timeout.ms": 10000}), secret, b"still-denied"
            )
            is not None
        )
        steady.wait_acked(200)

        # a restart-only change alone: refused naming the key
        bad = copy.deepcopy(config)
        bad["virtual_clusters"][0]["max_connections"] = 5
        write_config(k, bad)
        status, body = k.http("/reload", method="POST")
        assert status == 500, body
        answer = json.loads(body)
        assert answer["result"] == "failure"
        assert "virtual_clusters[0].max_connections: changes only at restart" in answer["message"]
        assert reloads(k, "failure") == 2
        # the same through `kgate reload -c FILE` (what an operator runs in an image without curl)
        cli = subprocess.run(
            [sys.executable, "-m", "kgate", "reload", "-c", str(k.config_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 1, cli
        assert "virtual_clusters[0].max_connections: changes only at restart" in cli.stderr
        assert reloads(k, "failure") == 3

        # (c) POST /reload from loopback: the deny goes away again
        assert k.http("/reload")[0] == 405
        config["filters"] = []
        write_config(k, config)
        cli = subprocess.run(
            [sys.executable, "-m", "kgate", "reload", "-c", str(k.config_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0, cli
        # printed for a person: the JSON answer's fields as lines
        assert cli.stdout == "result: success\nmessage: filter chains replaced: default\n", cli.stdout
        # a fresh client: librdkafka remembers a topic refused to it until its next metadata refresh
        fresh = Producer({"bootstrap.servers": k.bootstrap, "acks": "all", "message.timeout.ms": 10000})
        assert produce_once(fresh, secret, b"allowed-again") is None
        steady.wait_acked(200)
        assert k.http("/readyz")[0] == 200
    finally:
        steady.stop()
        other.flush(10)
    assert not steady.errors, steady.errors[:5]
    reader.stop_after(len(steady.acked))
    assert not reader.errors, reader.errors[:5]
    w.assert_exact(steady.acked, reader.got)  # the consumer that stayed connected saw each exactly once
    assert reloads(k, "success") == 2
    assert k.metric_values("kgate_config_last_reload_success_timestamp_seconds")[0][1] > started_at
    # every acknowledged message is there exactly once, and nothing else
    got = w.confluent_read_all(k.bootstrap, allowed, len(steady.acked), timeout=60)
    assert len(steady.acked) >= 800
    w.assert_exact(steady.acked, got)
    assert w.confluent_read_all(k.bootstrap, secret, 2, timeout=30) == [b"before", b"allowed-again"]


def _connects(port: int) -> bool:
    try:
        socket.create_connection((procs.HOST, port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.timeout(180)
def test_reload_adds_and_removes_a_virtual_cluster(tansu, kgate_factory) -> None:
    k = kgate_factory(tansu.bootstrap, admin=True)
    config = copy.deepcopy(k.config)
    extra_port, extra_base = free_port(), free_port_range(256)
    extra = {
        "name": "extra",
        "listen": f"{procs.HOST}:{extra_port}",
        "advertised_host": procs.HOST,
        "upstream": [tansu.bootstrap],
        "node_ports": {"base": extra_base, "count": 256, "first_node_id": 0},
        "filters": [{"name": "topic-policy", "config": {"deny": ["hidden*"]}}],
    }
    topic = w.unique("reload-vc")
    w.confluent_create_topic(k.bootstrap, topic, partitions=1)
    steady = SteadyProducer(k.bootstrap, topic)
    try:
        steady.wait_acked(100)
        config["virtual_clusters"].append(extra)
        write_config(k, config)
        status, body = k.http("/reload", method="POST")
        assert status == 200, body
        assert json.loads(body)["message"] == "clusters added: extra"
        assert "cluster extra: filter chain: topic-policy" in k.log_text()
        # the new cluster serves real clients, with its own chain, at once (ready included)
        assert k.http("/readyz")[0] == 200
        bootstrap = f"{procs.HOST}:{extra_port}"
        values = w.payloads(50, tag="extra")
        w.confluent_produce(bootstrap, topic, values, acks="all")
        steady.wait_acked(100)

        config["virtual_clusters"] = [c for c in config["virtual_clusters"] if c["name"] != "extra"]
        write_config(k, config)
        k.signal(signal.SIGHUP)
        wait_for(lambda: "config reloaded (SIGHUP): clusters removed: extra" in k.log_text(), message=k.log_text())
        wait_for(lambda: not _connects(extra_port), message="the removed cluster still accepts connections")
        wait_for(lambda: "cluster extra: removed and drained" in k.log_text())
        body = k.http("/readyz")[1]
        assert "extra" not in body, body
        assert k.http("/readyz")[0] == 200, body
        steady.wait_acked(100)

        # added again on the same port (its listener was closed): a reload may reuse it
        config["virtual_clusters"].append(extra)
        write_config(k, config)
        assert k.http("/reload", method="POST")[0] == 200
        assert _connects(extra_port)
    finally:
        steady.stop()
    assert not steady.errors, steady.errors[:5]
    got = w.confluent_read_all(k.bootstrap, topic, len(steady.acked) + len(values), timeout=60)
    w.assert_exact(steady.acked + values, got)


@pytest.mark.timeout(180)
def test_replacing_the_audit_log_loses_no_event(tansu, kgate_factory, tmp_path) -> None:
    """The old chain's audit writer closes only after its last exchange: one event per request, across a reload."""
    from collections import Counter

    from e2e.test_audit_log_e2e import _events, _per_key

    audit = tmp_path / "audit"
    filters = [{"name": "audit-log", "config": {"directory": str(audit), "instance_id": "e2e-r", "gzip": False}}]
    k = kgate_factory(tansu.bootstrap, admin=True, extra={"filters": filters})
    config = copy.deepcopy(k.config)
    topic = w.unique("reload-audit")
    w.confluent_create_topic(k.bootstrap, topic, partitions=1)
    steady = SteadyProducer(k.bootstrap, topic)
    try:
        steady.wait_acked(300)
        config["filters"][0]["config"]["max_file_age_s"] = 3600  # a different chain: a new writer
        write_config(k, config)
        status, body = k.http("/reload", method="POST")
        assert status == 200, body
        wait_for(lambda: "the replaced filter chain's last exchange ended" in k.log_text(), message=k.log_text())
        steady.wait_acked(300)
    finally:
        steady.stop()
    assert not steady.errors, steady.errors[:5]
    requests = _per_key(k, "kgate_requests_total")
    assert k.stop_and_check() == 0  # the new writer drains and publishes at shutdown
    files = [p for p in audit.iterdir() if not p.name.startswith(".")]
    assert len(files) >= 2, "the old writer published its own file when the old chain closed"
    events = _events(audit)
    assert Counter(e["api"]["key"] for e in events) == requests
    produced = sum(t["records"] or 0 for e in events if e["api"]["key"] == 0 for t in e["topics"] if t["name"] == topic)
    assert produced == len(steady.acked)
