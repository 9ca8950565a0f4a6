"""internal-topics and groups (filters.builtin.internal_groups): kgate's marks topic never reaches a
consumer, share or Streams group, with spec-built frames at the versions Kafka 4.3.1 speaks; other
internal topics are read by groups like any topic (docs/internal-topics.md)."""

from __future__ import annotations

import inspect
import uuid
from typing import Any

from kgate import testing
from kgate.api import FORWARD, ApiKey, ErrorCode, Forward, Respond
from kgate.codec.generated.share import alter_share_group_offsets as asgo
from kgate.codec.generated.share import describe_share_group_offsets as dso
from kgate.codec.generated.share import share_fetch as sf
from kgate.codec.generated.share import share_group_heartbeat as sgh
from kgate.filters.builtin.internal_topics.filter import InternalTopics

AUTHZ = ErrorCode.TOPIC_AUTHORIZATION_FAILED
MARKS_ID, OFFSETS_ID, PLAIN_ID = (uuid.uuid4() for _ in range(3))
MARKS = "__kgate_internal_topics"


def internal() -> InternalTopics:
    f = InternalTopics(InternalTopics.validate_config({}))
    f.store.topic_id = MARKS_ID  # what the store learns when it first reads its topic
    f.store.ready.set()
    return f


async def run(hook: Any, ctx: Any, message: Any) -> Any:
    result = hook(ctx, message)
    return await result if inspect.isawaitable(result) else result


def test_subscribing_to_the_marks_topic_is_refused_other_internal_topics_are_not() -> None:
    f = internal()
    for names, code in (([MARKS, "orders"], AUTHZ), (["__consumer_offsets", "orders"], None)):
        req = testing.round_trip_request(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            1,
            sgh.ShareGroupHeartbeatRequest(group_id="sg", member_id="m", member_epoch=0, subscribed_topic_names=names),
        )
        result = f.group_heartbeat(testing.FakeContext(ApiKey.SHARE_GROUP_HEARTBEAT, 1, request=req), req)
        if code is None:
            assert result is FORWARD
        else:
            assert isinstance(result, Respond)
            out = testing.round_trip_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, result.message)
            assert out.error_code == code


def test_a_regex_assignment_loses_the_marks_topic() -> None:
    f = internal()
    rc = sgh.ShareGroupHeartbeatResponse
    resp = rc(
        member_id="m",
        member_epoch=2,
        heartbeat_interval_ms=5000,
        assignment=sgh.Assignment(
            topic_partitions=[sgh.TopicPartitions(topic_id=t, partitions=[0]) for t in (PLAIN_ID, MARKS_ID, OFFSETS_ID)]
        ),
    )
    resp = testing.round_trip_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, resp)
    result = f.heartbeat_assignment(testing.FakeContext(ApiKey.SHARE_GROUP_HEARTBEAT, 1), resp)
    out = testing.round_trip_response(ApiKey.SHARE_GROUP_HEARTBEAT, 1, result.message)
    assert [tp.topic_id for tp in out.assignment.topic_partitions] == [PLAIN_ID, OFFSETS_ID]


async def test_share_fetch_of_the_marks_topic_is_refused_per_topic() -> None:
    f = internal()

    def fetch(*ids: uuid.UUID) -> Any:
        return testing.round_trip_request(
            ApiKey.SHARE_FETCH,
            2,
            sf.ShareFetchRequest(
                group_id="sg",
                member_id="m",
                share_session_epoch=0,
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=1 << 20,
                max_records=10,
                batch_size=10,
                topics=[
                    sf.FetchTopic(
                        topic_id=t, partitions=[sf.FetchPartition(partition_index=0, acknowledgement_batches=[])]
                    )
                    for t in ids
                ],
                forgotten_topics_data=[],
            ),
        )

    ctx = testing.FakeContext(ApiKey.SHARE_FETCH, 2)
    assert await run(f.share_data, ctx, fetch(PLAIN_ID, OFFSETS_ID)) is FORWARD
    assert not ctx.lookups
    req = fetch(PLAIN_ID, MARKS_ID)
    ctx = testing.FakeContext(ApiKey.SHARE_FETCH, 2, request=req)
    result = await run(f.share_data, ctx, req)
    assert isinstance(result, Forward)
    assert [t.topic_id for t in result.message.topics] == [PLAIN_ID]
    broker = sf.ShareFetchResponse(
        responses=[
            sf.ShareFetchableTopicResponse(
                topic_id=PLAIN_ID, partitions=[sf.PartitionData(partition_index=0, records=b"", acquired_records=[])]
            )
        ],
        node_endpoints=[],
    )
    out = testing.round_trip_response(ApiKey.SHARE_FETCH, 2, f.share_data_merge(ctx.for_response(), broker).message)
    assert [(t.topic_id, t.partitions[0].error_code) for t in out.responses] == [(PLAIN_ID, 0), (MARKS_ID, AUTHZ)]


async def test_share_group_offsets_never_show_or_change_the_marks_topic() -> None:
    f = internal()
    req = testing.round_trip_request(
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        0,
        asgo.AlterShareGroupOffsetsRequest(
            group_id="sg",
            topics=[
                asgo.AlterShareGroupOffsetsRequestTopic(
                    topic_name=n,
                    partitions=[asgo.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)],
                )
                for n in ("orders", MARKS)
            ],
        ),
    )
    ctx = testing.FakeContext(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, request=req)
    result = await run(f.share_offsets, ctx, req)
    assert isinstance(result, Forward)
    assert [t.topic_name for t in result.message.topics] == ["orders"]
    merged = f.share_offsets_merge(ctx.for_response(), asgo.AlterShareGroupOffsetsResponse(responses=[]))
    assert [(t.topic_name, t.partitions[0].error_code) for t in merged.message.responses] == [(MARKS, AUTHZ)]

    whole = testing.round_trip_request(
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        1,
        dso.DescribeShareGroupOffsetsRequest(
            groups=[dso.DescribeShareGroupOffsetsRequestGroup(group_id="sg", topics=None)]
        ),
    )
    part = dso.DescribeShareGroupOffsetsResponsePartition(
        partition_index=0, start_offset=1, leader_epoch=0, error_code=0
    )
    answer = dso.DescribeShareGroupOffsetsResponse(
        groups=[
            dso.DescribeShareGroupOffsetsResponseGroup(
                group_id="sg",
                topics=[
                    dso.DescribeShareGroupOffsetsResponseTopic(topic_name=n, topic_id=t, partitions=[part])
                    for n, t in (("orders", PLAIN_ID), (MARKS, MARKS_ID))
                ],
            )
        ]
    )
    ctx = testing.FakeContext(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, request=whole)
    out = f.share_offsets_described(ctx, testing.round_trip_response(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, answer))
    assert [t.topic_name for t in out.message.groups[0].topics] == ["orders"]
