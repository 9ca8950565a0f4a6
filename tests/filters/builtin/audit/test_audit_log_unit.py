"""The audit log's parts without a broker: event building from real frames, the writer thread
(rotation, gzip, sampling, drops, a disk that fails or stalls), config errors, and the core's
exchange reports (tests/support/core_driver.py drives the sans-IO core with no event loop)."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from support.wire import record_batch

from kgate.api import ConnectionInfo, FilterConfigError, TopicNameError
from kgate.codec.generated.api_keys import FETCH, PRODUCE
from kgate.codec.generated.data.fetch import (
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from kgate.codec.generated.data.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from kgate.filters.builtin.audit.event import Captured, build_event, topic_ids_of
from kgate.filters.builtin.audit.files import AuditFiles
from kgate.filters.builtin.audit.filter import AuditLog
from kgate.filters.builtin.audit.writer import AuditCounters, AuditWriter
from kgate.filters.exchanges import POLICY_STATE_KEY
from kgate.proxy.sansio.exchange import Exchange
from kgate.testing.frames import request_bytes, response_bytes

INFO = ConnectionInfo("10.0.0.7:53122", "default", None, "User:alice")
ZERO = UUID(int=0)


def _exchange(api_key: int, version: int, req: bytes, cid: int = 7, t0: int = 1_000_000_000) -> Exchange:
    ex = Exchange(cid, api_key, version)
    ex.t0_ns, ex.req, ex.req_bytes = t0, memoryview(req), len(req)
    return ex


def _event(c: Captured, names: dict[UUID, Any] | None = None) -> dict[str, Any]:
    return build_event(c, instance="i-1", cluster="default", wall_offset_ns=0, names=names or {})


def _produce_frames(version: int, batches: dict[str, list[list[bytes]]], codes: dict[str, int], cid: int = 7):
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name=name,
                partition_data=[PartitionProduceData(index=i, records=record_batch(v)) for i, v in enumerate(parts)],
            )
            for name, parts in batches.items()
        ],
    )
    resp = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=name,
                partition_responses=[
                    PartitionProduceResponse(index=i, error_code=codes.get(name, 0), base_offset=0)
                    for i in range(len(parts))
                ],
            )
            for name, parts in batches.items()
        ]
    )
    return (
        request_bytes(PRODUCE, version, req, correlation_id=cid, client_id="prod-1"),
        response_bytes(PRODUCE, version, resp, correlation_id=cid),
    )


def test_produce_event_counts_bytes_records_and_errors_per_topic() -> None:
    batches = {"orders": [[b"a" * 10, b"b" * 10], [b"c" * 5]], "audit": [[b"x"]]}
    req, resp = _produce_frames(9, batches, {"audit": 29})
    ex = _exchange(PRODUCE, 9, req)
    e = _event(Captured(ex, INFO, memoryview(resp), len(resp), ex.t0_ns + 1_840_000))
    assert e["schema"] == 1
    assert e["instance"] == "i-1"
    assert e["cluster"] == "default"
    assert e["client"] == {"address": "10.0.0.7:53122", "id": "prod-1", "principal": "User:alice"}
    assert e["api"] == {"key": 0, "name": "Produce", "version": 9}
    assert e["correlation_id"] == 7
    assert e["latency_us"] == 1840
    assert e["time_us"] == 1_000_000
    assert e["request_bytes"] == len(req)
    assert e["response_bytes"] == len(resp)
    assert e["error_code"] == 29  # the first non-zero, from the audit topic's partition
    orders, audit = e["topics"]
    assert orders["name"] == "orders"
    assert orders["name_status"] == "given"
    assert orders["partitions"] == 2
    assert orders["records"] == 3
    assert orders["bytes"] == len(record_batch([b"a" * 10, b"b" * 10])) + len(record_batch([b"c" * 5]))
    assert orders["error_codes"] == [0]
    assert audit["error_codes"] == [29]
    assert audit["records"] == 1


def test_acks0_and_unanswered_exchanges_have_no_answer_fields() -> None:
    req, _resp = _produce_frames(9, {"t": [[b"v"]]}, {})
    ex = _exchange(PRODUCE, 9, req)
    e = _event(Captured(ex, INFO, None, None, ex.t0_ns))
    assert e["error_code"] is None
    assert e["latency_us"] is None
    assert e["response_bytes"] is None
    assert e["topics"][0]["error_codes"] == []
    assert e["topics"][0]["records"] == 1


def test_fetch_by_id_resolves_names_and_counts_response_records() -> None:
    tid, dead = uuid4(), uuid4()
    req = FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic_id=tid, partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]
            ),
            FetchTopic(topic_id=dead, partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)]),
        ],
    )
    batch = record_batch([b"1", b"2", b"3"])
    resp = FetchResponse(
        error_code=0,
        responses=[
            FetchableTopicResponse(topic_id=tid, partitions=[PartitionData(partition_index=0, records=batch)]),
            # Tansu answers an id it does not know with a zero id and error 3: matched by position
            FetchableTopicResponse(topic_id=ZERO, partitions=[PartitionData(partition_index=0, error_code=3)]),
        ],
    )
    rq = request_bytes(FETCH, 15, req, correlation_id=3)
    rs = response_bytes(FETCH, 15, resp, correlation_id=3)
    c = Captured(_exchange(FETCH, 15, rq, cid=3), INFO, memoryview(rs), len(rs), 1_000_500_000)
    assert set(topic_ids_of(c)) == {tid, dead}
    e = _event(c, {tid: "orders", dead: TopicNameError(100, "unknown", False)})
    live, gone = e["topics"]
    assert live["name"] == "orders"
    assert live["name_status"] == "resolved"
    assert live["records"] == 3
    assert live["bytes"] == len(batch)
    assert live["error_codes"] == [0]
    assert gone["name"] is None
    assert gone["name_status"] == "unresolved"
    assert gone["error_codes"] == [3]
    assert e["error_code"] == 3
    import base64

    assert live["id"] == base64.urlsafe_b64encode(tid.bytes).rstrip(b"=").decode()


def test_streamed_fetch_answer_has_top_level_code_only() -> None:
    tid = uuid4()
    req = FetchRequest(max_wait_ms=1, min_bytes=1, topics=[FetchTopic(topic_id=tid, partitions=[FetchPartition()])])
    resp = FetchResponse(error_code=0, responses=[FetchableTopicResponse(topic_id=tid, partitions=[PartitionData()])])
    rs = response_bytes(FETCH, 13, resp)
    rq = request_bytes(FETCH, 13, req)
    c = Captured(_exchange(FETCH, 13, rq), INFO, memoryview(rs)[:30], len(rs) + 1000, 2_000_000_000)
    e = _event(c, {tid: TopicNameError(-1, "timeout", True)})
    assert e["response_bytes"] == len(rs) + 1000
    assert e["error_code"] == 0
    assert e["topics"][0]["bytes"] is None
    assert e["topics"][0]["name_status"] == "lookup_failed"


def test_streamed_fetch_answer_is_walked_across_its_pieces() -> None:
    """An answer that streamed through arrives as the pieces kgate forwarded; fields that straddle
    two pieces are read all the same, without joining the record bytes."""
    tid = uuid4()
    req = FetchRequest(max_wait_ms=1, min_bytes=1, topics=[FetchTopic(topic_id=tid, partitions=[FetchPartition()])])
    batches = [record_batch([b"r%d" % i] * 7) for i in range(3)]
    resp = FetchResponse(
        error_code=0,
        responses=[
            FetchableTopicResponse(
                topic_id=tid,
                partitions=[PartitionData(partition_index=i, records=b) for i, b in enumerate(batches)],
            )
        ],
    )
    rs = response_bytes(FETCH, 15, resp)
    rq = request_bytes(FETCH, 15, req)
    for cuts in [(9,), (10, 11, 40), tuple(range(5, len(rs), 37))]:
        bounds = [0, *cuts, len(rs)]
        pieces: list[bytes | memoryview] = [memoryview(rs)[a:b] for a, b in pairwise(bounds)]
        c = Captured(_exchange(FETCH, 15, rq), INFO, pieces, len(rs), 2_000_000_000)
        e = _event(c, {tid: "t"})
        (t,) = e["topics"]
        assert t["records"] == 21, cuts
        assert t["bytes"] == sum(map(len, batches)), cuts
        assert t["error_codes"] == [0], cuts


def test_policy_decisions_come_from_the_exchange_state() -> None:
    req, resp = _produce_frames(9, {"secret": [[b"v"]]}, {"secret": 29})
    ex = _exchange(PRODUCE, 9, req)
    decision = {
        "filter": "topic-policy",
        "decision": "deny",
        "operation": "Produce",
        "resource_type": "topic",
        "resource": "secret",
        "error_code": 29,
        "reason": "denied by topic-policy",
    }
    ex.state = {POLICY_STATE_KEY: [decision]}
    e = _event(Captured(ex, INFO, memoryview(resp), len(resp), ex.t0_ns + 1000))
    assert e["policy"] == [decision]


# -- the writer ---------------------------------------------------------------------------------
def _captured(n: int, size: int = 0) -> list[Captured]:
    req, resp = _produce_frames(9, {"t": [[b"v" * size]]}, {})
    out = []
    for i in range(n):
        ex = _exchange(PRODUCE, 9, req, cid=i, t0=time.monotonic_ns())
        out.append(Captured(ex, INFO, memoryview(resp), len(resp), ex.t0_ns + 1000))
    return out


def _writer(tmp: Path, counters: AuditCounters, **kw: Any) -> AuditWriter:
    files = AuditFiles(
        tmp,
        kw.pop("instance", "inst:1"),
        kw.pop("max_file_bytes", 1 << 30),
        kw.pop("max_file_age_s", 3600),
        kw.pop("gzip", True),
    )
    return AuditWriter(
        files,
        instance="inst:1",
        cluster="default",
        queue_size=kw.pop("queue_size", 10_000),
        max_queue_bytes=kw.pop("max_queue_bytes", 1 << 30),
        resolve=lambda ids: {},
        counters=counters,
        **kw,
    )


def _read_all(d: Path) -> tuple[list[str], list[dict[str, Any]]]:
    names = sorted(p.name for p in d.iterdir())
    events = []
    for p in sorted(d.iterdir()):
        if p.name.startswith("."):
            continue
        opener: Any = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rt") as f:
            events += [json.loads(line) for line in f]
    return names, events


def test_rotation_by_size_publishes_gzip_files_with_every_event(tmp_path: Path) -> None:
    counters = AuditCounters()
    w = _writer(tmp_path, counters, max_file_bytes=4000)
    w.start()
    for c in _captured(100):
        w.offer(c)
    assert w.wait_drained(10)
    w.stop()
    names, events = _read_all(tmp_path)
    assert len(names) > 3, names
    assert all(n.startswith("kgate-audit-inst_1-") and n.endswith(".jsonl.gz") for n in names), names
    assert sorted(e["correlation_id"] for e in events) == list(range(100))
    assert counters.written == 100
    assert counters.queue_full == 0


def test_rotation_by_age_without_gzip_and_hidden_while_open(tmp_path: Path) -> None:
    counters = AuditCounters()
    w = _writer(tmp_path, counters, max_file_age_s=0.3, gzip=False)
    w.start()
    for c in _captured(5):
        w.offer(c)
    assert w.wait_drained(10)
    names, _ = _read_all(tmp_path)
    assert len(names) == 1, names
    assert names[0].startswith(".kgate-audit-"), names  # still being written: hidden
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(not n.startswith(".") for n in os.listdir(tmp_path)):
        time.sleep(0.05)  # the idle writer rotates the old file on its own
    names, events = _read_all(tmp_path)
    assert len(names) == 1, names
    assert names[0].endswith(".jsonl"), names
    assert not names[0].startswith("."), names
    assert len(events) == 5
    w.stop()


def test_orphaned_hidden_file_is_published_at_start(tmp_path: Path) -> None:
    orphan = tmp_path / ".kgate-audit-old_1-default-20260101T000000Z-000001.jsonl"
    orphan.write_text('{"schema":1}\n')
    AuditFiles(tmp_path, "new:2", 1 << 20, 60, True).close()
    assert os.listdir(tmp_path) == ["kgate-audit-old_1-default-20260101T000000Z-000001.jsonl.gz"]


def test_a_live_writers_file_is_never_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two writers under one instance id (two workers, a mistaken config): the second opens its own file."""
    import fcntl

    from kgate.filters.builtin.audit import files as audit_files

    monkeypatch.setattr(audit_files.time, "strftime", lambda *a: "20260101T000000Z")
    theirs = tmp_path / ".kgate-audit-inst_1-20260101T000000Z-000001.jsonl"
    theirs.write_bytes(b'{"theirs":1}\n')
    with open(theirs, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live writer holds it
        files = AuditFiles(tmp_path, "inst:1", 1 << 20, 3600, False)
        files.write([b'{"ours":1}\n'])
        assert theirs.read_bytes() == b'{"theirs":1}\n'
        assert (tmp_path / ".kgate-audit-inst_1-20260101T000000Z-000002.jsonl").read_bytes() == b'{"ours":1}\n'
        files.close()


def test_a_file_taken_for_an_orphan_before_its_lock_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between create and lock, a starting writer may remove the new empty file as an orphan."""
    from kgate.filters.builtin.audit import files as audit_files

    monkeypatch.setattr(audit_files.time, "strftime", lambda *a: "20260101T000000Z")
    files = AuditFiles(tmp_path, "inst:1", 1 << 20, 3600, False)
    real_flock = audit_files.fcntl.flock
    removed: list[str] = []

    def flock_after_removal(fd: int, op: int) -> None:
        if not removed:  # the other writer's _finalize_orphans got there first
            victim = tmp_path / ".kgate-audit-inst_1-20260101T000000Z-000001.jsonl"
            victim.unlink()
            removed.append(victim.name)
        real_flock(fd, op)

    monkeypatch.setattr(audit_files.fcntl, "flock", flock_after_removal)
    files.write([b'{"ours":1}\n'])
    files.close()
    assert removed
    assert sorted(os.listdir(tmp_path)) == ["kgate-audit-inst_1-20260101T000000Z-000002.jsonl"]
    assert (tmp_path / "kgate-audit-inst_1-20260101T000000Z-000002.jsonl").read_bytes() == b'{"ours":1}\n'


def test_a_name_published_between_check_and_create_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload's old and new writers (one instance id, one second): the old one publishes its file
    after the new one checked the name and before it created its hidden file. The new writer must
    move on, not publish over the old file (CI lost the old chain's events to this once)."""
    from kgate.filters.builtin.audit import files as audit_files

    monkeypatch.setattr(audit_files.time, "strftime", lambda *a: "20260101T000000Z")
    old = AuditFiles(tmp_path, "inst:1", 1 << 20, 3600, False)
    old.write([b'{"old":1}\n'])
    new = AuditFiles(tmp_path, "inst:1", 1 << 20, 3600, False)
    real_open = open
    published: list[bool] = []

    def open_after_publish(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if mode == "xb" and not published:
            old.close()  # the old writer renames its hidden file to the checked name, right now
            published.append(True)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(audit_files, "open", open_after_publish, raising=False)
    new.write([b'{"new":1}\n'])
    new.close()
    assert published
    names = sorted(os.listdir(tmp_path))
    assert names == [
        "kgate-audit-inst_1-20260101T000000Z-000001.jsonl",
        "kgate-audit-inst_1-20260101T000000Z-000002.jsonl",
    ], names
    assert (tmp_path / names[0]).read_bytes() == b'{"old":1}\n'
    assert (tmp_path / names[1]).read_bytes() == b'{"new":1}\n'


def test_full_queue_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    counters = AuditCounters()
    w = _writer(tmp_path, counters, queue_size=10)  # not started: nothing drains the queue
    start = time.perf_counter()
    for c in _captured(1000):
        w.offer(c)
    took = time.perf_counter() - start
    assert counters.queue_full == 990
    assert len(w._q) == 10
    assert took < 0.5


def test_queue_bytes_bound_drops_large_frames(tmp_path: Path) -> None:
    counters = AuditCounters()
    w = _writer(tmp_path, counters, max_queue_bytes=50_000)
    for c in _captured(20, size=10_000):
        w.offer(c)
    assert 1 <= len(w._q) <= 5
    assert counters.queue_full == 20 - len(w._q)


def test_stalled_disk_drops_events_while_the_offerer_runs_on(tmp_path: Path) -> None:
    """A write that blocks (a stalled disk) fills the queue; offers keep returning at once."""
    counters = AuditCounters()
    w = _writer(tmp_path, counters, queue_size=50)
    gate = threading.Event()
    real_write = w.files.write

    def stalled(lines: list[bytes]) -> None:
        gate.wait(30)
        real_write(lines)

    w.files.write = stalled  # type: ignore[method-assign]
    w.start()
    batch = _captured(500)
    w.offer(batch[0])
    deadline = time.monotonic() + 5
    while w._q and time.monotonic() < deadline:
        time.sleep(0.01)  # the writer took the first event and is now stuck in write()
    slowest = 0.0
    for c in batch[1:]:
        t = time.perf_counter()
        w.offer(c)
        slowest = max(slowest, time.perf_counter() - t)
    assert counters.queue_full == 499 - 50
    assert slowest < 0.05
    gate.set()
    assert w.wait_drained(10)
    w.stop()
    assert counters.written == 51
    _, events = _read_all(tmp_path)
    assert len(events) == 51


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs")
def test_full_disk_counts_write_errors_and_recovers(tmp_path: Path) -> None:
    """A real full disk: a 64 KiB tmpfs. Writes fail, events are counted as write_error, and the
    writer carries on (and writes again once there is room)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.system(f"mount -t tmpfs -o size=64k tmpfs {mnt} 2>/dev/null") != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        counters = AuditCounters()
        w = _writer(mnt, counters, gzip=False, max_file_bytes=1 << 30)
        w.start()
        batch = _captured(400, size=1000)
        for i in range(0, 400, 10):  # in small chunks, so the disk fills part way through
            for c in batch[i : i + 10]:
                w.offer(c)
            assert w.wait_drained(10)
        assert counters.write_errors > 0
        assert counters.written > 0
        assert counters.written + counters.write_errors == 400
        for p in mnt.iterdir():
            p.unlink()  # room again
        for c in _captured(3):
            w.offer(c)
        assert w.wait_drained(10)
        w.stop()
        _, events = _read_all(mnt)
        assert len(events) == 3
    finally:
        os.system(f"umount {mnt}")


def test_read_only_directory_counts_write_errors(tmp_path: Path) -> None:
    counters = AuditCounters()
    w = _writer(tmp_path, counters)
    os.chmod(tmp_path, 0o500)
    try:
        if os.access(tmp_path, os.W_OK):
            # root ignores the mode bits: make the next open fail as a read-only disk would
            def fail(*_a: Any) -> None:
                raise OSError(30, "Read-only file system")

            w.files._open = fail  # type: ignore[method-assign]
        w.start()
        for c in _captured(10):
            w.offer(c)
        assert w.wait_drained(10)
        assert counters.write_errors == 10
        assert counters.written == 0
    finally:
        os.chmod(tmp_path, 0o700)
        w.stop()


def test_sampling_per_api_key(tmp_path: Path) -> None:
    """Sampling decides on the event loop, before anything is queued: the writer (not started
    here) holds exactly the exchanges kept."""
    f = AuditLog(AuditLog.validate_config({"directory": "/tmp/x", "sample": {"Produce": 0, "Fetch": 1}}))
    w = _writer(tmp_path, f.counters)
    observe = f._observer(w, f.config["sample"])
    req, resp = _produce_frames(9, {"t": [[b"v"]]}, {})
    for _ in range(50):
        observe(_exchange(PRODUCE, 9, req), INFO, resp, len(resp), 0)
        observe(_exchange(FETCH, 12, req), INFO, resp, len(resp), 0)
    assert len(w._q) == 50
    assert all(item[0].api_key == FETCH for item in w._q)
    assert f.counters.sampled_out == 50
    half = AuditLog(AuditLog.validate_config({"directory": "/tmp/x", "sample": {"default": 0.5}}))
    w2 = _writer(tmp_path, half.counters)
    observe = half._observer(w2, half.config["sample"])
    for _ in range(2000):
        observe(_exchange(FETCH, 12, req), INFO, resp, len(resp), 0)
    assert 800 < len(w2._q) < 1200  # binomial(2000, 0.5): outside this range with p < 1e-19
    everything = AuditLog(AuditLog.validate_config({"directory": "/tmp/x"}))
    assert everything._observer(w, everything.config["sample"]) == w.offer_exchange  # no sampling: no wrapper


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "directory:"),
        ({"directory": "/x", "bogus": 1}, "unknown keys ['bogus']"),
        ({"directory": "/x", "max_file_bytes": 0}, "max_file_bytes: expected an integer >= 1"),
        ({"directory": "/x", "max_file_age_s": "soon"}, "max_file_age_s: expected a number > 0"),
        ({"directory": "/x", "gzip": "yes"}, "gzip: expected true or false"),
        ({"directory": "/x", "sample": {"Fetch": 2}}, "sample.Fetch: expected a rate between 0 and 1"),
        ({"directory": "/x", "sample": {"Fetsh": 1}}, "sample.Fetsh: not a Kafka api name"),
        ({"directory": "/x", "kafka": {"topic": "t"}}, "kafka.bootstrap:"),
        ({"directory": "/x", "kafka": {"bootstrap": "b:9092"}}, "kafka.topic:"),
        ({"directory": "/x", "kafka": {"bootstrap": "b:9092", "topic": "t", "acks": 2}}, "kafka.acks:"),
        ({"directory": "/x", "kafka": {"bootstrap": "b:9092", "topic": "t", "queue_size": -1}}, "kafka.queue_size:"),
    ],
)
def test_config_errors_name_the_key(config: dict[str, Any], message: str) -> None:
    with pytest.raises(FilterConfigError, match=None) as info:
        AuditLog.validate_config(config)
    assert message in str(info.value)


def test_config_defaults() -> None:
    c = AuditLog.validate_config({"directory": "/var/log/kgate"})
    assert c["max_file_bytes"] == 128 << 20
    assert c["max_file_age_s"] == 300
    assert c["gzip"] is True
    assert c["queue_size"] == 10_000
    assert c["sample"] == {"default": 1.0, "rates": {}}
    assert c["kafka"] is None
    host, pid = c["instance_id"].rsplit(":", 1)
    assert host
    assert int(pid) == os.getpid()


def test_config_error_in_yaml_names_the_filter_and_key() -> None:
    from kgate.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "virtual_clusters": [
                    {
                        "name": "a",
                        "listen": "127.0.0.1:1",
                        "upstream": ["127.0.0.1:2"],
                        "node_ports": {"base": 3, "count": 1},
                    }
                ],
                "filters": [{"name": "audit-log", "config": {"directory": "/x", "sample": {"Fetch": 7}}}],
            },
            "t.yaml",
        )
    assert "filters[0]" in str(info.value)
    assert "sample.Fetch" in str(info.value)


# -- the walkers agree with the codec on every version kgate reads --------------------------------
@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_walkers_match_the_codec(version: int) -> None:
    from kgate.codec import api
    from kgate.filters.builtin.audit.wire import Chunks, body_offset, fetch_response_topics

    ids = [uuid4(), uuid4()]
    keys: list[Any] = ids if version >= 13 else ["a", "bb"]
    batch = record_batch([b"x"] * 4)
    resp = FetchResponse(
        error_code=0,
        responses=[
            FetchableTopicResponse(
                topic=k if isinstance(k, str) else "",
                topic_id=k if isinstance(k, UUID) else ZERO,
                partitions=[PartitionData(partition_index=p, error_code=p, records=batch) for p in range(n)],
            )
            for k, n in zip(keys, (3, 1), strict=True)
        ],
    )
    rs = response_bytes(FETCH, version, resp)
    expect = [(keys[0], 3, 3 * len(batch), 12, [0, 1, 2]), (keys[1], 1, len(batch), 4, [0])]
    hv = api.response_header_version(FETCH, version)
    for buf in (rs, Chunks([memoryview(rs)[i : i + 7] for i in range(0, len(rs), 7)])):
        assert fetch_response_topics(buf, body_offset(buf, hv), version) == (0, expect)


@pytest.mark.parametrize("version", range(3, 12))
def test_produce_walkers_match_the_codec(version: int) -> None:
    from kgate.codec import api
    from kgate.codec.headers import parse_request_header
    from kgate.filters.builtin.audit.wire import Chunks, produce_request_topics

    req, _resp = _produce_frames(version, {"a": [[b"1", b"2"], [b"3"]], "b": [[b"4"]]}, {"b": 6})
    header = parse_request_header(req, api.request_header_version(PRODUCE, version))
    pieces = Chunks([memoryview(req)[i : i + 5] for i in range(0, len(req), 5)])
    for buf in (req, pieces):
        got = produce_request_topics(buf, header.body_offset, version)
        assert [(k, p, r) for k, p, _b, r, _c in got] == [("a", 2, 3), ("b", 1, 1)]


@pytest.mark.parametrize("version", [1, 4, 8, 9, 12])
def test_metadata_topics_named_or_not(version: int) -> None:
    from kgate.codec.generated.data.metadata import (
        MetadataRequest,
        MetadataRequestTopic,
        MetadataResponse,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )

    resp = MetadataResponse(
        brokers=[],
        topics=[
            MetadataResponseTopic(
                name="a", error_code=3, partitions=[MetadataResponsePartition(partition_index=0, error_code=5)]
            )
        ],
    )
    rs = response_bytes(3, version, resp)
    for topics, expect in (([], []), (None, []), ([MetadataRequestTopic(name="a")], ["a"])):
        if topics is None and version < 1:
            continue
        rq = request_bytes(3, version, MetadataRequest(topics=topics))
        e = _event(Captured(_exchange(3, version, rq), INFO, memoryview(rs), len(rs), 2_000_000_000))
        assert [t["name"] for t in e["topics"]] == expect
        if expect:
            assert e["topics"][0]["error_codes"] == [3, 5]
            assert e["error_code"] == 3
        else:
            assert e["error_code"] == 0  # no topic named: nothing of the answer is attributed


def test_count_records_in_place_equals_contiguous() -> None:
    """Record counting over the pieces of a streamed answer, cut anywhere, equals the whole's."""
    import random

    from kgate.filters.builtin.audit.wire import Chunks, count_records

    data = b"".join(record_batch([b"v" * (i % 7)] * (1 + i % 5)) for i in range(200))
    whole = count_records(data, 0, len(data))
    assert whole == sum(1 + i % 5 for i in range(200))
    rng = random.Random(7)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 40)))
        bounds = [0, *cuts, len(data)]
        pieces: list[bytes | memoryview] = [memoryview(data)[a:b] for a, b in pairwise(bounds)]
        assert count_records(Chunks(pieces), 0, len(data)) == whole


