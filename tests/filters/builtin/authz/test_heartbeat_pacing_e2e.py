"""Paced heartbeat refusals through a running kgate (topic-policy in front of Tansu).

The refusal never goes upstream, so Tansu (no KIP-848 groups) is only there for kgate to start
against. A member refused again waits ``refused_heartbeat_delay_ms`` for its answer, reported as
``throttle_time_ms``; kgate stopped while such an answer waits exits cleanly. The real Java clients'
heartbeat counts are in tests/e2e/test_kafka43_java.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from kgate.codec.generated.groups import consumer_group_heartbeat as cgh
from kgate.proxy.carrier.upstream_client import UpstreamClient

AUTHZ = 29  # TOPIC_AUTHORIZATION_FAILED
DELAY_MS = 700


def _heartbeat(member: str) -> cgh.ConsumerGroupHeartbeatRequest:
    return cgh.ConsumerGroupHeartbeatRequest(
        group_id="g-paced",
        member_id=member,
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=["secret-pay"],
        topic_partitions=[],
    )


@pytest.mark.timeout(120)
async def test_repeated_refusal_waits_and_kgate_stops_cleanly_meanwhile(tansu, kgate_factory) -> None:
    config = {"deny": ["secret-*"], "refused_heartbeat_delay_ms": DELAY_MS}
    k = kgate_factory(tansu.bootstrap, extra={"filters": [{"name": "topic-policy", "config": config}]})
    c = UpstreamClient(lambda: [("127.0.0.1", k.listen_port)], client_id="paced")
    try:
        answers = []
        for _ in range(3):  # a Java member in JOINING: the next heartbeat as soon as the last is answered
            started = time.monotonic()
            _v, resp = await c.request(68, _heartbeat("m1"), 0)
            answers.append((resp.error_code, resp.throttle_time_ms, time.monotonic() - started))
        assert [a[:2] for a in answers] == [(AUTHZ, 0), (AUTHZ, DELAY_MS), (AUTHZ, DELAY_MS)], answers
        assert answers[0][2] < DELAY_MS / 1000, answers  # the first refusal: at once
        assert all(a[2] >= DELAY_MS / 1000 - 0.02 for a in answers[1:]), answers
        # another member's first refusal is not held up by the first member's
        started = time.monotonic()
        _v, resp = await c.request(68, _heartbeat("m2"), 0)
        assert (resp.error_code, resp.throttle_time_ms) == (AUTHZ, 0)
        assert time.monotonic() - started < DELAY_MS / 1000
        # kgate stopped while a paced answer waits: it exits 0 (no traceback: kgate_factory's teardown)
        waiting = asyncio.ensure_future(c.request(68, _heartbeat("m1"), 0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        rc = await asyncio.to_thread(k.stop_and_check)
        assert rc == 0, k.log_text(tail=5000)
        await asyncio.gather(waiting, return_exceptions=True)  # answered in the drain, or the connection closed
    finally:
        c.close()
