"""Unit tests of client-id-policy's hooks, with a fake FilterContext (no broker, no kgate process)."""

from __future__ import annotations

import inspect
import struct
import uuid
from typing import Any

import pytest
from kgate.api import FORWARD, ApiKey, ErrorCode, FilterConfigError, Forward, Respond
from kgate.codec.generated.data.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from kgate.testing import FakeContext, run_hook

from kgate_filter_example import ClientIdPolicy, count_records

DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def produce_context(
    client_id: str | None,
    version: int = 9,
    names: dict[uuid.UUID, str] | None = None,
    known: dict[uuid.UUID, str] | None = None,
) -> FakeContext:
    """kgate's scripted context for a Produce: ``names`` kgate already knows, ``known`` the cluster would find.

    No ``upstream`` answers are scripted: client-id-policy sends no requests of its own, so one
    would fail the test.
    """
    return FakeContext(ApiKey.PRODUCE, version, client_id=client_id, cache=names, cluster=known)


def batch(records: int) -> bytes:
    """A v2 record batch header announcing ``records`` records (the filter reads nothing else)."""
    body = bytearray(61 - 12)
    body[16 - 12] = 2  # magic
    struct.pack_into(">i", body, 57 - 12, records)
    return struct.pack(">qi", 0, len(body)) + bytes(body)


def produce(*topics: tuple[str | uuid.UUID, dict[int, int]], acks: int = -1) -> ProduceRequest:
    data = []
    for topic, parts in topics:
        pd = [PartitionProduceData(index=i, records=batch(n)) for i, n in parts.items()]
        if isinstance(topic, uuid.UUID):
            data.append(TopicProduceData(name="", topic_id=topic, partition_data=pd))
        else:
            data.append(TopicProduceData(name=topic, partition_data=pd))
    return ProduceRequest(acks=acks, timeout_ms=1000, topic_data=data)


def broker_answer(request: ProduceRequest, error: int = 0) -> ProduceResponse:
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[
                    PartitionProduceResponse(index=p.index, error_code=error, base_offset=0) for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ]
    )


def policy(**config: Any) -> ClientIdPolicy:
    return ClientIdPolicy(ClientIdPolicy.validate_config(config))


def codes(response: Any) -> dict[Any, list[int]]:
    return {
        (t.topic_id if t.topic_id.int else t.name): [p.error_code for p in t.partition_responses]
        for t in response.responses
    }


# -- config --------------------------------------------------------------------------------------
def test_config_is_normalised() -> None:
    assert ClientIdPolicy.validate_config({"allow": "svc-*"}) == {"allow": ["svc-*"], "topics": None}
    assert ClientIdPolicy.validate_config({"allow": ["a", "b"], "topics": ["orders-*"]}) == {
        "allow": ["a", "b"],
        "topics": ["orders-*"],
    }


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({}, "allow: required"),
        ({"allow": []}, "allow: expected a non-empty list"),
        ({"allow": ["ok", 3]}, "allow: expected"),
        ({"allow": ["x"], "topics": {"a": 1}}, "topics: expected"),
        ({"allow": ["x"], "alow": ["y"]}, "unknown keys ['alow']"),
    ],
)
def test_bad_config_names_the_key(config: dict[str, Any], names: str) -> None:
    with pytest.raises(FilterConfigError, match=names.replace("[", r"\[").replace("]", r"\]")):
        ClientIdPolicy.validate_config(config)


def test_frozen_config_from_kgate_is_accepted() -> None:
    # kgate hands the constructor validate_config's result frozen: lists become tuples
    f = ClientIdPolicy({"allow": ("svc-*",), "topics": ("orders-*",)})
    assert f.client_allowed("svc-billing")
    assert not f.client_allowed("other")
    assert not f.client_allowed(None)
    assert f.guards("orders-eu")
    assert not f.guards("audit")


# -- request and response hooks --------------------------------------------------------------------
async def test_allowed_client_passes_unchanged_and_is_counted() -> None:
    f = policy(allow=["svc-*"])
    ctx = produce_context("svc-billing")
    req = produce(("orders", {0: 3, 1: 2}))
    assert f.check_produce(ctx, req) is FORWARD  # unchanged: kgate forwards the original bytes
    rctx = ctx.for_response()
    assert await run_hook(f.count_produce, rctx, broker_answer(req)) is FORWARD
    assert f.counts == {("orders", "written"): 5}


async def test_broker_errors_are_counted_as_failed() -> None:
    f = policy(allow=["svc-*"])
    ctx = produce_context("svc-billing")
    req = produce(("orders", {0: 4}))
    f.check_produce(ctx, req)
    await run_hook(f.count_produce, ctx.for_response(), broker_answer(req, error=6))
    assert f.counts == {("orders", "failed"): 4}


