"""Streams groups (KIP-1071, api keys 88/89) and share-group offset admin (KIP-932, 90-92) through the
authorizer and topic-policy, with messages built from the generated classes and passed through real frame
bytes at the version a Kafka 4.3.1 client sends (the Streams library is not available here: raw protocol).

What is checked is what Kafka 4.3.1's ``KafkaApis`` checks (read from its bytecode, see acl_table):
StreamsGroupHeartbeat read on the group, describe on every topology topic, create on the internal topics
that do not exist; StreamsGroupDescribe describe on the group and the topology's topics;
Describe/Alter/DeleteShareGroupOffsets describe/read/delete on the group and describe/read/read on topics.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from kgate import testing
from kgate.api import FORWARD, ApiKey, ErrorCode, Forward, Respond
from kgate.codec import api
from kgate.codec.generated.data.metadata import MetadataResponse, MetadataResponseTopic
from kgate.codec.generated.groups import streams_group_describe as sgd
from kgate.codec.generated.groups import streams_group_heartbeat as sgh
from kgate.codec.generated.share import alter_share_group_offsets as asgo
from kgate.codec.generated.share import delete_share_group_offsets as dsgo
from kgate.codec.generated.share import describe_share_group_offsets as dso
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.operations import operation_names
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.filters.builtin.authz.visibility import STREAMS_DESCRIBE_REFUSED

KAFKA_GROUP_ALL = sum(1 << code for code in (3, 6, 8, 10, 11))  # read, delete, describe, describe/alter configs
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
HB, SD, DESC, ALTER, DELETE = (
    ApiKey.STREAMS_GROUP_HEARTBEAT,
    ApiKey.STREAMS_GROUP_DESCRIBE,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS,
)

RULES = [
    # alice: a Streams app that may read and describe topics but create none
    {"allow": ["read", "describe"], "group": "*", "principal": "alice"},
    {"allow": ["read", "describe", "write"], "topic": "*", "principal": "alice"},
    {"deny": "all", "topic": {"glob": "secret-*"}},
    {"deny": "all", "group": {"prefix": "secret-"}},
    # bob may also create topics (on the cluster) and delete groups
    {"allow": "all", "group": "*", "principal": "bob"},
    {"allow": "all", "topic": "*", "principal": "bob"},
    {"allow": ["create"], "cluster": True, "principal": "bob"},
]


def authorizer() -> Authorizer:
    return Authorizer(Authorizer.validate_config({"rules": RULES, "default": "deny"}))


def policy() -> TopicPolicy:
    return TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))


def version(key: int) -> int:
    return api.API_INFO[key].max_version  # what Kafka 4.3.1 advertises (one version each but 90: 0-1)


async def hook(fn: Any, ctx: Any, message: Any) -> Any:
    result = fn(ctx, message)
    return await result if inspect.isawaitable(result) else result


def request_ctx(key: int, request: Any, principal: str | None = "alice", **kw: Any) -> tuple[Any, Any]:
    request = testing.round_trip_request(key, version(key), request)
    return testing.FakeContext(key, version(key), request=request, principal=principal, **kw), request


def answered(key: int, result: Any) -> Any:
    assert isinstance(result, Respond), result
    return testing.round_trip_response(key, version(key), result.message)


# -- StreamsGroupHeartbeat ---------------------------------------------------------------------------
def topology(
    source: str = "orders", changelog: str = "app-store-changelog", repartition: str = "app-rekey-repartition"
) -> sgh.Topology:
    info = sgh.TopicInfo
    return sgh.Topology(
        epoch=1,
        subtopologies=[
            sgh.Subtopology(
                subtopology_id="0",
                source_topics=[source],
                source_topic_regex=[],
                state_changelog_topics=[info(name=changelog, partitions=0, replication_factor=0, topic_configs=[])],
                repartition_sink_topics=[repartition],
                repartition_source_topics=[],
                copartition_groups=[],
            ),
            sgh.Subtopology(
                subtopology_id="1",
                source_topics=[],
                source_topic_regex=[],
                state_changelog_topics=[],
                repartition_sink_topics=[],
                repartition_source_topics=[
                    info(name=repartition, partitions=3, replication_factor=0, topic_configs=[])
                ],
                copartition_groups=[],
            ),
        ],
    )


def join(group: str = "app", topo: sgh.Topology | None = None) -> sgh.StreamsGroupHeartbeatRequest:
    return sgh.StreamsGroupHeartbeatRequest(
        group_id=group,
        member_id="m-1",
        member_epoch=0,
        endpoint_information_epoch=0,
        rebalance_timeout_ms=30000,
        topology=topo if topo is not None else topology(),
        active_tasks=[],
        standby_tasks=[],
        warmup_tasks=[],
        process_id="p-1",
        client_tags=[],
    )


def metadata_of(*existing: str) -> Any:
    """What the broker answers kgate's existence check: the asked names, error 3 for those missing."""

    def answer(req: Any) -> MetadataResponse:
        assert req.allow_auto_topic_creation is False  # the check itself must create nothing
        return MetadataResponse(
            brokers=[],
            topics=[
                MetadataResponseTopic(name=t.name, error_code=0 if t.name in existing else 3, partitions=[])
                for t in req.topics
            ],
        )

    return answer


