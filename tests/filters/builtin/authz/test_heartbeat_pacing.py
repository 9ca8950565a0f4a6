"""Refused Consumer/ShareGroupHeartbeats are paced: a member refused again gets its answer late.

The Java client heartbeats a refused (JOINING) member again as soon as it is answered; kgate answers
a repeat after ``refused_heartbeat_delay_ms`` (filters/builtin/authz/heartbeat_pacing.py). Through the
filter kit with spec-built frames; the real client's heartbeat count is in
tests/e2e/test_kafka43_java.py::test_share_consumer_of_denied_topic_gets_nothing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.spec_tools import AUTHZ, FakeContext, response_through_frames, through_frames

from kgate import testing
from kgate.api import FORWARD, ConnectionInfo, FilterConfigError, Respond
from kgate.codec.generated.api_keys import CONSUMER_GROUP_HEARTBEAT as CGH
from kgate.codec.generated.api_keys import SHARE_GROUP_HEARTBEAT as SGH
from kgate.codec.generated.groups.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kgate.codec.generated.share.share_group_heartbeat import ShareGroupHeartbeatRequest
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.topic_policy import TopicPolicy


def _cgh(names: list[str] | None, member: str = "m") -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=names
    )


def _sgh(names: list[str] | None, member: str = "m") -> ShareGroupHeartbeatRequest:
    return ShareGroupHeartbeatRequest(group_id="g", member_id=member, member_epoch=0, subscribed_topic_names=names)


def _policy(delay_ms: int | None = 50) -> TopicPolicy:
    config: dict[str, Any] = {"deny": ["secret-*"]}
    if delay_ms is not None:
        config["refused_heartbeat_delay_ms"] = delay_ms
    return TopicPolicy(TopicPolicy.validate_config(config))


def _authorizer(delay_ms: int = 50) -> Authorizer:
    rules = [{"allow": "all", "topic": "*"}, {"allow": "all", "group": "*"}, {"deny": "all", "topic": "secret-pay"}]
    config = {"rules": rules, "default": "deny", "refused_heartbeat_delay_ms": delay_ms}
    return Authorizer(Authorizer.validate_config(config))


CASES = [(CGH, 0, _cgh), (CGH, 1, _cgh), (SGH, 1, _sgh)]


async def _answer(f: Any, api_key: int, version: int, request: Any, address: str = "127.0.0.1:50000") -> tuple:
    """(the error code the client sees, its throttle_time_ms, seconds until it was answered, was it late)."""
    conn = ConnectionInfo(client_address=address, virtual_cluster="test", client_id="c")
    started = time.monotonic()
    ctx = testing.FakeContext(api_key, version, connection=conn)
    result = f.check(ctx, through_frames(api_key, version, request))
    late = hasattr(result, "__await__")
    if late:
        result = await result
    assert isinstance(result, Respond), result
    out = response_through_frames(api_key, version, result.message)
    return out.error_code, out.throttle_time_ms, time.monotonic() - started, late


@pytest.mark.parametrize("which", ["topic-policy", "authorizer"])
@pytest.mark.parametrize(("api_key", "version", "make"), CASES)
async def test_a_member_refused_again_is_answered_after_the_delay(which, api_key, version, make) -> None:
    f = _policy(200) if which == "topic-policy" else _authorizer(200)
    denied = make(["orders", "secret-pay"])
    code, throttle, took, late = await _answer(f, api_key, version, denied)
    assert (code, throttle, late) == (AUTHZ, 0, False)  # the first refusal: at once
    for _ in range(2):  # the client's next heartbeats, sent as soon as it was answered
        code, throttle, took, late = await _answer(f, api_key, version, denied)
        assert (code, throttle, late) == (AUTHZ, 200, True)  # still the refusal, now reported as throttled
        assert took >= 0.19, took
    # another member, or the same member id from another client, is refused at once the first time
    assert (await _answer(f, api_key, version, make(["secret-pay"], member="m2")))[3] is False
    assert (await _answer(f, api_key, version, denied, address="127.0.0.2:1"))[3] is False
    # an allowed subscription, or a heartbeat that repeats none, goes on at once (nothing paced)
    for names in (["orders"], None):
        ctx = FakeContext(api_key, version)
        assert f.check(ctx, through_frames(api_key, version, make(names))) is FORWARD


@pytest.mark.parametrize(("api_key", "version", "make"), CASES)
async def test_delay_zero_answers_every_refusal_at_once(api_key, version, make) -> None:
    f = _policy(0)
    for _ in range(3):
        assert (await _answer(f, api_key, version, make(["secret-pay"])))[1:4:2] == (0, False)


def test_group_refusals_are_not_paced() -> None:
    """GROUP_AUTHORIZATION_FAILED is fatal to the Java member (it stops heartbeating): answered at once."""
    rules = [{"allow": "all", "topic": "*"}]
    f = Authorizer(Authorizer.validate_config({"rules": rules, "default": "deny", "refused_heartbeat_delay_ms": 50}))
    for _ in range(3):
        result = f.check(FakeContext(SGH, 1), through_frames(SGH, 1, _sgh(["orders"])))
        assert isinstance(result, Respond)


@pytest.mark.parametrize("bad", [-1, 10_001, 1.5, "1000", True])
def test_refused_heartbeat_delay_ms_is_validated(bad: object) -> None:
    for cls, base in ((TopicPolicy, {"deny": ["x"]}), (Authorizer, {"rules": []})):
        with pytest.raises(FilterConfigError, match="refused_heartbeat_delay_ms"):
            cls.validate_config({**base, "refused_heartbeat_delay_ms": bad})


def test_the_default_delay_is_one_second() -> None:
    for f in (TopicPolicy(TopicPolicy.validate_config({"deny": ["x"]})), Authorizer(Authorizer.validate_config({}))):
        pacer = f._admin._pacer if isinstance(f, TopicPolicy) else f._pacer
        assert pacer.delay_ms == 1000
