"""Issue 27: long-held requests through kgate (a group join) across reloads and past upstream_timeout_s.

Real brokers, kgate as a subprocess. Two behaviours a consumer group depends on:

- a reload never closes a connection: a consumer that is joining its group while the chain is
  replaced 20 times (under produce load) gets its first record no later than 10 s after it would
  without reloads, sees no error, and consumes every acknowledged record; kgate closes nothing;
- a JoinGroup the broker holds for a rebalance longer than ``upstream_timeout_s`` completes:
  the deadline is the request's own rebalance timeout plus that margin (proxy/sansio/deadlines.py).
"""

from __future__ import annotations

import copy
import signal
import socket
import threading
import time
from typing import Any

import pytest
from support import workloads as w

from e2e.test_reload import SteadyProducer, reloads, wait_for, write_config
from kgate.api import ErrorCode
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.api_keys import JOIN_GROUP, SYNC_GROUP
from kgate.codec.generated.groups.join_group import JoinGroupRequestProtocol
from kgate.codec.generated.groups.sync_group import SyncGroupRequestAssignment
from kgate.codec.headers import request_frame, response_body_offset

JOIN, SYNC = JOIN_GROUP, SYNC_GROUP
JOIN_V, SYNC_V = 5, 3  # not flexible: plain frames, and every broker here speaks them


