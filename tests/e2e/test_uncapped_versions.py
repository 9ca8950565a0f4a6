"""kgate offers clients every version the broker offers, and still no broker address (issue 25).

Before, kgate capped Produce at v9 and Fetch at v15 unless ``proxy.leader_hints: true``, because
the KIP-951 node endpoints at the end of newer responses meant holding them whole. Now those
responses stream through and only their tail is rewritten (proxy/sansio/response_tail.py), so the cap
is gone: ApiVersions through kgate says what the broker says (api keys 88-92 included), and
librdkafka (Fetch v16 / Produce v10 against Tansu) and the Java clients of Kafka 4.3.1 (Produce
v13 by topic id, Fetch v18) run through kgate with no loss, no duplicates and no client socket
to the broker (ConnectionWatcher). A configuration that still says ``leader_hints: false`` loads,
is warned about and caps nothing.

librdkafka 2.16 crashes (SIGSEGV) on Tansu's Fetch v16+ answer for a deleted topic's id when that
answer keeps its empty node-endpoint list (docs/compatibility.md): a consumer of a topic deleted
under it runs through kgate in a process of its own (support/rdk_poller.py), so a crash fails the
test, and the answer's bytes through kgate are compared with Tansu's and with Kafka 4.3.1's.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import workloads as w
from support.netconn import ConnectionWatcher
from support.procs import PYTHON
from support.wire import RawClient, api_versions_request, parse_api_versions_response

from kgate.codec import api
from kgate.codec.generated.api_keys import CREATE_TOPICS, FETCH, PRODUCE
from kgate.codec.generated.data import fetch as F
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.codec.tail_walk import read_tagged
from kgate.proxy.sansio import response_tail
from kgate.testing.frames import request_bytes


def _versions_used(k, api_key: int) -> set[int]:
    """api versions clients used for ``api_key``, from kgate's request metric."""
    out = set()
    for labels, v in k.metric_values("kgate_requests_total"):
        if f'api="{api.API_INFO[api_key].name}"' in labels and v > 0:
            out.add(int(labels.split('api_version="')[1].split('"')[0]))
    return out


def _api_versions(port: int) -> dict[int, tuple[int, int]]:
    with RawClient(port) as c:
        c.send(api_versions_request(1, 3))
        resp = c.recv_frame()
    return parse_api_versions_response(resp[4:], 3)["api_keys"]


@pytest.mark.timeout(120)
def test_api_versions_through_kgate_are_the_brokers(broker, kgate_factory) -> None:
    """Every api key and version range the broker offers is offered (the codec knows them all).

    With no filter: a filter narrows the apis it hooks to the versions it declared (the default
    chain's guardrails reads CreateTopics from v2; docs/filters.md), which is not a version cap."""
    k = kgate_factory(f"127.0.0.1:{broker.port}", bootstrap_serves_node=True, extra={"filters": []})
    direct, through = _api_versions(broker.port), _api_versions(k.listen_port)
    expect = {}
    for key, (lo, hi) in direct.items():
        info = api.API_INFO.get(key)
        # only where kgate must read an answer does its codec bound the range (none, with 4.3.1)
        expect[key] = (lo, min(hi, info.max_version)) if info is not None and key in (0, 1, 78, 79) else (lo, hi)
    assert through == expect
    assert through[PRODUCE][1] >= 10
    assert through[FETCH][1] >= 16


@pytest.mark.timeout(120)
def test_kafka_43_offers_share_and_streams_apis(kafka, kgate_factory) -> None:
    k = kgate_factory(kafka.bootstrap, bootstrap_serves_node=True)
    through = _api_versions(k.listen_port)
    assert through[PRODUCE][1] == 13
    assert through[FETCH][1] >= 17
    for key in (76, 78, 79):  # ShareGroupHeartbeat, ShareFetch, ShareAcknowledge
        assert key in through, (key, through.get(key))
        assert through[key][1] >= 1, (key, through.get(key))
    assert {88, 89} <= set(through)  # StreamsGroupHeartbeat/Describe: new to the codec, offered