@pytest.mark.parametrize("client_id", ["intruder", None, "svc"])
async def test_refused_client_is_answered_directly(client_id: str | None) -> None:
    f = policy(allow=["svc-*"])
    ctx = produce_context(client_id)
    result = f.check_produce(ctx, produce(("orders", {0: 3, 2: 1}), ("audit", {0: 1})))
    assert isinstance(result, Respond)  # every topic refused: nothing goes upstream
    assert codes(result.message) == {"orders": [DENIED] * 2, "audit": [DENIED]}
    assert f.counts == {("orders", "refused"): 4, ("audit", "refused"): 1}


async def test_only_guarded_topics_are_refused_and_merged_into_the_answer() -> None:
    f = policy(allow=["svc-*"], topics=["orders-*"])
    ctx = produce_context("intruder")
    req = produce(("orders-eu", {0: 2}), ("audit", {0: 5, 1: 1}))
    result = f.check_produce(ctx, req)
    assert isinstance(result, Forward)
    assert result.message is req
    assert [t.name for t in req.topic_data] == ["audit"]  # what goes upstream
    resp = broker_answer(req)  # the broker answers the topics it got
    merged = await run_hook(f.count_produce, ctx.for_response(), resp)
    assert isinstance(merged, Forward)
    assert codes(merged.message) == {"audit": [0, 0], "orders-eu": [DENIED]}
    assert f.counts == {("orders-eu", "refused"): 2, ("audit", "written"): 6}


async def test_acks0_is_counted_unacknowledged() -> None:
    f = policy(allow=["svc-*"], topics=["orders-*"])
    ctx = produce_context("svc-a")
    assert f.check_produce(ctx, produce(("orders-x", {0: 3}), acks=0)) is FORWARD
    assert ctx.state == {}  # nothing for a response hook: none will come
    assert f.counts == {("orders-x", "unacknowledged"): 3}


# -- topic ids (Produce v13+) -----------------------------------------------------------------------
ORDERS_ID, AUDIT_ID, GONE_ID = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


async def test_cached_names_decide_synchronously() -> None:
    f = policy(allow=["svc-*"], topics=["orders-*"])
    ctx = produce_context("intruder", version=13, names={ORDERS_ID: "orders-eu", AUDIT_ID: "audit"})
    req = produce((ORDERS_ID, {0: 1}), (AUDIT_ID, {0: 1}))
    result = f.check_produce(ctx, req)
    assert not inspect.isawaitable(result)  # no task, no future
    assert isinstance(result, Forward)
    assert [t.topic_id for t in req.topic_data] == [AUDIT_ID]
    assert ctx.lookups == []


async def test_unknown_ids_are_looked_up_and_unresolvable_ones_refused() -> None:
    f = policy(allow=["svc-*"], topics=["orders-*"])
    ctx = produce_context("intruder", version=13, known={ORDERS_ID: "orders-eu", AUDIT_ID: "audit"})
    req = produce((ORDERS_ID, {0: 1}), (AUDIT_ID, {0: 2}), (GONE_ID, {0: 1}))
    pending = f.check_produce(ctx, req)
    assert inspect.isawaitable(pending)  # kgate suspends this request only
    result = await pending
    assert ctx.lookups == [[ORDERS_ID, AUDIT_ID, GONE_ID]]
    assert isinstance(result, Forward)
    assert [t.topic_id for t in req.topic_data] == [AUDIT_ID]
    merged = await run_hook(f.count_produce, ctx.for_response(), broker_answer(req))
    # fail closed: an id nobody can name is refused, not let through
    assert codes(merged.message) == {AUDIT_ID: [0], ORDERS_ID: [DENIED], GONE_ID: [DENIED]}
    assert f.counts == {("orders-eu", "refused"): 1, (str(GONE_ID), "refused"): 1, ("audit", "written"): 2}


async def test_allowed_client_never_waits_names_are_found_for_counting() -> None:
    f = policy(allow=["svc-*"])
    ctx = produce_context("svc-a", version=13, known={ORDERS_ID: "orders-eu"})
    req = produce((ORDERS_ID, {0: 4}))
    assert f.check_produce(ctx, req) is FORWARD  # synchronous although the id is not cached
    assert ctx.lookups == []
    pending = f.count_produce(ctx.for_response(), broker_answer(req))
    assert inspect.isawaitable(pending)  # the response hook looks the name up
    assert await pending is FORWARD
    assert ctx.lookups == [[ORDERS_ID]]
    assert f.counts == {("orders-eu", "written"): 4}


# -- helpers and declaration -------------------------------------------------------------------------
def test_count_records_reads_every_batch() -> None:
    assert count_records(None) == 0
    assert count_records(b"") == 0
    assert count_records(batch(3) + batch(4) + batch(1)) == 8


def test_declares_produce_hooks_for_every_version() -> None:
    declared = {(s.direction, s.api_key, s.min_version, s.max_version, s.needs_state) for _a, s in ClientIdPolicy.hooks}
    assert declared == {("request", ApiKey.PRODUCE, 0, None, False), ("response", ApiKey.PRODUCE, 0, None, True)}