async def test_streams_heartbeat_needs_read_on_the_group() -> None:
    ctx, request = request_ctx(HB, join("secret-app"))
    assert answered(HB, await hook(authorizer().check, ctx, request)).error_code == GROUP_DENIED


async def test_streams_heartbeat_needs_describe_on_every_topology_topic() -> None:
    for topo in (
        topology(source="secret-in"),
        topology(changelog="secret-store-changelog"),
        topology(repartition="secret-rekey"),
    ):
        ctx, request = request_ctx(HB, join(topo=topo), principal="bob")
        out = answered(HB, await hook(authorizer().check, ctx, request))
        assert out.error_code == TOPIC_DENIED
        assert "secret-" in out.error_message
        assert not ctx.sent  # nothing upstream, not even the existence check


async def test_streams_heartbeat_without_topology_is_the_group_check_alone() -> None:
    """Later heartbeats (member epoch > 0) carry no topology: only read on the group counts."""
    request = join()
    request.member_epoch, request.topology = 5, None
    ctx, request = request_ctx(HB, request)
    assert await hook(authorizer().check, ctx, request) is FORWARD


async def test_streams_internal_topics_need_create_only_when_missing() -> None:
    f = authorizer()
    # bob may create: forwarded with no question asked
    ctx, request = request_ctx(HB, join(), principal="bob")
    assert await hook(f.check, ctx, request) is FORWARD
    assert not ctx.sent
    # alice may not create, but both internal topics exist: forwarded after one Metadata by name
    ctx, request = request_ctx(
        HB, join(), upstream={ApiKey.METADATA: metadata_of("app-store-changelog", "app-rekey-repartition")}
    )
    assert await hook(f.check, ctx, request) is FORWARD
    assert [[t.name for t in m.topics] for _k, m, _v in ctx.sent] == [["app-store-changelog", "app-rekey-repartition"]]
    # one is missing: the broker would create it for alice, so the heartbeat is refused here
    ctx, request = request_ctx(HB, join(), upstream={ApiKey.METADATA: metadata_of("app-store-changelog")})
    out = answered(HB, await hook(f.check, ctx, request))
    assert out.error_code == TOPIC_DENIED
    assert out.error_message == "Unauthorized to CREATE on topics app-rekey-repartition"


async def test_streams_internal_topic_check_that_fails_is_retriable_and_sends_nothing_upstream() -> None:
    ctx, request = request_ctx(HB, join(), upstream={ApiKey.METADATA: ConnectionError("broker gone")})
    out = answered(HB, await hook(authorizer().check, ctx, request))
    assert out.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE  # the member retries; not fatal


async def test_topic_policy_refuses_a_topology_naming_a_denied_topic() -> None:
    p = policy()
    ctx, request = request_ctx(HB, join(topo=topology(changelog="secret-store-changelog")), principal=None)
    out = answered(HB, p.check(ctx, request))
    assert out.error_code == TOPIC_DENIED
    assert "secret-store-changelog" in out.error_message
    ctx, request = request_ctx(HB, join(), principal=None)
    assert p.check(ctx, request) is FORWARD


# -- StreamsGroupDescribe --------------------------------------------------------------------------
def described(group: str, source: str) -> sgd.DescribedGroup:
    info = sgd.TopicInfo
    topo = sgd.Topology(
        epoch=1,
        subtopologies=[
            sgd.Subtopology(
                subtopology_id="0",
                source_topics=[source],
                repartition_sink_topics=[],
                state_changelog_topics=[
                    info(name=f"{group}-store-changelog", partitions=0, replication_factor=0, topic_configs=[])
                ],
                repartition_source_topics=[],
            )
        ],
    )
    member = sgd.Member(
        member_id="m",
        member_epoch=3,
        client_id="c",
        client_host="/127.0.0.1",
        topology_epoch=1,
        process_id="p",
        client_tags=[],
        task_offsets=[],
        task_end_offsets=[],
        assignment=sgd.Assignment(
            active_tasks=[sgd.TaskIds(subtopology_id="0", partitions=[0])], standby_tasks=[], warmup_tasks=[]
        ),
        target_assignment=sgd.Assignment(active_tasks=[], standby_tasks=[], warmup_tasks=[]),
        is_classic=False,
    )
    return sgd.DescribedGroup(
        group_id=group,
        group_state="Stable",
        group_epoch=3,
        assignment_epoch=3,
        topology=topo,
        members=[member],
        authorized_operations=KAFKA_GROUP_ALL,
    )


