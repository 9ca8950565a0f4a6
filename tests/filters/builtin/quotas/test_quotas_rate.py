"""The quota filter's rate math and rule precedence, with an injected clock (no sockets, no sleeps)."""

from __future__ import annotations

import ipaddress
import json
import logging
from typing import Any

import pytest

from kgate.api import FORWARD, ApiKey, ConnectionInfo, FilterConfigError, Forward
from kgate.codec import api
from kgate.filters.builtin.quotas.filter import Quotas
from kgate.filters.builtin.quotas.rate import (
    CONNECTIONS,
    FETCH_BYTES,
    PRODUCE_BYTES,
    REQUESTS,
    TokenBucket,
    client_ip,
    frame_client_id,
    parse_rules,
    resolve,
)
from kgate.proxy.control.logs import JsonFormatter
from kgate.testing import FakeContext


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- token bucket ------------------------------------------------------------------------------
def test_bucket_allows_a_burst_then_throttles_for_the_time_the_debt_takes_to_repay() -> None:
    b = TokenBucket(rate=1000.0, burst=1000.0, now=0.0)
    assert b.record(1000, 0.0) == 0.0  # a full bucket: one burst passes untouched
    assert b.record(500, 0.0) == pytest.approx(0.5)  # 500 bytes of debt at 1000/s
    assert b.throttle(0.25) == pytest.approx(0.25)  # refilled for 0.25 s
    assert b.throttle(0.5) == 0.0
    assert b.throttle(10.0) == 0.0
    assert b.available(10.0) == pytest.approx(1000.0)  # never more than the burst


def test_bucket_holds_a_flat_out_sender_to_the_rate_over_any_long_interval() -> None:
    b = TokenBucket(rate=1_000_000.0, burst=1_000_000.0, now=0.0)
    now, sent = 0.0, 0
    while now < 12.0:  # send 64 KiB whenever not throttled, waiting out each throttle
        sent += 65536
        now += b.record(65536, now) or 0.001
    assert sent <= 1_000_000 * (12.0 + 1.0) + 65536  # rate * (T + burst): the bound the docs state
    assert sent >= 1_000_000 * 12.0


def test_bucket_rejects_a_zero_rate() -> None:
    with pytest.raises(ValueError, match="rate must be positive"):
        TokenBucket(0, 1, 0)


# -- rules ---------------------------------------------------------------------------------------
RULES = [
    {"client_id": "*", "produce_bytes_per_s": 1},  # 0: default client id
    {"client_id": "heavy", "produce_bytes_per_s": 2},  # 1
    {"principal": "*", "produce_bytes_per_s": 3},  # 2: default user
    {"principal": "*", "client_id": "heavy", "produce_bytes_per_s": 4},  # 3
    {"principal": "alice", "produce_bytes_per_s": 5},  # 4
    {"principal": "alice", "client_id": "*", "produce_bytes_per_s": 6},  # 5
    {"principal": "alice", "client_id": "heavy", "produce_bytes_per_s": 7},  # 6
    {"principal": "*", "client_id": "*", "produce_bytes_per_s": 8},  # 7
    {"client_cidr": "10.0.0.0/8", "produce_bytes_per_s": 9, "fetch_bytes_per_s": 90},  # 8
    {"client_cidr": "10.1.0.0/16", "client_id": "heavy", "produce_bytes_per_s": 10},  # 9
]


def _winner(principal: str | None, client_id: str | None, ip: str = "192.168.0.1", kind: int = PRODUCE_BYTES) -> int:
    found = resolve(parse_rules(RULES), principal, client_id, ipaddress.ip_address(ip))[kind]
    assert found is not None
    return found[0].index


def test_precedence_follows_kafkas_order_user_then_client_id_with_defaults() -> None:
    # Kafka: user+client > user+<default> client > user > <default> user+client > <default> user+<default>
    # client > <default> user > client > <default> client
    assert _winner("alice", "heavy") == 6
    assert _winner("alice", "other") == 5
    assert _winner("bob", "heavy") == 3
    assert _winner("bob", "other") == 7
    assert _winner(None, "heavy", ip="10.1.2.3") == 9  # client id + CIDR beats client id alone
    assert _winner(None, "heavy") == 1
    assert _winner(None, "other", ip="10.2.0.1") == 0  # the CIDR comes after every client id rule
    assert _winner(None, "other") == 0
    # ... and before a rule that names nothing; the longer prefix first
    rules = parse_rules([{"requests_per_s": 1}, RULES[8], {"client_cidr": "10.2.0.0/16", "requests_per_s": 2}])
    found = resolve(rules, None, "x", ipaddress.ip_address("10.2.0.1"))[REQUESTS]
    assert found is not None
    assert found[0].index == 2
    found = resolve(rules, None, "x", ipaddress.ip_address("10.3.0.1"))[PRODUCE_BYTES]
    assert found is not None
    assert found[0].index == 1
    found = resolve(rules, None, "x", ipaddress.ip_address("11.0.0.1"))[REQUESTS]
    assert found is not None
    assert found[0].index == 0


