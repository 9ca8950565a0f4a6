"""The audit log and topic ids against both brokers (Tansu and Apache Kafka 4.0): a client that
fetches by id gets its topic named in the events (kgate resolved the id after the exchange), and
after the topic is deleted, the same client still fetching with the old id shows up with the name
kgate knew and the broker's error code (100 UNKNOWN_TOPIC_ID from Kafka, 3 from Tansu): the
pipeline's "stale id" signal. kgate runs in process; requests are sent with ``UpstreamClient``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from support.idtools import client, create_topic, delete_topic, fetch_request, kgate_config, produce, topic_id, unique
from support.inproc_kgate import InprocKgate

from kgate.api import ErrorCode
from kgate.codec.generated.api_keys import FETCH

UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _events(directory: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(directory.iterdir()):
        assert not p.name.startswith("."), f"{p.name} not published at shutdown"
        with gzip.open(p, "rt") as f:
            out += [json.loads(line) for line in f]
    return out


@pytest.mark.timeout(180)
async def test_fetch_by_id_named_then_stale_after_delete(broker: Any, tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    k = InprocKgate(
        kgate_config(broker.bootstrap, [{"name": "audit-log", "config": {"directory": str(audit)}}])
    ).start()
    name = unique("aid")
    try:
        await asyncio.to_thread(create_topic, broker.bootstrap, name, 2)
        await asyncio.to_thread(produce, broker.bootstrap, name, [b"a", b"b", b"c"])
        direct = client(broker.port)
        try:
            tid = await topic_id(direct, name)  # from the broker: kgate's cache has never seen it
        finally:
            direct.close()
        c = client(k.port, client_id="stale-consumer")
        try:
            _v, resp = await c.request(FETCH, fetch_request([(tid, [0, 1])]), 13)
            assert [p.error_code for t in resp.responses for p in t.partitions] == [0, 0]
            # the writer names ids after the exchange: let it do so while the topic still exists
            writer = k.cluster.chain.filters[0].writer
            assert await asyncio.to_thread(writer.wait_drained, 10)
            await asyncio.to_thread(delete_topic, broker.bootstrap, name)
            codes: list[int] = []
            for _ in range(50):  # deletion is asynchronous in Kafka: fetch until the id is gone
                _v, resp = await c.request(FETCH, fetch_request([(tid, [0])]), 13)
                codes = [p.error_code for t in resp.responses for p in t.partitions]
                if codes and codes[0] in (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION):
                    break
                await asyncio.sleep(0.2)
            assert codes[0] in (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION), codes
        finally:
            c.close()
    finally:
        k.stop()  # the writer drains and publishes at shutdown
    fetches = [e for e in _events(audit) if e["client"]["id"] == "stale-consumer" and e["api"]["key"] == FETCH]
    first, last = fetches[0], fetches[-1]
    import base64

    sid = base64.urlsafe_b64encode(tid.bytes).rstrip(b"=").decode()
    (t,) = first["topics"]
    assert t["id"] == sid
    assert t["name"] == name
    assert t["name_status"] == "resolved"
    assert t["partitions"] == 2
    assert t["records"] == 3
    assert first["error_code"] == 0
    (t,) = last["topics"]
    assert t["id"] == sid
    assert t["name"] == name
    assert t["name_status"] == "resolved"
    assert t["error_codes"] == codes[:1]
    assert last["error_code"] == codes[0]


@pytest.mark.timeout(120)
async def test_stalled_disk_never_stalls_clients(tansu: Any, tmp_path: Path) -> None:
    """The writer is stuck in a write (a disk that does not answer); clients go on at full speed,
    the events that do not fit the queue are dropped and counted, and once the disk answers
    again the writer carries on."""
    import threading
    import time

    from kgate.codec.generated.data.metadata import MetadataRequest

    audit = tmp_path / "audit"
    config = {"directory": str(audit), "queue_size": 100}
    k = InprocKgate(kgate_config(tansu.bootstrap, [{"name": "audit-log", "config": config}])).start()
    try:
        f = k.cluster.chain.filters[0]
        gate = threading.Event()
        real_write = f.writer.files.write

        def stalled(lines: list[bytes]) -> None:
            gate.wait(60)
            real_write(lines)

        f.writer.files.write = stalled
        c = client(k.port, client_id="busy")
        try:
            await c.request(3, MetadataRequest(topics=[]), 12)
            assert await asyncio.to_thread(lambda: _wait(lambda: f.writer._busy, 10))  # stuck in write()
            start = time.monotonic()
            for _ in range(1000):
                await c.request(3, MetadataRequest(topics=[]), 12)
            took = time.monotonic() - start
        finally:
            c.close()
        assert f.counters.queue_full >= 1000 - 100
        assert f.counters.written == 0
        assert took < 30, took  # 1000 round trips with the disk stuck: not held up by it
        gate.set()
        assert await asyncio.to_thread(f.writer.wait_drained, 20)
        assert f.counters.written >= 100
    finally:
        k.stop()
    events = _events(audit)
    assert len(events) == f.counters.written


def _wait(cond: Any, timeout_s: float) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.timeout(60)
async def test_unreachable_kafka_sink_costs_events_not_traffic(tansu: Any, tmp_path: Path) -> None:
    """A Kafka sink whose broker does not answer: the file log and client traffic go on, and
    kgate stops promptly."""
    import time

    from support.ports import free_port

    from kgate.codec.generated.data.metadata import MetadataRequest

    config = {"directory": str(tmp_path / "audit"), "kafka": {"bootstrap": f"127.0.0.1:{free_port()}", "topic": "t"}}
    k = InprocKgate(kgate_config(tansu.bootstrap, [{"name": "audit-log", "config": config}])).start()
    c = client(k.port, client_id="sinkless")
    try:
        for _ in range(20):
            await c.request(3, MetadataRequest(topics=[]), 12)
    finally:
        c.close()
    start = time.monotonic()
    k.stop()
    assert time.monotonic() - start < 10
    events = _events(tmp_path / "audit")
    assert len([e for e in events if e["client"]["id"] == "sinkless" and e["api"]["key"] == 3]) == 20
