"""A client that leaves while its requests wait behind a suspended filter loses none of them.

A broker processes the requests it has read from a client even if the client then disconnects;
kgate, having read them, does the same: the suspended request and the ones queued behind it are
finished and sent upstream before the upstream connection closes. acks=0 Produce makes this
visible: the client expects no answer and may close right after sending.

kgate runs in-process (so the test filter can be defined here) in front of a real Tansu; the
client is a raw socket, so that the close comes exactly after the last byte.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.inproc_kgate import InprocKgate, make_config
from support.wire import produce_request

from kgate.api import FORWARD, ApiKey, Filter, FilterContext, on_request
from kgate.filters.registry import register_filter

HOLD_S = 0.5


class HoldFirstProduce(Filter):
    """Suspends the first Produce of each topic named ``held-*`` for HOLD_S, then forwards it."""

    name = "test-hold-first-produce"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.seen: set[str] = set()

    @on_request(ApiKey.PRODUCE)
    def produce(self, ctx: FilterContext, request: Any) -> Any:
        name = request.topic_data[0].name
        if name.startswith("held-") and name not in self.seen:
            self.seen.add(name)
            return self._hold()
        return FORWARD

    async def _hold(self) -> Any:
        await asyncio.sleep(HOLD_S)
        return FORWARD


register_filter("test-hold-first-produce", HoldFirstProduce)


@pytest.fixture
def kgate(tansu):
    k = InprocKgate(make_config(tansu.bootstrap, [{"name": "test-hold-first-produce"}])).start()
    yield k
    k.stop()


def _values(bootstrap: str, topic: str, expect: int, timeout: float = 10.0) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expect and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.5):
                if not m.error():
                    got.append(m.value())
    finally:
        c.close()
    return got


def test_acks0_produces_queued_behind_a_suspended_one_survive_the_client_leaving(tansu, kgate) -> None:
    topic = f"held-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})  # kept alive until its futures are done
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(10)
    frames = [produce_request(i + 1, topic, 0, [f"m{i}".encode()], acks=0) for i in range(3)]
    with socket.create_connection(("127.0.0.1", kgate.port), timeout=5) as s:
        s.sendall(b"".join(frames))  # the first is suspended; the other two queue behind it
        time.sleep(0.05)  # kgate has read them all
    # the client is gone before the filter lets the first one go
    got = _values(tansu.bootstrap, topic, 3, timeout=HOLD_S + 10)
    assert got == [b"m0", b"m1", b"m2"]  # all of them, in order
    deadline = time.monotonic() + 5
    while kgate.proxy.clusters[0].connections and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.05)
    assert not kgate.proxy.clusters[0].connections  # type: ignore[union-attr]  # and then it closed
