"""kgate offers clients every version the broker offers, and still no broker address (issue 25).

Before, kgate capped Produce at v9 and Fetch at v15 unless ``proxy.leader_hints: true``, because
the KIP-951 node endpoints at the end of newer responses meant holding them whole. Now those
responses stream through and only their tail is rewritten (proxy/response_tail.py), so the cap
is gone: ApiVersions through kgate says what the broker says (api keys 88-92 included), and
librdkafka (Fetch v16 / Produce v10 against Tansu) and the Java clients of Kafka 4.3.1 (Produce
v13 by topic id, Fetch v18) run through kgate with no loss, no duplicates and no client socket
to the broker (ConnectionWatcher). A configuration that still says ``leader_hints: false`` loads,
is warned about and caps nothing.
"""

from __future__ import annotations

import subprocess

import pytest
from support import workloads as w
from support.netconn import ConnectionWatcher
from support.wire import RawClient, api_versions_request, parse_api_versions_response

from kgate.codec import api

PRODUCE, FETCH = 0, 1


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
    """Every api key and version range the broker offers is offered (the codec knows them all)."""
    k = kgate_factory(f"127.0.0.1:{broker.port}", bootstrap_serves_node=True)
    direct, through = _api_versions(broker.port), _api_versions(k.listen_port)
    expect = {}
    for key, (lo, hi) in direct.items():
        info = api.API_INFO.get(key)
        # only where kgate must read an answer does its codec bound the range (none, with 4.3.1)
        expect[key] = (lo, min(hi, info.max_version)) if info is not None and key in (0, 1, 78, 79) else (lo, hi)
    assert through == expect
    assert through[PRODUCE][1] >= 10 and through[FETCH][1] >= 16  # no cap below KIP-951's versions


@pytest.mark.timeout(120)
def test_kafka_43_offers_share_and_streams_apis(kafka, kgate_factory) -> None:
    k = kgate_factory(kafka.bootstrap, bootstrap_serves_node=True)
    through = _api_versions(k.listen_port)
    assert through[PRODUCE][1] == 13 and through[FETCH][1] >= 17  # Produce v13: topic ids only
    for key in (76, 78, 79):  # ShareGroupHeartbeat, ShareFetch, ShareAcknowledge
        assert key in through and through[key][1] >= 1, (key, through.get(key))
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
    assert max(fetch) >= 16 and max(produce) >= 10, (fetch, produce)
    warned = "proxy.leader_hints is deprecated and has no effect" in k.log_text()
    assert warned == (leader_hints is not None)


@pytest.mark.timeout(300)
def test_java_clients_use_produce_v13_and_fetch_v18(kafka, kgate_factory) -> None:
    k = kgate_factory(kafka.bootstrap, bootstrap_serves_node=True, extra={"proxy": {"drain_timeout_s": 2}})
    topic = w.unique("java43")
    bin_dir = kafka.home / "bin"
    lines = [f"java-{i}-" + "x" * 2000 for i in range(400)]
    with ConnectionWatcher({kafka.port}) as watch:
        w.confluent_create_topic(k.bootstrap, topic, 1)
        producer = [str(bin_dir / "kafka-console-producer.sh"), "--bootstrap-server", k.bootstrap, "--topic", topic]
        subprocess.run(producer, input="\n".join(lines) + "\n", text=True, check=True, timeout=120,
                       capture_output=True, env=kafka.env)
        consumer = [str(bin_dir / "kafka-console-consumer.sh"), "--bootstrap-server", k.bootstrap, "--topic", topic,
                    "--from-beginning", "--max-messages", str(len(lines)), "--timeout-ms", "60000"]
        out = subprocess.run(consumer, text=True, timeout=120, capture_output=True, env=kafka.env)
    assert out.stdout.split() == lines, out.stderr[-2000:]
    watch.assert_clean(must_use={k.listen_port})
    fetch, produce = _versions_used(k, FETCH), _versions_used(k, PRODUCE)
    assert 13 in produce and max(fetch) >= 17, (fetch, produce)
