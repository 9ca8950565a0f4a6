"""``topic-policy`` on id-carrying RPCs that Tansu lacks (Produce v13, OffsetCommit v10,
ConsumerGroupHeartbeat, ShareFetch).

Requests are built with the codec classes from the spec, encoded to whole frames, decoded back
as kgate does (header, then body) and given to the ``TopicPolicy`` hooks with a small fake
``FilterContext``: a dict as the topic-name cache (synchronous hits) and a dict as "the cluster"
behind the async ``topic_names`` lookup. Every message a hook produces (the forwarded request,
the merged response, the direct answer) is encoded at the request's version and decoded again,
so what is checked is what a client or broker would receive.
"""

from __future__ import annotations

import base64
import functools
from typing import Any
from uuid import UUID

import pytest
from support.spec_tools import (
    AUTHZ,
    FLAKY_ID,
    GONE_ID,
    LATE_ID,
    OK_ID,
    SECRET_ID,
    UNKNOWN_ID,
    FakeContext,
    policy,
    response_through_frames,
    run_check,
    through_frames,
)

from kgate.api import FORWARD, TOPIC_LISTS, ApiKey, Forward, Respond, error_response, request_topics
from kgate.codec import api
from kgate.codec.generated.api_keys import CONSUMER_GROUP_HEARTBEAT as CGH
from kgate.codec.generated.api_keys import OFFSET_COMMIT, PRODUCE, SHARE_FETCH
from kgate.codec.generated.data.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from kgate.codec.generated.groups.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponseTopicPartitions,
    TopicPartitions,
)
from kgate.codec.generated.groups.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kgate.codec.generated.share.share_fetch import FetchPartition as SharePartition
from kgate.codec.generated.share.share_fetch import FetchTopic as ShareTopic
from kgate.codec.generated.share.share_fetch import ForgottenTopic as ShareForgotten
from kgate.codec.generated.share.share_fetch import ShareFetchRequest
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.filters.exchanges import POLICY_STATE_KEY


@functools.cache
def batch(tag: bytes) -> bytes:
    """One record batch per tag (cached: the builder stamps the current time)."""
    from support.wire import record_batch

    return record_batch([tag])


# -- Produce v13 ---------------------------------------------------------------------------------
def produce_v13(*topics: tuple[UUID, list[int]]) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=3000,
        topic_data=[
            TopicProduceData(
                name="",
                topic_id=tid,
                partition_data=[PartitionProduceData(index=p, records=batch(f"{tid}-{p}".encode())) for p in parts],
            )
            for tid, parts in topics
        ],
    )


def produce_codes(resp: Any) -> dict[UUID, list[tuple[int, int]]]:
    return {t.topic_id: [(p.index, p.error_code) for p in t.partition_responses] for t in resp.responses}


async def test_produce_v13_allowed_ids_forward_the_original_bytes() -> None:
    p = policy()
    ctx = FakeContext(PRODUCE, 13)
    req = through_frames(PRODUCE, 13, produce_v13((OK_ID, [0, 1])))
    assert request_topics(PRODUCE, req) == [OK_ID]
    result, suspended = await run_check(p, ctx, req)
    assert result is FORWARD
    assert not suspended
    assert ctx.lookups == []
    assert p.merge(ctx, ProduceResponse(responses=[])) is FORWARD  # nothing kept back to merge