@pytest.mark.timeout(240)
@pytest.mark.parametrize("leader_hints", [None, False], ids=["default", "old-config-false"])
def test_librdkafka_streams_fetch_v16_through_kgate(tansu, kgate_factory, leader_hints) -> None:
    """Large Fetch answers (records over many reads) stream through with their tails walked."""
    proxy: dict = {"drain_timeout_s": 2}
    if leader_hints is not None:
        proxy["leader_hints"] = leader_hints
    k = kgate_factory(f"127.0.0.1:{tansu.port}", bootstrap_serves_node=True, extra={"proxy": proxy})
    topic = w.unique("uncapped")
    values = w.payloads(300, size=10_000)  # 3 MB: Fetch answers far larger than one read
    with ConnectionWatcher({tansu.port}) as watch:
        w.confluent_create_topic(k.bootstrap, topic, 2)
        reports = w.confluent_produce(k.bootstrap, topic, values, **{"enable.idempotence": True, "acks": "all"})
        got, _ = w.confluent_consume(k.bootstrap, topic, len(values), group=w.unique("g"))
    w.assert_exact(values, got)
    assert len(reports) == len(values)
    watch.assert_clean(must_use={k.listen_port})
    fetch, produce = _versions_used(k, FETCH), _versions_used(k, PRODUCE)
    assert max(fetch) >= 16, (fetch, produce)
    assert max(produce) >= 10, (fetch, produce)
    warned = "proxy.leader_hints is deprecated and has no effect" in k.log_text()
    assert warned == (leader_hints is not None)


@pytest.mark.timeout(300)
def test_java_clients_use_produce_v13_and_fetch_v18(kafka, kgate_factory, tmp_path) -> None:
    """Kafka 4.3.1's console producer and consumer (a classic group) carry 400 records of 2 kB through
    kgate with Produce v13 and Fetch v17+; neither JVM nor this process has a socket to the broker.
    kgate has topic-policy in its chain: the Java clients through a policy that must name the topic
    each Produce v13 gives by id only (test_kafka_clients' Java test, folded in here)."""
    from support import kafka_broker  # here: a module-level import would put every test here in the Kafka group
    from support.java_clients import JavaTools

    k = kgate_factory(
        kafka.bootstrap, bootstrap_serves_node=True, extra={"proxy": {"drain_timeout_s": 2}, "filters": POLICY}
    )
    topic = w.unique("java43")
    lines = [f"java-{i}-" + "x" * 2000 for i in range(400)]
    # the tools' JVMs are watched run by run (their sockets sampled, kgate's accepted connections counted)
    tools = JavaTools.through(k, kafka.port, tmp_path, kafka_broker.KAFKA_43)
    with ConnectionWatcher({kafka.port}) as watch:
        w.confluent_create_topic(k.bootstrap, topic, 1)
    # no socket to the broker; the admin client's short connection may fall between two samples
    # (at load ~20 none was seen), so kgate's own count shows the request went through it
    watch.assert_clean()
    assert _requests(k, CREATE_TOPICS) >= 1
    tools.console_produce(topic, lines)
    got = tools.console_consume(topic, len(lines))
    assert got == lines, f"{len(got)} of {len(lines)} records; first {[x[:12] for x in got[:3]]}"
    fetch, produce = _versions_used(k, FETCH), _versions_used(k, PRODUCE)
    assert 13 in produce, (fetch, produce)
    assert max(fetch) >= 17, (fetch, produce)


POLLER = Path(__file__).resolve().parents[1] / "support" / "rdk_poller.py"
POLICY = [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}]


def _requests(k: Any, api_key: int) -> int:
    name = api.API_INFO[api_key].name
    return int(sum(v for labels, v in k.metric_values("kgate_requests_total") if f'api="{name}"' in labels))


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the result: its handle answers it
    admin.delete_topics([topic], operation_timeout=20)[topic].result(30)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("filters", [[], POLICY], ids=["default", "topic-policy"])