def test_each_kind_takes_the_most_specific_rule_that_sets_it() -> None:
    # rule 9 (most specific) sets no fetch limit: rule 8 (the /8 block) supplies it
    assert _winner(None, "heavy", ip="10.1.2.3", kind=FETCH_BYTES) == 8
    assert resolve(parse_rules(RULES), None, "heavy", None)[REQUESTS] is None


def test_exact_values_share_one_budget_defaults_give_each_value_its_own() -> None:
    rules = parse_rules(RULES)
    a = resolve(rules, "bob", "x", None)[PRODUCE_BYTES]
    b = resolve(rules, "carol", "y", None)[PRODUCE_BYTES]
    assert a is not None
    assert b is not None
    assert a[1] != b[1]
    c = resolve(rules, None, "heavy", None)[PRODUCE_BYTES]
    d = resolve(rules, None, "heavy", ipaddress.ip_address("1.2.3.4"))[PRODUCE_BYTES]
    assert c is not None
    assert d is not None
    assert c[1] == d[1]


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("x", "rules: expected a list"),
        ([{"client_id": "a"}], "rules[0]: sets no limit"),
        ([{"client_id": "a", "produce_bytes_per_s": -1}], "rules[0].produce_bytes_per_s: expected a positive number"),
        ([{"client_id": "a", "produce_bytes_per_s": True}], "rules[0].produce_bytes_per_s"),
        ([{"client_id": "", "requests_per_s": 1}], "rules[0].client_id: expected a non-empty string"),
        ([{"client_cidr": "10.0.0.300/8", "requests_per_s": 1}], "rules[0].client_cidr:"),
        ([{"requests_per_s": 1}, {"user": "x", "requests_per_s": 1}], "rules[1]: unknown keys ['user']"),
    ],
)
def test_config_errors_name_the_key(rules: Any, message: str) -> None:
    with pytest.raises(FilterConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Quotas.validate_config({"rules": rules})


def test_config_errors_outside_the_rules() -> None:
    with pytest.raises(FilterConfigError, match="rules: required"):
        Quotas.validate_config({})
    with pytest.raises(FilterConfigError, match="instances: expected an integer >= 1"):
        Quotas.validate_config({"rules": [], "instances": 0})
    with pytest.raises(FilterConfigError, match=r"unknown keys \['rate'\]"):
        Quotas.validate_config({"rules": [], "rate": 1})


def test_addresses_and_header_client_ids() -> None:
    assert str(client_ip("10.1.2.3:9092")) == "10.1.2.3"
    assert str(client_ip("[::1]:9092")) == "::1"
    assert client_ip("?") is None
    frame = (30).to_bytes(4, "big") + b"\x00\x03\x00\x0c\x00\x00\x00\x07" + b"\x00\x05heavy" + b"\x00" * 13
    assert frame_client_id(frame) == "heavy"
    assert frame_client_id([memoryview(frame[:20]), frame[20:]]) == "heavy"
    null = frame[:12] + b"\xff\xff" + frame[19:]
    assert frame_client_id(null) is None
    assert frame_client_id(frame[:16]) is None  # cut short


# -- the filter, with a fake clock ------------------------------------------------------------------
class Info(ConnectionInfo):
    """A connection's info as kgate's carrier makes it (proxy/connection.ClientInfo), recording pauses."""

    __slots__ = ("pauses", "quota_client")

    def __init__(self, client_id: str) -> None:
        super().__init__(client_address="10.0.0.1:5000", virtual_cluster="c", client_id=client_id)
        self.pauses: list[float] = []
        self.quota_client: object = None

    def pause_reading_for(self, seconds: float) -> None:
        self.pauses.append(seconds)


def _quotas(clock: Clock, **config: Any) -> Quotas:
    return Quotas(Quotas.validate_config({"rules": RULES_SMALL, **config}), clock=clock)


RULES_SMALL = [
    {"client_id": "heavy", "produce_bytes_per_s": 1000, "fetch_bytes_per_s": 1000},
    {"client_id": "chatty", "requests_per_s": 2, "connections_per_s": 1},
]


def _produce(q: Quotas, info: Info, cid: int, size: int) -> Any:
    ctx = FakeContext(ApiKey.PRODUCE, 9, connection=info, correlation_id=cid)
    ctx.frame_bytes = size  # type: ignore[attr-defined]  # set by the core (proxy/sansio/context.py)
    assert q.produce(ctx, None) is FORWARD
    return ctx


def _produce_answer(q: Quotas, ctx: FakeContext, broker_ms: int = 0) -> Any:
    response = api.API_INFO[ApiKey.PRODUCE].response_class(throttle_time_ms=broker_ms)
    return q.produce_answer(ctx.for_response(), response)


def test_produce_is_charged_as_read_and_mutes_the_connection_for_the_debt() -> None:
    clock = Clock()
    q = _quotas(clock)
    info = Info("heavy")
    ctx = _produce(q, info, 1, 1000)  # the burst
    assert info.pauses == []
    ctx2 = _produce(q, info, 2, 500)
    assert info.pauses == [pytest.approx(0.5)]
    _produce(q, info, 2, 500)  # the same request seen again (peeked, then whole): charged once
    assert len(info.pauses) == 1
    clock.now += 0.2
    answer = _produce_answer(q, ctx2)
    assert isinstance(answer, Forward)
    assert answer.message.throttle_time_ms == 300
    assert _produce_answer(q, ctx, broker_ms=900) is FORWARD  # the broker's larger value stays
    clock.now += 1
    assert _produce_answer(q, ctx2) is FORWARD  # repaid: nothing to add
    assert q.throttled[("", "heavy")] == pytest.approx(0.5)


def test_instances_divide_the_rate_and_the_throttle_is_capped() -> None:
    clock = Clock()
    q = _quotas(clock, instances=4, max_throttle_ms=2000)
    info = Info("heavy")
    _produce(q, info, 1, 250)  # 1000/4 = 250 per second: the whole burst
    _produce(q, info, 2, 250)
    assert info.pauses == [pytest.approx(1.0)]
    _produce(q, info, 3, 10_000)
    assert info.pauses[-1] == 2.0


def test_unlimited_clients_are_not_touched() -> None:
    q = _quotas(Clock())
    info = Info("free")
    ctx = _produce(q, info, 1, 10_000_000)
    assert info.pauses == []
    assert not ctx.state


class Exchange:
    def __init__(self, api_key: int, req_bytes: int = 100) -> None:
        self.api_key = int(api_key)
        self.api_version = 12
        self.req = b""
        self.req_bytes = req_bytes


def test_a_fetch_answer_is_charged_by_its_hook_and_carries_the_throttle() -> None:
    clock = Clock()
    q = _quotas(clock)
    heavy = Info("heavy")
    ctx = FakeContext(ApiKey.FETCH, 12, connection=heavy)
    q.fetch(ctx, api.API_INFO[ApiKey.FETCH].request_class(max_bytes=500))
    info = api.API_INFO[ApiKey.FETCH]
    from kgate.codec.generated.data.fetch import FetchableTopicResponse, PartitionData

    answer = info.response_class(
        responses=[FetchableTopicResponse(topic="t", partitions=[PartitionData(records=b"r" * 3000)])]
    )
    result = q.fetch_answer(ctx.for_response(), answer)
    assert heavy.pauses == [pytest.approx(2.0)]  # 3000 bytes against a 1000 burst at 1000/s
    assert isinstance(result, Forward)
    assert result.message.throttle_time_ms == 2000
    free = FakeContext(ApiKey.FETCH, 12, connection=Info("free"))
    assert q.fetch(free, api.API_INFO[ApiKey.FETCH].request_class(max_bytes=500)) is FORWARD
    assert not free.state


def test_requests_and_connections_are_counted_after_the_answer() -> None:
    clock = Clock()
    q = _quotas(clock)
    chatty = Info("chatty")
    for _ in range(3):
        q.record(Exchange(ApiKey.METADATA), chatty, b"x", 10, 0)  # type: ignore[arg-type]
    assert chatty.pauses == [pytest.approx(0.5)]  # the third request in a 2/s budget
    second = Info("chatty")
    second.client_address = "10.0.0.1:5001"
    q.record(Exchange(ApiKey.METADATA), second, b"x", 10, 0)  # type: ignore[arg-type]
    third = Info("chatty")
    third.client_address = "10.0.0.1:5002"
    q.record(Exchange(ApiKey.METADATA), third, b"x", 10, 0)  # type: ignore[arg-type]
    assert third.pauses
    assert max(third.pauses) >= 1.0


def test_a_fetch_limited_client_asks_for_at_most_one_burst() -> None:
    q = _quotas(Clock())
    request = api.API_INFO[ApiKey.FETCH].request_class(max_bytes=50_000_000)
    ctx = FakeContext(ApiKey.FETCH, 12, connection=Info("heavy"))
    result = q.fetch(ctx, request)
    assert isinstance(result, Forward)
    assert result.message.max_bytes == 1000
    assert q.fetch(FakeContext(ApiKey.FETCH, 12, connection=Info("free")), request) is FORWARD


def test_the_throttle_line_carries_structured_fields(caplog: pytest.LogCaptureFixture) -> None:
    q = _quotas(Clock())
    info = Info("heavy")
    with caplog.at_level(logging.INFO, logger="kgate.quotas"):
        _produce(q, info, 1, 5000)
        _produce(q, info, 2, 5000)  # within LOG_EVERY_S: no second line
    (record,) = [r for r in caplog.records if r.name == "kgate.quotas"]
    line = json.loads(JsonFormatter().format(record))
    assert line["client_id"] == "heavy"
    assert line["decision"] == "throttle"
    assert line["api"] == "Produce"
    assert line["resource"] == "produce_bytes_per_s"
    assert line["connection"] == "10.0.0.1:5000"
    assert line["cluster"] == "c"
    assert line["throttle_ms"] == 4000


def test_kind_constants_follow_the_config_names() -> None:
    assert (PRODUCE_BYTES, FETCH_BYTES, REQUESTS, CONNECTIONS) == (0, 1, 2, 3)
