"""Malformed requests never reach the broker (issue 7, item 10).

The upstream is a recording stand-in (a socket server that keeps every request frame it gets and
answers none): the point is what arrives there, which no real broker reports. kgate's own node
discovery also talks to it, so frames are matched by the test's correlation ids.
"""

from __future__ import annotations

import asyncio
import struct
import time

import pytest
from support import workloads as w
from support.wire import RawClient, metadata_request

from e2e.test_limits import BlackHole


class Recorder(BlackHole):
    """A BlackHole whose kept frames are read by correlation id."""

    def cids(self) -> set[int]:
        return {struct.unpack(">i", f[8:12])[0] for f in self.got}


def _forged() -> bytes:
    data = metadata_request(42, ["a-topic"], version=1)
    body_at = 4 + 10 + struct.unpack(">h", data[12:14])[0]
    return data[:body_at] + struct.pack(">i", 0x7FFFFFFF) + data[body_at + 4 :]  # 2^31-1 topics in 20 bytes


@pytest.mark.timeout(60)
@pytest.mark.parametrize("validate", [True, False], ids=["validating", "not-validating"])
def test_forged_request_is_refused_before_the_broker(kgate_factory, validate: bool) -> None:
    rec = Recorder()
    try:
        proxy: dict = {"drain_timeout_s": 1}
        if validate:
            proxy["validate_requests"] = True  # off by default (its cost: docs/performance.md)
        k = kgate_factory(f"127.0.0.1:{rec.port}", extra={"proxy": proxy})
        with RawClient(k.listen_port) as c:
            c.send(metadata_request(41, ["fine"], version=1))
            c.send(_forged())
            if validate:
                assert c.closed_by_peer(5), "kgate kept the connection of a client that sent a forged request"
        time.sleep(0.5)
        assert 41 in rec.cids(), "the valid request before the forged one must still go"
        if validate:
            assert 42 not in rec.cids(), "a forged request reached the broker"
            assert "malformed Metadata v1 request refused: does not decode" in k.log_text()
        else:
            assert 42 in rec.cids()  # the control: without validation it does reach the broker
    finally:
        rec.close()


@pytest.mark.timeout(180)
async def test_real_clients_pass_validation(tansu, kgate_factory) -> None:
    """confluent-kafka, kafka-python and aiokafka through a validating kgate with topic-policy:
    nothing real clients send is refused, nothing is lost."""
    k = kgate_factory(
        tansu.bootstrap,
        extra={
            "proxy": {"validate_requests": True, "drain_timeout_s": 1},
            "filters": [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}],
        },
    )
    topic = w.unique("val")
    values = w.payloads(300, size=2000)
    await asyncio.to_thread(w.confluent_create_topic, k.bootstrap, topic, 2)
    await asyncio.to_thread(w.confluent_produce, k.bootstrap, topic, values, **{"enable.idempotence": True})
    await asyncio.to_thread(w.kp_produce, k.bootstrap, topic, values[:50])
    await w.aio_produce(k.bootstrap, topic, values[:25])
    total = len(values) + 75
    got, _ = await asyncio.to_thread(w.confluent_consume, k.bootstrap, topic, total, w.unique("g"))
    assert sorted(got) == sorted(values + values[:50] + values[:25])
    got_kp, _ = await asyncio.to_thread(w.kp_consume, k.bootstrap, topic, total, w.unique("g"))
    assert len(got_kp) == total
    got_aio, _ = await w.aio_consume(k.bootstrap, topic, total, w.unique("g"))
    assert len(got_aio) == total
    assert "malformed" not in k.log_text()