async def test_produce_v13_split_refused_ids_and_merge_them_into_the_broker_answer() -> None:
    p = policy()
    ctx = FakeContext(PRODUCE, 13)
    req = through_frames(
        PRODUCE,
        13,
        produce_v13((OK_ID, [0, 1]), (SECRET_ID, [0]), (LATE_ID, [2]), (GONE_ID, [0, 5]), (FLAKY_ID, [1])),
    )
    result, suspended = await run_check(p, ctx, req)
    assert suspended
    assert ctx.lookups == [[LATE_ID, GONE_ID, FLAKY_ID]]
    assert isinstance(result, Forward)
    assert result.message is not None

    sent = through_frames(PRODUCE, 13, result.message)  # what the broker receives
    assert [t.topic_id for t in sent.topic_data] == [OK_ID, LATE_ID]
    assert [[bytes(pd.records) for pd in t.partition_data] for t in sent.topic_data] == [
        [batch(f"{OK_ID}-0".encode()), batch(f"{OK_ID}-1".encode())],
        [batch(f"{LATE_ID}-2".encode())],
    ]
    assert (sent.acks, sent.timeout_ms) == (-1, 3000)

    broker = ProduceResponse(
        throttle_time_ms=0,
        responses=[
            TopicProduceResponse(
                name="",
                topic_id=tid,
                partition_responses=[
                    PartitionProduceResponse(index=i, error_code=0, base_offset=10 * i) for i in parts
                ],
            )
            for tid, parts in ((OK_ID, [0, 1]), (LATE_ID, [2]))
        ],
    )
    broker = response_through_frames(PRODUCE, 13, broker)
    merged = p.merge(ctx, broker)
    assert isinstance(merged, Forward)
    assert merged.message is not None
    out = response_through_frames(PRODUCE, 13, merged.message)
    assert produce_codes(out) == {
        OK_ID: [(0, 0), (1, 0)],
        LATE_ID: [(2, 0)],
        SECRET_ID: [(0, AUTHZ)],  # denied by name, though the client sent only the id
        GONE_ID: [(0, UNKNOWN_ID), (5, UNKNOWN_ID)],  # fail closed
        FLAKY_ID: [(1, UNKNOWN_ID)],  # a failed lookup is refused too, never -1 to the client
    }
    refused = {t.topic_id: t for t in out.responses}
    assert all(pr.base_offset == -1 for pr in refused[GONE_ID].partition_responses)


@pytest.mark.parametrize(("unresolved", "code"), [(None, UNKNOWN_ID), ("TOPIC_AUTHORIZATION_FAILED", AUTHZ)])
async def test_produce_v13_all_refused_is_answered_directly(unresolved: str | None, code: int) -> None:
    p = policy(**({"unresolved_error": unresolved} if unresolved else {}))
    ctx = FakeContext(PRODUCE, 13)
    req = through_frames(PRODUCE, 13, produce_v13((GONE_ID, [0, 3]), (SECRET_ID, [1])))
    result, _s = await run_check(p, ctx, req)
    assert isinstance(result, Respond)
    out = response_through_frames(PRODUCE, 13, result.message)
    assert produce_codes(out) == {GONE_ID: [(0, code), (3, code)], SECRET_ID: [(1, AUTHZ)]}
    # nothing kept for a response hook (nothing went upstream); only the refusals, for the audit log
    assert {k for k in ctx.state if not k.startswith(POLICY_STATE_KEY)} == set()
    refusals = {(d["filter"], d["resource"], d["error_code"]) for d in ctx.state[POLICY_STATE_KEY]}
    gone = base64.urlsafe_b64encode(GONE_ID.bytes).rstrip(b"=").decode()
    assert refusals == {("topic-policy", "secret-pay", AUTHZ), ("topic-policy", gone, code)}


# -- OffsetCommit v10 ----------------------------------------------------------------------------
def offset_commit_v10(*topics: tuple[UUID, list[int]]) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id="g1",
        generation_id_or_member_epoch=3,
        member_id="m1",
        group_instance_id=None,
        topics=[
            OffsetCommitRequestTopic(
                name="",
                topic_id=tid,
                partitions=[
                    OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=100 + p, committed_leader_epoch=-1, committed_metadata=None
                    )
                    for p in parts
                ],
            )
            for tid, parts in topics
        ],
    )


def commit_codes(resp: Any) -> dict[UUID, list[tuple[int, int]]]:
    return {t.topic_id: [(p.partition_index, p.error_code) for p in t.partitions] for t in resp.topics}