def test_librdkafka_survives_a_topic_deleted_under_it(tansu, kgate_factory, filters) -> None:
    """A librdkafka consumer keeps fetching a topic deleted under it; Tansu answers its Fetch v16 with
    a zero topic id, a ``current_leader`` tag and an empty node-endpoint list, on which librdkafka
    2.16 died (SIGSEGV in rd_kafka_metadata_cache_find, before the fix) direct or through kgate.
    With topic-policy the answer takes the decoded path (names to learn), without it the streamed one."""
    k = kgate_factory(
        f"127.0.0.1:{tansu.port}",
        bootstrap_serves_node=True,
        extra={"filters": filters, "proxy": {"drain_timeout_s": 2}},
    )
    topic = w.unique("deleted")
    values = [b"before-%d" % i for i in range(5)]
    w.confluent_create_topic(tansu.bootstrap, topic, 1)  # set-up straight at the broker
    w.confluent_produce(tansu.bootstrap, topic, values)
    proc = subprocess.Popen(
        [PYTHON, str(POLLER), k.bootstrap, topic, w.unique("g")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    out: list[str] = []
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]

    def alive(what: str) -> None:
        assert proc.poll() is None, f"the consumer died ({proc.returncode}) {what}:\n{''.join(out)[-3000:]}"

    def read_until(pred: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            try:
                out.append(lines.get(timeout=0.1))
            except queue.Empty:
                pass
            alive(f"waiting for {what}")
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{''.join(out)[-3000:]}"

    try:
        read_until(lambda: sum(line.startswith("got ") for line in out) >= len(values), 60, "the records")
        _delete_topic(tansu.bootstrap, topic)
        fetched = _requests(k, FETCH)
        # fetches after the deletion: each is answered for an id Tansu no longer has
        read_until(lambda: _requests(k, FETCH) >= fetched + 5, 60, "fetches after the deletion")
        time.sleep(0.5)  # librdkafka applies a Fetch answer's leader hints on its main thread, just after
        alive("after the fetches")
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        try:
            rc = proc.wait(30)
        finally:
            proc.kill()
    while not lines.empty():
        out.append(lines.get())
    assert rc == 0, f"the consumer exited with {rc}:\n{''.join(out)[-3000:]}"
    assert [bytes.fromhex(line.split()[1]) for line in out if line.startswith("got ")] == values
    assert max(_versions_used(k, FETCH)) >= 16  # the versions with node endpoints


def _fetch_v16(port: int, topic_id: uuid.UUID) -> bytes:
    """The raw answer (size prefix included) to a sessionless Fetch v16 of partition 0 of ``topic_id``."""
    req = F.FetchRequest(
        replica_id=-1,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic_id=topic_id,
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
    )
    with RawClient(port) as c:
        c.send(request_bytes(FETCH, 16, req, correlation_id=5))
        body = c.recv_frame()
    return len(body).to_bytes(4, "big") + body


def _tail_tags(frame: bytes) -> list[int]:
    """The tags of the answer's top-level tagged section (where node endpoints are tag 0)."""
    at = response_tail.spec(FETCH, 16).find_tail(memoryview(frame), len(frame))
    entries, end = read_tagged(frame, at)
    assert end == len(frame)
    return [tag for tag, _ in entries]


@pytest.mark.timeout(240)
def test_a_deleted_ids_answer_carries_no_hint_list_like_kafkas(tansu, kafka, kgate_factory) -> None:
    """The same Fetch v16 for an id no topic has: Kafka 4.3.1 writes no tagged field at the top (it
    writes none that holds its default); Tansu writes tag 0, an empty node-endpoint list; through
    kgate the list is left out (an unknown tag keeps the length)."""
    k = kgate_factory(f"127.0.0.1:{tansu.port}", bootstrap_serves_node=True, extra={"proxy": {"drain_timeout_s": 2}})
    topic = w.unique("gone")
    w.confluent_create_topic(tansu.bootstrap, topic, 1)
    with RawClient(tansu.port) as c:
        req = MetadataRequest(
            topics=[MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False
        )
        c.send(request_bytes(3, 12, req, correlation_id=1))
        (t,) = api.decode_response(3, 12, memoryview(c.recv_frame())[5:]).topics
    _delete_topic(tansu.bootstrap, topic)
    kafkas = _fetch_v16(kafka.port, uuid.uuid4())
    assert _tail_tags(kafkas) == []
    tansus = _fetch_v16(tansu.port, t.topic_id)
    assert _tail_tags(tansus) == [0]  # the condition: if Tansu changes, this test must be looked at again
    got = _fetch_v16(k.listen_port, t.topic_id)
    assert len(got) == len(tansus)
    assert got[:-4] == tansus[:-4]
    assert _tail_tags(got) == [0x7F]
