"""``kgate run --workers 2``: serves real clients, survives ``kill -9`` of a worker, drains on SIGTERM.

kgate runs as a subprocess (the parent) with its admin listener; the parent's ``/readyz`` names
each worker's pid, which is how the test finds the worker to kill and sees its replacement.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from support import procs
from support import workloads as w


def _start(tmp_path, upstream: str, drain_timeout_s: float = 10, filters: list | None = None) -> procs.Kgate:
    k = procs.Kgate(tmp_path / "kgate", [upstream], admin=True, log_level="info", drain_timeout_s=drain_timeout_s)
    if filters is not None:
        k.config["virtual_clusters"][0]["filters"] = filters
        k.config_path.write_text(yaml.safe_dump(k.config, sort_keys=False))
    k.argv += ["--workers", "2"]
    k.start()
    return k


def _worker_pids(k: procs.Kgate) -> dict[int, int]:
    _status, body = k.http("/readyz")
    return {int(i): int(p) for i, p in re.findall(r"^worker (\d+): pid (\d+)", body, re.M)}


@pytest.mark.timeout(180)
def test_two_workers_serve_clients_and_survive_kill_9(tmp_path, tansu) -> None:
    audit = tmp_path / "audit"  # one directory and one configured instance id for both workers
    k = _start(
        tmp_path,
        tansu.bootstrap,
        filters=[
            {"name": "audit-log", "config": {"directory": str(audit), "instance_id": "kgate-a", "gzip": False}},
        ],
    )
    try:
        body = k.wait_ready(True, timeout=60)
        assert "worker 0: pid" in body, body
        assert "worker 1: pid" in body, body
        pids = _worker_pids(k)
        assert len(set(pids.values())) == 2
        assert k.pid not in pids.values()

        # a second --workers kgate on the same ports must not share them (SO_REUSEPORT would let it)
        twin = subprocess.run(
            [procs.PYTHON, "-m", "kgate", "run", "-c", str(k.config_path), "--workers", "2"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=k.cwd,
        )
        assert twin.returncode == 1, twin.stderr[-2000:]
        assert "cannot listen on" in twin.stderr, twin.stderr[-2000:]

        topic = w.unique("workers")
        w.confluent_create_topic(k.bootstrap, topic, 2)
        first = w.payloads(300, tag="a")
        w.confluent_produce(k.bootstrap, topic, first, **{"enable.idempotence": True})
        w.assert_exact(first, w.confluent_read_all(k.bootstrap, topic, len(first), partitions=2, timeout=30))

        os.kill(pids[0], signal.SIGKILL)  # the parent must start worker 0 again
        deadline = time.monotonic() + 60
        while (new := _worker_pids(k)).get(0) in (None, pids[0]) or k.http("/readyz")[0] != 200:
            assert time.monotonic() < deadline, k.http("/readyz")
            time.sleep(0.1)
        assert new[1] == pids[1], "the other worker was untouched"
        assert k.alive()

        second = w.payloads(300, tag="b")  # new clients: spread over both workers again
        w.confluent_produce(k.bootstrap, topic, second, **{"enable.idempotence": True})
        w.assert_exact(
            first + second, w.confluent_read_all(k.bootstrap, topic, len(first) + len(second), partitions=2, timeout=30)
        )
        k.signal(signal.SIGHUP)  # forwarded; each worker re-reads the (unchanged) config
        deadline = time.monotonic() + 10
        while k.log_text().count("config reloaded (SIGHUP): no changes") < 2:
            assert time.monotonic() < deadline, k.log_text()[-3000:]
            time.sleep(0.05)
        assert k.alive()
        assert k.http("/readyz")[0] == 200
        status, body = k.http("/reload", method="POST")  # on the parent: every worker reloads
        assert status == 200, body
        assert json.loads(body) == {
            "result": "success",
            "message": "worker 0: ok: no changes; worker 1: ok: no changes",
        }

        text = k.metrics()
        assert 'kgate_worker_restarts_total{worker="0"} 1.0' in text
        assert re.search(r'kgate_accepted_connections_total\{cluster="default",worker="1"\} [1-9]', text), text
        assert "died (killed by signal 9)" in k.log_text()
    finally:
        rc = k.stop(timeout=30)
    assert rc == 0, k.log_text()[-3000:]
    # Each worker writes as its own instance (worker 0's killed file published by its successor).
    names = sorted(p.name for p in audit.iterdir())
    assert names, names
    assert not any(n.startswith(".") for n in names), names
    by_file = {n: {json.loads(line)["instance"] for line in (audit / n).read_text().splitlines()} for n in names}
    for name, instances in by_file.items():
        worker = re.match(r"kgate-audit-kgate-a-(w[01])-default-", name)
        assert worker is not None, names
        assert instances <= {f"kgate-a-{worker.group(1)}"}, (name, instances)
    assert "kgate-a-w1" in {i for v in by_file.values() for i in v}, by_file  # it served (metric above)


@pytest.mark.timeout(180)
def test_sigterm_drains_without_losing_acknowledged_messages(tmp_path, tansu) -> None:
    from confluent_kafka import Producer

    k = _start(tmp_path, tansu.bootstrap)
    topic = w.unique("workers-drain")
    acked: list[bytes] = []
    failed: list[str] = []
    stop = threading.Event()
    try:
        k.wait_ready(True, timeout=60)
        w.confluent_create_topic(k.bootstrap, topic, 2)

        def produce(n: int) -> None:
            p = Producer(
                {
                    "bootstrap.servers": k.bootstrap,
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    "message.timeout.ms": 8000,
                    "reconnect.backoff.max.ms": 200,
                }
            )

            def on_delivery(err, msg) -> None:
                if err is None:
                    acked.append(msg.value())
                else:
                    failed.append(str(err))

            i = 0
            while not stop.is_set():
                try:
                    p.produce(topic, value=f"p{n}-{i}".encode(), on_delivery=on_delivery)
                    i += 1
                except BufferError:
                    pass
                p.poll(0.001)
            # stopped once kgate has exited: an answer already on its way is delivered within the
            # second; the rest can never be acknowledged, so they are purged rather than left to
            # time out (message.timeout.ms, 8 s of nothing)
            p.flush(1)
            p.purge()
            p.flush(15)

        producers = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
        for t in producers:
            t.start()
        deadline = time.monotonic() + 30
        while len(acked) < 2000:
            assert time.monotonic() < deadline, f"only {len(acked)} acked"
            time.sleep(0.05)
        k.signal(signal.SIGTERM)  # while the producers keep sending
        body = k.wait_ready(False, timeout=5)
        assert "draining" in body or "not running" in body, body
        rc = k.wait(timeout=40)
        stop.set()
        for t in producers:
            t.join(30)
    finally:
        stop.set()
        k.kill()
    assert rc == 0, k.log_text()[-3000:]
    # Read straight from the broker (kgate is gone): every acknowledged message must be there.
    consumed = w.confluent_read_all(tansu.bootstrap, topic, len(acked), partitions=2, timeout=30, settle=2)
    missing = set(acked) - set(consumed)
    print(f"acked {len(acked)}, consumed {len(consumed)}, failed {len(failed)} (not acknowledged: not owed)")
    why = ""
    if missing:  # tell a broker-side read problem (found on a second read) from a loss, and whose
        again = w.confluent_read_all(tansu.bootstrap, topic, len(acked), partitions=2, timeout=60, settle=2)
        by_producer = collections.Counter(m.split(b"-")[0].decode() for m in missing)
        why = (
            f"; by producer {dict(by_producer)}; a second read still misses {len(set(acked) - set(again))}; "
            f"delivery errors {collections.Counter(failed).most_common(3)}\n{k.log_text()[-4000:]}"
        )
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}{why}"
    assert len(consumed) == len(set(consumed)), "the idempotent producer wrote duplicates"


@pytest.mark.timeout(120)
def test_sigterm_while_a_worker_restarts_exits_cleanly(tmp_path, tansu) -> None:
    """The parent stops restarting, every worker (the restarting one included) ends, and it exits 0."""
    k = _start(tmp_path, tansu.bootstrap)
    try:
        k.wait_ready(True, timeout=60)
        os.kill(_worker_pids(k)[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while "restarting in" not in k.log_text():
            assert time.monotonic() < deadline, k.log_text()[-2000:]
            time.sleep(0.02)
        k.signal(signal.SIGTERM)  # during the backoff or the new worker's start
        rc = k.wait(timeout=30)
    finally:
        k.kill()
    assert rc == 0, k.log_text()[-3000:]
    assert "kgate stopped (workers exited with" in k.log_text()


def _accepted_by_worker(k: procs.Kgate) -> dict[str, float]:
    """kgate_accepted_connections_total per worker, from the parent's /metrics."""
    out: dict[str, float] = {}
    for labels, value in k.metric_values("kgate_accepted_connections_total"):
        m = re.search(r'worker="(\d+)"', labels)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