class Member:
    """One classic group member speaking the protocol itself on its own connection: the test decides
    exactly when it (re)joins, which a client library does not let it do."""

    def __init__(self, bootstrap: str, group: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.group = group
        self.member_id = ""
        self.generation = -1
        self.cid = 0
        self.reader = FrameReader(1 << 24)

    def call(self, key: int, version: int, msg: Any) -> Any:
        self.cid += 1
        header_version = api.request_header_version(key, version)
        self.sock.sendall(request_frame(key, version, self.cid, "join-test", header_version, msg.encode(version)))
        while True:
            data = self.sock.recv(1 << 16)
            assert data, "connection closed while waiting for the answer"
            frames = self.reader.feed(data)
            if frames:
                frame = frames[0]
                offset = response_body_offset(frame, api.response_header_version(key, version))
                return api.decode_response(key, version, frame[offset:])

    def join(self) -> Any:
        """JoinGroup until it is in (a broker may first hand out a member id: MEMBER_ID_REQUIRED)."""
        for _ in range(3):
            req = api.API_INFO[JOIN].request_class(
                group_id=self.group,
                session_timeout_ms=45000,
                rebalance_timeout_ms=60000,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
            )
            req.protocols = [JoinGroupRequestProtocol(name="range", metadata=b"\x00" * 10)]
            resp = self.call(JOIN, JOIN_V, req)
            if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            assert resp.error_code == ErrorCode.NONE, resp
            self.member_id, self.generation = resp.member_id, resp.generation_id
            return resp
        raise AssertionError("no member id after three JoinGroups")

    def sync(self, members: list[str]) -> Any:
        req = api.API_INFO[SYNC].request_class(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )
        req.assignments = [SyncGroupRequestAssignment(member_id=m, assignment=b"") for m in members]
        return self.call(SYNC, SYNC_V, req)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.timeout(120)
def test_a_join_held_longer_than_upstream_timeout_completes(kafka, kgate_factory) -> None:
    """upstream_timeout_s 3; Kafka holds a joining member's JoinGroup ~6 s for the member already
    in the group, which rejoins late. Before per-request deadlines kgate cut it at 3 s."""
    k = kgate_factory(kafka.bootstrap, extra={"proxy": {"upstream_timeout_s": 3, "drain_timeout_s": 5}})
    group = w.unique("slow-join")
    first = Member(kafka.bootstrap, group)  # the member already in the group: straight to the broker
    joined = first.join()
    assert joined.leader == first.member_id
    assert first.sync([first.member_id]).error_code == ErrorCode.NONE

    late = Member(k.bootstrap, group)  # through kgate: its JoinGroup waits for ``first`` to rejoin
    outcome: dict[str, Any] = {}

    def join_late() -> None:
        began = time.monotonic()
        try:
            outcome["resp"] = late.join()
        except Exception as exc:  # asserted below, in the test's thread
            outcome["error"] = exc
        outcome["took"] = time.monotonic() - began

    thread = threading.Thread(target=join_late, daemon=True)
    thread.start()
    time.sleep(6.5)  # the broker holds the late JoinGroup while ``first`` has not rejoined
    assert "took" not in outcome, f"the JoinGroup was answered before the rebalance could end: {outcome}"
    again = first.join()
    thread.join(30)
    assert "error" not in outcome, f"{outcome['error']!r}\n{k.log_text()[-3000:]}"
    assert outcome["resp"].generation_id == again.generation_id
    assert outcome["took"] >= 6, outcome
    assert "broker did not answer" not in k.log_text()
    first.close()
    late.close()


@pytest.mark.timeout(180)
def test_a_consumer_joins_when_the_join_outlasts_upstream_timeout(tansu, kgate_factory) -> None:
    """Tansu answers a JoinGroup only after half the member's session timeout (~6 s here); with
    upstream_timeout_s 3 the consumer must still join through kgate (its JoinGroup's rebalance
    timeout, 300 s by default, is its deadline)."""
    from confluent_kafka import Producer

    k = kgate_factory(tansu.bootstrap, extra={"proxy": {"upstream_timeout_s": 3, "drain_timeout_s": 5}})
    topic = w.unique("slow-join")
    w.confluent_create_topic(tansu.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": tansu.bootstrap})
    producer.produce(topic, value=b"first")
    assert producer.flush(30) == 0
    delay, consumer, errors, first = first_record_delay(k.bootstrap, topic, session_timeout_ms=12_000)
    consumer.close()
    assert not errors, errors[:3]
    assert first == b"first"
    assert delay > 4, f"the join took {delay:.1f}s, not longer than upstream_timeout_s 3: nothing was shown"
    log = k.log_text()
    assert "broker did not answer" not in log, log[-3000:]
    print(f"joined and read the first record after {delay:.1f}s with upstream_timeout_s 3")


# -- a consumer joining while the chain is replaced, 20 times -------------------------------------
#: Tansu answers its JoinGroup after half of this (10 s): room for most of the twenty reloads
JOIN_SESSION_MS = 20_000


def first_record_delay(
    bootstrap: str, topic: str, during: Any = None, *, session_timeout_ms: int
) -> tuple[float, Any, list[Any], bytes]:
    """Subscribe a new group to ``topic`` (from the start) and time its first record; ``during(t0)``
    runs meanwhile in a thread. Returns (seconds to the first record, the consumer, errors, the record).

    Tansu holds a JoinGroup for half the member's ``session_timeout_ms`` (librdkafka's default, 45 s,
    made every join 23 s): the tests choose how long a join lasts."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": w.unique("joiner"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 500,
            "session.timeout.ms": session_timeout_ms,
        }
    )
    errors: list[Any] = []
    t0 = time.monotonic()
    consumer.subscribe([topic])
    side = None
    if during is not None:
        side = threading.Thread(target=during, args=(t0,), daemon=True)
        side.start()
    while True:
        assert time.monotonic() - t0 < 90, f"no record in 90 s; errors {errors[:3]}"
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            errors.append(msg.error())
            continue
        delay = time.monotonic() - t0
        break
    if side is not None:
        side.join(120)
    return delay, consumer, errors, msg.value()


def drain(consumer: Any, first: bytes, n: int, errors: list[Any], timeout: float = 60) -> list[bytes]:
    got = [first]
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            errors.append(msg.error())
        else:
            got.append(msg.value())
    consumer.close()
    return got


def closes_by_kgate(k: Any) -> float:
    return sum(v for _labels, v in k.metric_values("kgate_connections_closed_on_error_total"))


@pytest.mark.timeout(300)
def test_twenty_reloads_while_a_consumer_joins_close_nothing_and_lose_nothing(tansu, kgate_factory) -> None:
    k = kgate_factory(tansu.bootstrap, admin=True)
    config = copy.deepcopy(k.config)
    topic = w.unique("reload-join")
    w.confluent_create_topic(k.bootstrap, topic, partitions=1)
    config["filters"] = [{"name": "topic-policy", "config": {"deny": ["reload-never-0*"]}}]
    write_config(k, config)
    k.signal(signal.SIGHUP)
    wait_for(lambda: reloads(k, "success") == 1, message=k.log_text()[-3000:])

    producer = SteadyProducer(k.bootstrap, topic)
    try:
        producer.wait_acked(300)
        baseline, quiet, errors, _first = first_record_delay(k.bootstrap, topic, session_timeout_ms=JOIN_SESSION_MS)
        assert not errors, errors[:3]
        quiet.close()
        started: list[float] = []
        done: list[float] = []  # when each reload had succeeded

        def twenty_reloads(t0: float) -> None:
            started.append(t0)
            time.sleep(max(0.0, t0 + 1 - time.monotonic()))  # the first one 1 s into the join
            for i in range(1, 21):
                config["filters"] = [{"name": "topic-policy", "config": {"deny": [f"reload-never-{i}*"]}}]
                write_config(k, config)
                k.signal(signal.SIGHUP)
                wait_for(lambda i=i: reloads(k, "success") == 1 + i, message=k.log_text()[-3000:])
                done.append(time.monotonic())
                time.sleep(0.2)

        delay, consumer, errors, first = first_record_delay(
            k.bootstrap, topic, during=twenty_reloads, session_timeout_ms=JOIN_SESSION_MS
        )
        producer.wait_acked(300)
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    got = drain(consumer, first, len(producer.acked), errors)
    print(
        f"first record: {baseline:.1f}s without reloads, {delay:.1f}s with 20 reloads "
        f"({sum(1 for t in done if t - started[0] < delay)} before it); {len(got)} records"
    )
    assert not errors, errors[:5]
    assert reloads(k, "success") == 21
    assert reloads(k, "failure") == 0
    assert delay <= baseline + 10, f"first record after {delay:.1f}s with reloads, {baseline:.1f}s without"
    during_join = sum(1 for t in done if t - started[0] < delay)
    assert during_join >= 5, f"only {during_join} of the reloads came before the first record ({delay:.1f}s)"
    w.assert_exact(producer.acked, got)  # every acknowledged record, once, in order
    log = k.log_text(tail=10_000_000)
    assert closes_by_kgate(k) == 0, log[-3000:]
    assert "closing client" not in log
    assert "reload deadline" not in log
    # every replaced chain was let go once its last exchange ended: 21 of them (the first reload's too)
    wait_for(
        lambda: k.log_text(tail=10_000_000).count("the replaced filter chain's last exchange ended") == 21,
        30,
        "a replaced chain was never released",
    )