def test_records_counted_past_256_batches() -> None:
    """One batch per record (as Tansu answers, or a producer with linger 0): every batch is counted
    (past 256 batches the count used to be null, and the report summed it as 0)."""
    tid = uuid4()
    many = b"".join(record_batch([b"r"]) for _ in range(2200))
    few = record_batch([b"r"] * 3)
    req = FetchRequest(max_wait_ms=1, min_bytes=1, topics=[FetchTopic(topic_id=tid, partitions=[FetchPartition()])])
    for data, records in ((many, 2200), (few, 3)):
        resp = FetchResponse(
            responses=[
                FetchableTopicResponse(topic_id=tid, partitions=[PartitionData(partition_index=0, records=data)])
            ]
        )
        rs = response_bytes(FETCH, 13, resp)
        rq = request_bytes(FETCH, 13, req)
        for answer in (memoryview(rs), [memoryview(rs)[:100], memoryview(rs)[100:]]):
            e = _event(Captured(_exchange(FETCH, 13, rq), INFO, answer, len(rs), 2_000_000_000), {tid: "t"})
            assert e["topics"][0]["records"] == records
            assert e["topics"][0]["bytes"] == len(data)


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_and_acknowledge_carry_topic_names(version: int) -> None:
    """ShareFetch and ShareAcknowledge name topics by id only: the events carry the names, resolved
    like Fetch's, with the answer's partition codes."""
    from kgate.codec.generated.share import share_acknowledge as sa
    from kgate.codec.generated.share import share_fetch as sf

    tid, other = uuid4(), uuid4()
    topics = [
        sf.FetchTopic(topic_id=t, partitions=[sf.FetchPartition(partition_index=i)]) for i, t in enumerate((tid, other))
    ]
    req = sf.ShareFetchRequest(
        group_id="g",
        member_id="m",
        share_session_epoch=0,
        max_wait_ms=1,
        min_bytes=1,
        max_records=10,
        batch_size=10,
        topics=topics,
    )
    resp = sf.ShareFetchResponse(
        responses=[
            sf.ShareFetchableTopicResponse(
                topic_id=tid, partitions=[sf.PartitionData(partition_index=0, error_code=0)]
            ),
            sf.ShareFetchableTopicResponse(
                topic_id=other, partitions=[sf.PartitionData(partition_index=1, error_code=6)]
            ),
        ]
    )
    key = 78
    rq, rs = request_bytes(key, version, req), response_bytes(key, version, resp)
    e = _event(
        Captured(_exchange(key, version, rq), INFO, memoryview(rs), len(rs), 2_000_000_000),
        {tid: "orders", other: "payments"},
    )
    got = [(t["name"], t["name_status"], t["partitions"], t["error_codes"]) for t in e["topics"]]
    assert got == [("orders", "resolved", 1, [0]), ("payments", "resolved", 1, [6])]
    ack = sa.ShareAcknowledgeRequest(
        group_id="g",
        member_id="m",
        share_session_epoch=1,
        topics=[sa.AcknowledgeTopic(topic_id=tid, partitions=[sa.AcknowledgePartition(partition_index=0)])],
    )
    ack_resp = sa.ShareAcknowledgeResponse(
        responses=[
            sa.ShareAcknowledgeTopicResponse(
                topic_id=tid, partitions=[sa.PartitionData(partition_index=0, error_code=0)]
            )
        ]
    )
    rq, rs = request_bytes(79, version, ack), response_bytes(79, version, ack_resp)
    e = _event(Captured(_exchange(79, version, rq), INFO, memoryview(rs), len(rs), 2_000_000_000), {tid: "orders"})
    assert [(t["name"], t["id"] is not None, t["error_codes"]) for t in e["topics"]] == [("orders", True, [0])]


def test_produce_v13_by_id_carries_the_name() -> None:
    """Produce v13 names topics by id only: the event carries the name, records counted."""
    tid = uuid4()
    data = [PartitionProduceData(index=0, records=record_batch([b"a"] * 4))]
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[TopicProduceData(topic_id=tid, partition_data=data)],
    )
    rq = request_bytes(PRODUCE, 13, req)
    e = _event(Captured(_exchange(PRODUCE, 13, rq), INFO, None, None, 2_000_000_000), {tid: "orders"})
    (t,) = e["topics"]
    assert (t["name"], t["name_status"], t["records"]) == ("orders", "resolved", 4)