@pytest.mark.timeout(180)
def test_reload_changes_the_chain_in_every_worker(tmp_path, tansu) -> None:
    """A config change reaches each worker's chain: whichever worker a new connection lands on refuses
    the newly denied topic, and the other topics still flow (the single-process reload tests cover the
    hand-over itself; this one shows the parent asks every worker and each applies the change)."""
    import yaml

    k = _start(tmp_path, tansu.bootstrap)
    try:
        k.wait_ready(True, timeout=60)
        allowed, secret = w.unique("wreload-ok"), w.unique("wreload-secret")
        w.confluent_create_topic(k.bootstrap, allowed, 1)
        w.confluent_create_topic(k.bootstrap, secret, 1)
        w.confluent_produce(k.bootstrap, secret, [b"before"])  # no policy yet: accepted

        config = dict(k.config, filters=[{"name": "topic-policy", "config": {"deny": ["wreload-secret*"]}}])
        tmp = k.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.replace(k.config_path)
        status, body = k.http("/reload", method="POST")
        assert status == 200, body
        assert json.loads(body) == {
            "result": "success",
            "message": "worker 0: ok: filter chains replaced: default; worker 1: ok: filter chains replaced: default",
        }

        # New clients until both workers have taken some of their connections (SO_REUSEPORT spreads
        # connections by their addresses); every client must be refused. The refusal comes from the
        # reloaded chain's Metadata answer (the topic is unauthorized), so librdkafka fails the message
        # without a Produce: a worker left on the old chain would let about half of the clients through.
        before = _accepted_by_worker(k)
        refusals = 0
        deadline = time.monotonic() + 60
        while True:
            grown = {wk: v - before.get(wk, 0.0) for wk, v in _accepted_by_worker(k).items()}
            if len(grown) == 2 and min(grown.values()) >= 3:
                break
            assert time.monotonic() < deadline, (refusals, grown)
            failure = ""
            try:
                w.confluent_produce(k.bootstrap, secret, [b"after"], **{"message.timeout.ms": 10000})
            except AssertionError as exc:  # the helper's "delivery errors: [KafkaError{...}]"
                failure = str(exc)
            assert failure, "a new client produced to a topic the reloaded policy denies"
            assert "TOPIC_AUTHORIZATION_FAILED" in failure, failure
            refusals += 1
        assert refusals >= 2
        w.confluent_produce(k.bootstrap, allowed, [b"still-flows"])
        assert w.confluent_read_all(k.bootstrap, allowed, 1, partitions=1, timeout=30) == [b"still-flows"]
    finally:
        rc = k.stop(timeout=30)
    assert rc == 0, k.log_text()[-3000:]