async def test_offset_commit_v10_split_and_merge() -> None:
    p = policy()
    ctx = FakeContext(OFFSET_COMMIT, 10)
    req = through_frames(OFFSET_COMMIT, 10, offset_commit_v10((OK_ID, [0]), (GONE_ID, [1]), (SECRET_ID, [0, 1])))
    assert request_topics(OFFSET_COMMIT, req) == [OK_ID, GONE_ID, SECRET_ID]
    result, suspended = await run_check(p, ctx, req)
    assert suspended
    assert ctx.lookups == [[GONE_ID]]
    assert isinstance(result, Forward)
    sent = through_frames(OFFSET_COMMIT, 10, result.message)
    assert [(t.topic_id, [(q.partition_index, q.committed_offset) for q in t.partitions]) for t in sent.topics] == [
        (OK_ID, [(0, 100)])
    ]
    assert (sent.group_id, sent.generation_id_or_member_epoch, sent.member_id) == ("g1", 3, "m1")

    broker = response_through_frames(
        OFFSET_COMMIT,
        10,
        OffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                OffsetCommitResponseTopic(
                    name="", topic_id=OK_ID, partitions=[OffsetCommitResponsePartition(partition_index=0, error_code=0)]
                )
            ],
        ),
    )
    merged = p.merge(ctx, broker)
    assert isinstance(merged, Forward)
    out = response_through_frames(OFFSET_COMMIT, 10, merged.message)
    assert commit_codes(out) == {OK_ID: [(0, 0)], GONE_ID: [(1, UNKNOWN_ID)], SECRET_ID: [(0, AUTHZ), (1, AUTHZ)]}


async def test_offset_commit_v10_all_allowed_and_all_refused() -> None:
    p = policy()
    ctx = FakeContext(OFFSET_COMMIT, 10)
    req = through_frames(OFFSET_COMMIT, 10, offset_commit_v10((OK_ID, [0, 1]), (LATE_ID, [0])))
    result, suspended = await run_check(p, ctx, req)
    assert result is FORWARD
    assert suspended
    assert ctx.lookups == [[LATE_ID]]

    ctx = FakeContext(OFFSET_COMMIT, 10)
    req = through_frames(OFFSET_COMMIT, 10, offset_commit_v10((SECRET_ID, [0]), (FLAKY_ID, [2, 3])))
    result, _s = await run_check(p, ctx, req)
    assert isinstance(result, Respond)
    out = response_through_frames(OFFSET_COMMIT, 10, result.message)
    assert commit_codes(out) == {SECRET_ID: [(0, AUTHZ)], FLAKY_ID: [(2, UNKNOWN_ID), (3, UNKNOWN_ID)]}


async def test_versions_before_ids_still_use_names() -> None:
    """OffsetCommit v9 / Produce v12 name topics: no lookup, deny by name, answer by name."""
    p = policy()
    ctx = FakeContext(OFFSET_COMMIT, 9)
    req = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=1,
        member_id="m",
        topics=[
            OffsetCommitRequestTopic(
                name=n,
                partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata="")],
            )
            for n in ("orders", "secret-x")
        ],
    )
    req = through_frames(OFFSET_COMMIT, 9, req)
    result, suspended = await run_check(p, ctx, req)
    assert not suspended
    assert ctx.lookups == []
    assert isinstance(result, Forward)
    assert [t.name for t in through_frames(OFFSET_COMMIT, 9, result.message).topics] == ["orders"]
    errors = ctx.state["kgate.refused"]
    out = response_through_frames(OFFSET_COMMIT, 9, errors)
    assert [(t.name, [q.error_code for q in t.partitions]) for t in out.topics] == [("secret-x", [AUTHZ])]


