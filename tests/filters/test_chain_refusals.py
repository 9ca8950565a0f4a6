"""Two filters of one chain refusing different topics of the same request (topic-policy, then the
authorizer): every refused topic is answered once, whether the rest goes to the broker or the second
filter answers alone. The exchange's state is shared by the chain (proxy/sansio/context.py), and each filter
used to overwrite the other's kept-back error entries (found by the Produce v13 e2e test against Kafka
4.3.1: a topic denied by topic-policy vanished from the answer when the authorizer denied another)."""

from __future__ import annotations

import inspect
import uuid
from typing import Any

from kgate import testing
from kgate.api import ApiKey, ErrorCode, Forward, Respond
from kgate.codec.generated.data.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from kgate.codec.generated.share import alter_share_group_offsets as asgo
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.topic_policy import TopicPolicy

AUTHZ = ErrorCode.TOPIC_AUTHORIZATION_FAILED
OK, HIDDEN, SECRET = (uuid.uuid4() for _ in range(3))
NAMES = {OK: "orders", HIDDEN: "p-hidden-x", SECRET: "p-secret-x"}


def chain() -> tuple[TopicPolicy, Authorizer]:
    policy = TopicPolicy(TopicPolicy.validate_config({"deny": ["*-hidden-*"]}))
    authz = Authorizer(
        Authorizer.validate_config(
            {
                "default": "deny",
                "rules": [
                    {"allow": "all", "topic": "*"},
                    {"allow": "all", "group": "*"},
                    {"deny": "all", "topic": {"glob": "*-secret-*"}},
                ],
            }
        )
    )
    return policy, authz


async def call(hook: Any, ctx: Any, message: Any) -> Any:
    result = hook(ctx, message)
    return await result if inspect.isawaitable(result) else result


async def through(hook: Any, ctx: Any, message: Any) -> Any:
    """The message after a response hook: its replacement, or the same one (FORWARD)."""
    result = await call(hook, ctx, message)
    return result.message if isinstance(result, Forward) and result.message is not None else message


def produce_v13(*ids: uuid.UUID) -> ProduceRequest:
    return testing.round_trip_request(
        ApiKey.PRODUCE,
        13,
        ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                TopicProduceData(name="", topic_id=t, partition_data=[PartitionProduceData(index=0, records=None)])
                for t in ids
            ],
        ),
    )


async def test_produce_v13_refused_by_two_filters_answers_each_topic_once() -> None:
    policy, authz = chain()
    ctx = testing.FakeContext(ApiKey.PRODUCE, 13, cache=NAMES)
    first = await call(policy.check, ctx, produce_v13(OK, HIDDEN, SECRET))
    assert isinstance(first, Forward)
    second = await call(authz.check, ctx, first.message)
    assert isinstance(second, Forward)
    assert [t.topic_id for t in second.message.topic_data] == [OK]
    broker = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="", topic_id=OK, partition_responses=[PartitionProduceResponse(index=0, error_code=0)]
            )
        ]
    )
    rctx = ctx.for_response()
    message = await through(authz.merge, rctx, broker)  # response hooks run in reverse chain order
    message = await through(policy.merge, rctx, message)
    answer = testing.round_trip_response(ApiKey.PRODUCE, 13, message)
    assert sorted((str(t.topic_id), t.partition_responses[0].error_code) for t in answer.responses) == sorted(
        [(str(OK), 0), (str(HIDDEN), AUTHZ), (str(SECRET), AUTHZ)]
    )


async def test_the_second_filter_answering_alone_keeps_the_first_filters_refusals() -> None:
    policy, authz = chain()
    ctx = testing.FakeContext(ApiKey.PRODUCE, 13, cache=NAMES)
    first = await call(policy.check, ctx, produce_v13(HIDDEN, SECRET))
    second = await call(authz.check, ctx, first.message)
    assert isinstance(second, Respond)  # the chain ends here: topic-policy's response hook never runs
    answer = testing.round_trip_response(ApiKey.PRODUCE, 13, second.message)
    assert {t.topic_id: t.partition_responses[0].error_code for t in answer.responses} == {HIDDEN: AUTHZ, SECRET: AUTHZ}


async def test_entry_lists_refused_by_two_filters() -> None:
    """AlterShareGroupOffsets goes through the authorizer's entry handlers in both filters."""
    policy, authz = chain()
    part = asgo.AlterShareGroupOffsetsRequestPartition
    request = testing.round_trip_request(
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        0,
        asgo.AlterShareGroupOffsetsRequest(
            group_id="sg",
            topics=[
                asgo.AlterShareGroupOffsetsRequestTopic(
                    topic_name=n, partitions=[part(partition_index=0, start_offset=0)]
                )
                for n in NAMES.values()
            ],
        ),
    )
    ctx = testing.FakeContext(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, request=request)
    first = await call(policy.admin, ctx, request)
    second = await call(authz.check, ctx, first.message)
    assert [t.topic_name for t in second.message.topics] == ["orders"]
    broker = asgo.AlterShareGroupOffsetsResponse(
        responses=[
            asgo.AlterShareGroupOffsetsResponseTopic(
                topic_name="orders",
                topic_id=OK,
                partitions=[asgo.AlterShareGroupOffsetsResponsePartition(partition_index=0)],
            )
        ]
    )
    rctx = ctx.for_response()
    message = await through(authz.merge, rctx, broker)
    message = await through(policy.admin_merge, rctx, message)
    answer = testing.round_trip_response(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, message)
    assert sorted((t.topic_name, t.partitions[0].error_code) for t in answer.responses) == [
        ("orders", 0),
        ("p-hidden-x", AUTHZ),
        ("p-secret-x", AUTHZ),
    ]