@pytest.mark.timeout(120)
def test_workers_start_beside_a_folder_named_kgate(tmp_path, tansu, monkeypatch) -> None:
    """Run from the folder a ``git clone`` made ``kgate/`` in (a checkout has no ``__init__.py`` at its
    top), ``python -m kgate`` would import that folder as a namespace package: every worker failed
    with ``cannot import name '__version__' from 'kgate'``. Workers import the parent's kgate.

    The parent is the ``kgate`` command, as a user runs it there (``python -m kgate`` itself puts the
    working directory first: Python's rule, not kgate's), so not a fork of the test's template."""
    home = tmp_path / "home"
    (home / "kgate" / "docs").mkdir(parents=True)  # what a checkout's top looks like to the importer
    k = procs.Kgate(tmp_path / "run", [tansu.bootstrap], admin=True, log_level="info")
    assert k.argv[1:3] == ["-m", "kgate"]
    k.argv = [str(Path(k.argv[0]).parent / "kgate"), *k.argv[3:], "--workers", "2"]
    k.cwd = str(home)
    monkeypatch.setenv("KGATE_TEST_FORKSERVER", "0")
    k.start()
    try:
        k.wait_ready(True, timeout=60)
        assert sorted(_worker_pids(k)) == [0, 1], k.log_text()[-3000:]
        k.signal(signal.SIGTERM)
        assert k.wait(timeout=30) == 0, k.log_text()[-3000:]
    finally:
        k.kill()
    assert "could not start" not in k.log_text()