# -- which RPCs the policy hooks ---------------------------------------------------------------
def test_policy_hooks_every_topic_carrying_rpc() -> None:
    """The per-topic data RPCs (names or ids) and the share-group data RPCs (ids only) are refused
    topic by topic; listings, committed offsets and group RPCs are hidden or refused as a whole
    (tests/filters/builtin/authz/test_policy_visibility.py). Every version is hooked, ids included."""
    hooked = {(s.direction, s.api_key) for _a, s in TopicPolicy.hooks}
    per_topic = {
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.OFFSET_COMMIT,
        ApiKey.DELETE_TOPICS,
        ApiKey.SHARE_FETCH,
        ApiKey.SHARE_ACKNOWLEDGE,
        ApiKey.DELETE_RECORDS,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.OFFSET_DELETE,
    }
    assert {(d, int(k)) for d in ("request", "response") for k in per_topic} <= hooked
    assert per_topic <= set(TOPIC_LISTS)
    for key in (ApiKey.METADATA, ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.OFFSET_FETCH):
        assert {("request", key), ("response", key)} <= hooked  # request decoded for the response hook
    for key in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT):
        assert ("request", key) in hooked
    for key in (ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_DESCRIBE):
        assert ("response", key) in hooked
    for s in (s for _a, s in TopicPolicy.hooks):
        assert s.min_version == 0
        assert s.max_version is None


def test_consumer_group_heartbeat_ids_round_trip_and_error_response() -> None:
    req = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="m",
        member_epoch=5,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=["orders"],
        server_assignor=None,
        topic_partitions=[
            TopicPartitions(topic_id=OK_ID, partitions=[0, 1]),
            TopicPartitions(topic_id=SECRET_ID, partitions=[2]),
        ],
    )
    for version in (0, 1):
        got = through_frames(CGH, version, req)
        assert [(t.topic_id, t.partitions) for t in got.topic_partitions] == [(OK_ID, [0, 1]), (SECRET_ID, [2])]
        assert got.subscribed_topic_names == ["orders"]
        with pytest.raises(KeyError):
            request_topics(CGH, got)  # not a per-topic RPC for filters.topics
        # the only error shape kgate can build: a top-level code, no assignment
        resp = error_response(CGH, version, got, AUTHZ)
        assert resp is not None
        out = response_through_frames(CGH, version, resp)
        assert out.error_code == AUTHZ
        assert out.assignment is None
    # the response's assignment (ids) round-trips too
    resp_cls = api.API_INFO[CGH].response_class
    from kgate.codec.generated.groups.consumer_group_heartbeat import Assignment

    resp = resp_cls(
        throttle_time_ms=0,
        error_code=0,
        member_id="m",
        member_epoch=6,
        heartbeat_interval_ms=500,
        assignment=Assignment(
            topic_partitions=[ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=SECRET_ID, partitions=[0])]
        ),
    )
    out = response_through_frames(CGH, 1, resp)
    assert [(t.topic_id, t.partitions) for t in out.assignment.topic_partitions] == [(SECRET_ID, [0])]


@pytest.mark.parametrize("version", [1, 2])  # Kafka 4.1+: v0 is gone
def test_share_fetch_ids_round_trip_and_error_response(version: int) -> None:
    req = ShareFetchRequest(
        group_id="sg",
        member_id="m",
        share_session_epoch=0,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=500,
        batch_size=500,
        topics=[
            ShareTopic(
                topic_id=SECRET_ID,
                partitions=[SharePartition(partition_index=0, acknowledgement_batches=[])],
            )
        ],
        forgotten_topics_data=[ShareForgotten(topic_id=GONE_ID, partitions=[3])],
    )
    got = through_frames(SHARE_FETCH, version, req)
    assert [(t.topic_id, [q.partition_index for q in t.partitions]) for t in got.topics] == [(SECRET_ID, [0])]
    assert [(t.topic_id, t.partitions) for t in got.forgotten_topics_data] == [(GONE_ID, [3])]
    assert request_topics(SHARE_FETCH, got) == [SECRET_ID]  # by id: the policy resolves it to a name
    resp = error_response(SHARE_FETCH, version, got, 0, {SECRET_ID: AUTHZ})
    assert resp is not None
    out = response_through_frames(SHARE_FETCH, version, resp)
    assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in out.responses] == [
        (SECRET_ID, [(0, AUTHZ)])
    ]