async def test_streams_describe_refuses_denied_groups_and_groups_using_denied_topics() -> None:
    f = authorizer()
    ctx, request = request_ctx(
        SD,
        sgd.StreamsGroupDescribeRequest(group_ids=["app", "secret-app", "leaky"], include_authorized_operations=True),
    )
    result = await hook(f.check, ctx, request)
    assert isinstance(result, Forward)
    assert result.message.group_ids == ["app", "leaky"]
    broker = testing.round_trip_response(
        SD, 0, sgd.StreamsGroupDescribeResponse(groups=[described("app", "orders"), described("leaky", "secret-pay")])
    )
    out = testing.round_trip_response(SD, 0, (await hook(f.group_descriptions, ctx.for_response(), broker)).message)
    got = {g.group_id: (g.error_code, g.error_message, len(g.members)) for g in out.groups}
    assert got == {
        "app": (0, None, 1),
        "leaky": (TOPIC_DENIED, STREAMS_DESCRIBE_REFUSED, 0),
        "secret-app": (GROUP_DENIED, "Authorization failed.", 0),
    }
    assert operation_names(out.groups[0].authorized_operations) == {"read", "describe"}  # alice's, not the broker's
    assert out.groups[1].topology is None  # neither the denied topic's name nor its changelog shows


def test_topic_policy_streams_describe() -> None:
    broker = testing.round_trip_response(
        SD, 0, sgd.StreamsGroupDescribeResponse(groups=[described("app", "orders"), described("leaky", "secret-pay")])
    )
    out = policy().streams_describe(testing.FakeContext(SD, 0), broker)
    assert [g.error_code for g in out.message.groups] == [0, TOPIC_DENIED]
    clean = sgd.StreamsGroupDescribeResponse(groups=[described("app", "orders")])
    assert policy().streams_describe(testing.FakeContext(SD, 0), clean) is FORWARD


# -- DescribeShareGroupOffsets -----------------------------------------------------------------------
def offsets_answer(group: str, *topics: str) -> dso.DescribeShareGroupOffsetsResponse:
    part = dso.DescribeShareGroupOffsetsResponsePartition
    return dso.DescribeShareGroupOffsetsResponse(
        groups=[
            dso.DescribeShareGroupOffsetsResponseGroup(
                group_id=group,
                topics=[
                    dso.DescribeShareGroupOffsetsResponseTopic(
                        topic_name=t,
                        topic_id=id_of(t),
                        partitions=[part(partition_index=0, start_offset=7, leader_epoch=0, lag=2, error_code=0)],
                    )
                    for t in topics
                ],
            )
        ]
    )


def id_of(name: str) -> Any:
    import uuid

    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


@pytest.mark.parametrize("v", [0, 1])
async def test_describe_share_group_offsets_hides_denied_topics(v: int) -> None:
    f = authorizer()
    g = dso.DescribeShareGroupOffsetsRequestGroup
    asked = dso.DescribeShareGroupOffsetsRequest(
        groups=[
            g(
                group_id="sg",
                topics=[
                    dso.DescribeShareGroupOffsetsRequestTopic(topic_name=n, partitions=[0])
                    for n in ("orders", "secret-pay")
                ],
            ),
            g(group_id="whole", topics=None),
            g(group_id="secret-sg", topics=None),
        ]
    )
    request = testing.round_trip_request(DESC, v, asked)
    ctx = testing.FakeContext(DESC, v, request=request, principal="alice")
    result = await hook(f.check, ctx, request)
    assert isinstance(result, Forward)
    assert [x.group_id for x in result.message.groups] == ["sg", "whole"]
    answer = offsets_answer("sg", "orders", "secret-pay")
    answer.groups += offsets_answer("whole", "orders", "secret-pay").groups
    broker = testing.round_trip_response(DESC, v, answer)
    out = testing.round_trip_response(DESC, v, (await hook(f.share_group_offsets, ctx.for_response(), broker)).message)
    by_group = {x.group_id: x for x in out.groups}
    sg = by_group["sg"]
    assert [(t.topic_name, t.partitions[0].error_code, t.partitions[0].start_offset) for t in sg.topics] == [
        ("orders", 0, 7),
        ("secret-pay", TOPIC_DENIED, -1),
    ]
    assert sg.topics[1].topic_id.int == 0  # the denied topic's id is not revealed
    assert [t.topic_name for t in by_group["whole"].topics] == ["orders"]  # a whole listing leaves it out
    assert by_group["secret-sg"].error_code == GROUP_DENIED
    # topic-policy: the same hiding
    broker = testing.round_trip_response(DESC, v, offsets_answer("whole", "orders", "secret-pay"))
    ctx = testing.FakeContext(
        DESC,
        v,
        request=testing.round_trip_request(
            DESC, v, dso.DescribeShareGroupOffsetsRequest(groups=[g(group_id="whole", topics=None)])
        ),
    )
    assert [t.topic_name for t in policy().share_group_offsets(ctx, broker).message.groups[0].topics] == ["orders"]


