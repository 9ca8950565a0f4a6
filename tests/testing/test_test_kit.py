"""kgate.testing, the kit plugin authors test with: the scripted context and the frame helpers.

Its pytest fixtures (Tansu + kgate subprocesses) are exercised by the example plugin's own
end-to-end test, which tests/examples runs.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kgate.api import DROP, FORWARD, ApiKey, ErrorCode, FilterContext, TopicNameError, respond
from kgate.codec.generated.data.fetch import FetchPartition, FetchRequest, FetchTopic
from kgate.codec.generated.data.metadata import MetadataResponse
from kgate.testing import FakeContext, request_class, round_trip_request, round_trip_response, run_hook

KNOWN, LATE, GONE, FLAKY = (uuid.uuid4() for _ in range(4))


def context(**kw: Any) -> FakeContext:
    failed = TopicNameError(-1, "broker unreachable", True)
    return FakeContext(ApiKey.FETCH, 13, cache={KNOWN: "orders"}, cluster={LATE: "orders-eu", FLAKY: failed}, **kw)


def test_it_is_a_filter_context() -> None:
    ctx: FilterContext = context(client_id="svc-a")
    assert (ctx.api_key, ctx.api_version, ctx.connection.client_id) == (ApiKey.FETCH, 13, "svc-a")


async def test_names_come_from_the_cache_then_the_cluster() -> None:
    ctx = context()
    assert ctx.cached_topic_name(KNOWN) == "orders"
    assert ctx.cached_topic_name(LATE) is None
    assert await ctx.topic_names([KNOWN]) == {KNOWN: "orders"}
    assert ctx.lookups == []  # a cache hit asks nobody
    got = await ctx.topic_names([KNOWN, LATE, GONE, FLAKY])
    assert ctx.lookups == [[LATE, GONE, FLAKY]]
    assert got[LATE] == "orders-eu"
    gone, flaky = got[GONE], got[FLAKY]
    assert isinstance(gone, TopicNameError)
    assert gone.code == ErrorCode.UNKNOWN_TOPIC_ID
    assert not gone.retriable
    assert isinstance(flaky, TopicNameError)
    assert flaky.retriable
    assert ctx.cached_topic_name(LATE) == "orders-eu"  # learned, as kgate's cache learns


async def test_send_request_answers_as_scripted_and_records() -> None:
    boom = ConnectionError("upstream down")
    ctx = context(
        upstream={
            ApiKey.METADATA: MetadataResponse(),
            ApiKey.LIST_GROUPS: lambda m: ("echo", m),
            ApiKey.DESCRIBE_GROUPS: boom,
        }
    )
    assert isinstance(await ctx.send_request(ApiKey.METADATA, "req"), MetadataResponse)
    assert await ctx.send_request(ApiKey.LIST_GROUPS, "x", version=4) == ("echo", "x")
    with pytest.raises(ConnectionError):
        await ctx.send_request(ApiKey.DESCRIBE_GROUPS, "y")
    with pytest.raises(AssertionError, match="no scripted upstream answer for api key 32"):
        await ctx.send_request(ApiKey.DESCRIBE_CONFIGS, "z")
    assert [(k, v) for k, _m, v in ctx.sent] == [(3, None), (16, 4), (15, None), (32, None)]


def test_the_response_context_shares_the_exchange() -> None:
    ctx = context(request="the request")
    ctx.state["seen"] = 1
    rctx = ctx.for_response()
    assert rctx.request == "the request"
    assert rctx.state is ctx.state
    assert rctx.connection is ctx.connection


def test_round_trips_go_through_real_frames() -> None:
    req = FetchRequest(max_wait_ms=500, topics=[FetchTopic(topic_id=KNOWN, partitions=[FetchPartition(partition=2)])])
    back = round_trip_request(ApiKey.FETCH, 13, req)
    assert back is not req
    assert back.topics[0].topic_id == KNOWN
    assert back.topics[0].partitions[0].partition == 2
    # v12 has names, not ids: the id is not on the wire, so it does not come back
    assert round_trip_request(ApiKey.FETCH, 12, req).topics[0].topic_id.int == 0
    assert isinstance(request_class(ApiKey.FETCH)(), FetchRequest)
    resp = MetadataResponse(throttle_time_ms=7)
    assert round_trip_response(ApiKey.METADATA, 12, resp).throttle_time_ms == 7


async def test_run_hook_calls_like_the_chain() -> None:
    async def suspends(ctx: Any, msg: Any) -> Any:
        return respond(msg)

    assert await run_hook(lambda c, m: None, context(), "m") is FORWARD
    assert await run_hook(lambda c, m: DROP, context(), "m") is DROP
    assert (await run_hook(suspends, context(), "m")).message == "m"  # type: ignore[attr-defined]
