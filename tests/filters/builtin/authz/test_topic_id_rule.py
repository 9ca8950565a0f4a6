"""One rule for topics named by id, in every api that takes ids (docs/authorization.md, "Topic ids").

A denied id kgate can name answers TOPIC_AUTHORIZATION_FAILED (29) and the answer names no topic; an id
kgate cannot name answers ``unresolved_error`` (UNKNOWN_TOPIC_ID, 100). The same through the authorizer
and topic-policy, on the request side (Produce v13, Fetch v13+, DeleteTopics v6, OffsetCommit v10,
ShareFetch, ShareAcknowledge) and in answers (Metadata v12 by id, OffsetFetch v10).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from test_authorizer_hooks import CACHE, OK_ID, SECRET_ID, authorizer, codes, req, rq, struct

from kgate import testing
from kgate.api import FORWARD, ApiKey, ErrorCode, Forward, Respond
from kgate.codec.generated.data import metadata as md
from kgate.codec.generated.groups import offset_fetch as of
from kgate.filters.builtin.authz.topic_policy import TopicPolicy

AUTHZ, UNKNOWN = ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_ID


def make(which: str) -> Any:
    if which == "authorizer":
        return authorizer()
    return TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))


def by_id(key: int, topic_id: uuid.UUID) -> Any:
    c = rq(key)
    if key == ApiKey.PRODUCE:
        return req(
            key,
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                struct(
                    c, "topic_data", topic_id=topic_id, partition_data=[struct(c, "topic_data.partition_data", index=0)]
                )
            ],
        )
    if key == ApiKey.FETCH:
        return req(
            key,
            replica_id=-1,
            topics=[struct(c, "topics", topic_id=topic_id, partitions=[struct(c, "topics.partitions", partition=0)])],
        )
    if key == ApiKey.DELETE_TOPICS:
        return req(key, timeout_ms=1000, topics=[struct(c, "topics", name=None, topic_id=topic_id)])
    if key == ApiKey.OFFSET_COMMIT:
        return req(
            key,
            group_id="g",
            topics=[
                struct(c, "topics", topic_id=topic_id, partitions=[struct(c, "topics.partitions", partition_index=0)])
            ],
        )
    return req(
        key,
        group_id="g",
        member_id="m",
        topics=[struct(c, "topics", topic_id=topic_id, partitions=[struct(c, "topics.partitions", partition_index=0)])],
    )


REQUESTS = [
    (ApiKey.PRODUCE, 13),
    (ApiKey.FETCH, 13),
    (ApiKey.FETCH, 18),
    (ApiKey.DELETE_TOPICS, 6),
    (ApiKey.OFFSET_COMMIT, 10),
    (ApiKey.SHARE_FETCH, 1),
    (ApiKey.SHARE_ACKNOWLEDGE, 1),
]


async def decide(f: Any, key: int, version: int, request: Any) -> tuple[Any, Any]:
    request = testing.round_trip_request(key, version, request)
    ctx = testing.FakeContext(key, version, request=request, principal="alice", cache=CACHE)
    return await testing.run_hook(f.check, ctx, request), ctx


def names_in(message: Any) -> set[str]:
    """Every topic name anywhere in an answer (``name`` / ``topic`` fields)."""
    found: set[str] = set()

    def walk(m: Any) -> None:
        for attr in getattr(m, "__slots__", ()):
            v = getattr(m, attr, None)
            if attr in ("name", "topic") and isinstance(v, str) and v:
                found.add(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif hasattr(v, "__slots__"):
                walk(v)

    walk(message)
    return found


@pytest.mark.parametrize("which", ["authorizer", "topic-policy"])
@pytest.mark.parametrize(("key", "version"), REQUESTS, ids=[f"{ApiKey(k).name}-v{v}" for k, v in REQUESTS])
async def test_requests_by_id(which: str, key: int, version: int) -> None:
    f = make(which)
    assert (await decide(f, key, version, by_id(key, OK_ID)))[0] is FORWARD
    for topic_id, code in ((SECRET_ID, AUTHZ), (uuid.uuid4(), UNKNOWN)):
        result, _ctx = await decide(f, key, version, by_id(key, topic_id))
        assert isinstance(result, Respond), result
        answer = testing.round_trip_response(key, version, result.message)
        assert codes(answer) == {code}, (ApiKey(key).name, answer)
        assert not names_in(answer), (ApiKey(key).name, answer)


@pytest.mark.parametrize("which", ["authorizer", "topic-policy"])
async def test_metadata_by_id_answers_29_with_the_id_and_no_name(which: str) -> None:
    f = make(which)
    request = md.MetadataRequest(
        topics=[md.MetadataRequestTopic(topic_id=SECRET_ID, name=None)], allow_auto_topic_creation=False
    )
    ctx = testing.FakeContext(ApiKey.METADATA, 12, request=request, principal="alice", cache=CACHE)
    assert await testing.run_hook(f.check, ctx, request) is FORWARD  # ids are decided in the answer
    broker = md.MetadataResponse(
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            md.MetadataResponseTopic(
                error_code=0, name="secret-pay", topic_id=SECRET_ID, is_internal=False, partitions=[]
            )
        ],
    )
    result = await testing.run_hook(f.described_topics, ctx.for_response(), broker)
    answer = testing.round_trip_response(ApiKey.METADATA, 12, result.message if isinstance(result, Forward) else broker)
    assert [(t.error_code, t.name, t.topic_id) for t in answer.topics] == [(AUTHZ, None, SECRET_ID)]


@pytest.mark.parametrize("which", ["authorizer", "topic-policy"])
async def test_offset_fetch_v10_by_id(which: str) -> None:
    f = make(which)
    gone = uuid.uuid4()
    request = of.OffsetFetchRequest(
        require_stable=False,
        groups=[
            of.OffsetFetchRequestGroup(
                group_id="g",
                member_id=None,
                member_epoch=-1,
                topics=[
                    of.OffsetFetchRequestTopics(topic_id=t, partition_indexes=[0]) for t in (OK_ID, SECRET_ID, gone)
                ],
            )
        ],
    )
    ctx = testing.FakeContext(ApiKey.OFFSET_FETCH, 10, request=request, principal="alice", cache=CACHE)
    broker = of.OffsetFetchResponse(
        groups=[
            of.OffsetFetchResponseGroup(
                group_id="g",
                error_code=0,
                topics=[
                    of.OffsetFetchResponseTopics(
                        topic_id=t,
                        partitions=[
                            of.OffsetFetchResponsePartitions(
                                partition_index=0,
                                committed_offset=5,
                                committed_leader_epoch=0,
                                metadata="",
                                error_code=0,
                            )
                        ],
                    )
                    for t in (OK_ID, SECRET_ID, gone)
                ],
            )
        ]
    )
    hook = f.offset_fetch_response if which == "authorizer" else f.offset_fetch
    result = await testing.run_hook(hook, ctx.for_response(), broker)
    answer = testing.round_trip_response(
        ApiKey.OFFSET_FETCH, 10, result.message if isinstance(result, Forward) and result.message else broker
    )
    got = {t.topic_id: (t.partitions[0].error_code, t.partitions[0].committed_offset) for t in answer.groups[0].topics}
    assert got == {OK_ID: (0, 5), SECRET_ID: (AUTHZ, -1), gone: (UNKNOWN, -1)}