# -- Alter / DeleteShareGroupOffsets -------------------------------------------------------------------
def alter(group: str, *topics: str) -> asgo.AlterShareGroupOffsetsRequest:
    p = asgo.AlterShareGroupOffsetsRequestPartition
    return asgo.AlterShareGroupOffsetsRequest(
        group_id=group,
        topics=[
            asgo.AlterShareGroupOffsetsRequestTopic(
                topic_name=t, partitions=[p(partition_index=0, start_offset=0), p(partition_index=1, start_offset=0)]
            )
            for t in topics
        ],
    )


def delete(group: str, *topics: str) -> dsgo.DeleteShareGroupOffsetsRequest:
    return dsgo.DeleteShareGroupOffsetsRequest(
        group_id=group, topics=[dsgo.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]
    )


async def test_alter_share_group_offsets_needs_read_on_group_and_topics() -> None:
    f = authorizer()
    ctx, request = request_ctx(ALTER, alter("secret-sg", "orders"))
    assert answered(ALTER, await hook(f.check, ctx, request)).error_code == GROUP_DENIED
    ctx, request = request_ctx(ALTER, alter("sg", "orders", "secret-pay"))
    result = await hook(f.check, ctx, request)
    assert isinstance(result, Forward)
    assert [t.topic_name for t in result.message.topics] == ["orders"]
    rt = asgo.AlterShareGroupOffsetsResponseTopic
    broker = asgo.AlterShareGroupOffsetsResponse(
        responses=[
            rt(
                topic_name="orders",
                topic_id=id_of("orders"),
                partitions=[
                    asgo.AlterShareGroupOffsetsResponsePartition(partition_index=i, error_code=0) for i in (0, 1)
                ],
            )
        ]
    )
    out = testing.round_trip_response(ALTER, 0, (await hook(f.merge, ctx.for_response(), broker)).message)
    got = {t.topic_name: [(p.partition_index, p.error_code) for p in t.partitions] for t in out.responses}
    assert got == {"orders": [(0, 0), (1, 0)], "secret-pay": [(0, TOPIC_DENIED), (1, TOPIC_DENIED)]}
    # every topic refused: answered here, nothing upstream
    ctx, request = request_ctx(ALTER, alter("sg", "secret-pay"))
    out = answered(ALTER, await hook(f.check, ctx, request))
    assert [(t.topic_name, {p.error_code for p in t.partitions}) for t in out.responses] == [
        ("secret-pay", {TOPIC_DENIED})
    ]


async def test_delete_share_group_offsets_needs_delete_on_the_group_and_read_on_topics() -> None:
    f = authorizer()
    ctx, request = request_ctx(DELETE, delete("sg", "orders"))  # alice may read the group, not delete it
    assert answered(DELETE, await hook(f.check, ctx, request)).error_code == GROUP_DENIED
    ctx, request = request_ctx(DELETE, delete("sg", "orders", "secret-pay"), principal="bob")
    result = await hook(f.check, ctx, request)
    assert isinstance(result, Forward)
    assert [t.topic_name for t in result.message.topics] == ["orders"]
    broker = dsgo.DeleteShareGroupOffsetsResponse(
        responses=[
            dsgo.DeleteShareGroupOffsetsResponseTopic(topic_name="orders", topic_id=id_of("orders"), error_code=0)
        ]
    )
    out = testing.round_trip_response(DELETE, 0, (await hook(f.merge, ctx.for_response(), broker)).message)
    assert [(t.topic_name, t.error_code) for t in out.responses] == [("orders", 0), ("secret-pay", TOPIC_DENIED)]


@pytest.mark.parametrize(("key", "build"), [(ALTER, alter), (DELETE, delete)])
async def test_topic_policy_refuses_share_offsets_of_denied_topics(key: int, build: Any) -> None:
    p = policy()
    ctx, request = request_ctx(key, build("sg", "orders", "secret-pay"), principal=None)
    result = await hook(p.admin, ctx, request)
    assert isinstance(result, Forward)
    assert [t.topic_name for t in result.message.topics] == ["orders"]
    ctx, request = request_ctx(key, build("sg", "orders"), principal=None)
    assert await hook(p.admin, ctx, request) is FORWARD
