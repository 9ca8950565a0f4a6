"""``authorized_operations`` bitfields and KIP-848 heartbeat assignments, through the authorizer's hooks.

The pure bitfield (``filters.builtin.authz_operations``) against Kafka's codes; then each describe
answer that carries one (Metadata v8-v13, DescribeTopicPartitions, DescribeGroups v3+,
ConsumerGroupDescribe, ShareGroupDescribe, DescribeCluster) encoded and decoded at its version, as a
client reads it; then Consumer/ShareGroupHeartbeat answers, whose assignments (topic ids) lose the
topics the member may not describe, named through the topic-id cache or a lookup (unknown: left out).
The same against Apache Kafka 4.0 with real clients: ``test_authz_operations_e2e.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kgate import testing
from kgate.api import FORWARD, ApiKey, Forward
from kgate.codec import api
from kgate.filters.builtin.authz.acl_rules import Op, Res
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.operations import (
    NOT_REQUESTED,
    SUPPORTED,
    narrowed,
    operation_names,
    operations_bitfield,
)

RULES = [
    {"allow": ["read"], "topic": "*", "principal": "alice"},
    {"allow": ["read"], "group": "*", "principal": "alice"},
    {"allow": ["describe", "idempotent_write"], "cluster": True, "principal": "alice"},
    {"allow": "all", "topic": "*", "principal": "admin"},
    {"deny": "all", "topic": {"glob": "secret-*"}},
]
OK_ID, SECRET_ID, UNKNOWN_ID, LATER_ID = (uuid.uuid4() for _ in range(4))
KAFKA_TOPIC_ALL = 0b1101_1111_1000  # what Kafka 4.0 without an authorizer answers for a topic: 3576
KAFKA_GROUP_ALL = 0b1101_0100_1000  # READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS: 3400
KAFKA_CLUSTER_ALL = 0b1_1111_1010_0000  # CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, *_CONFIGS, IDEMPOTENT_WRITE: 8096


def authorizer() -> Authorizer:
    return Authorizer(Authorizer.validate_config({"rules": RULES, "default": "deny"}))


def struct(cls: type, path: str, **fields: Any) -> Any:
    for attr in path.split("."):
        cls = next(f.struct for f in cls._FIELDS if f.name == attr)  # type: ignore[attr-defined]
    return cls(**fields)


def response(key: int, **fields: Any) -> Any:
    return api.API_INFO[key].response_class(**fields)


def ctx(key: int, version: int, request: Any = None, principal: str = "alice", **kw: Any) -> Any:
    if request is not None:
        request = testing.round_trip_request(key, version, request)
    return testing.FakeContext(key, version, request=request, principal=principal, **kw)


def seen(key: int, version: int, result: Any) -> Any:
    """What the client decodes: the hook's changed message, at the exchange's version."""
    assert isinstance(result, Forward), result
    return testing.round_trip_response(key, version, result.message)


# -- the pure bitfield ----------------------------------------------------------------------------
def test_bitfields_use_kafkas_codes_and_supported_operations() -> None:
    assert operations_bitfield(Res.TOPIC, lambda op: True) == KAFKA_TOPIC_ALL == 3576
    assert operations_bitfield(Res.GROUP, lambda op: True) == KAFKA_GROUP_ALL == 3400
    assert operations_bitfield(Res.CLUSTER, lambda op: True) == KAFKA_CLUSTER_ALL == 8096
    assert operations_bitfield(Res.TOPIC, lambda op: op in (Op.READ, Op.DESCRIBE)) == (1 << 3) | (1 << 8)
    # an operation a resource type does not support never shows, whatever the rules say
    assert operations_bitfield(Res.GROUP, lambda op: op is Op.WRITE) == 0
    assert operation_names(operations_bitfield(Res.TRANSACTIONAL_ID, lambda op: True)) == {"describe", "write"}
    assert all(SUPPORTED[res] for res in Res)


def test_narrowed_keeps_not_requested_and_never_widens() -> None:
    assert narrowed(NOT_REQUESTED, 0b1000) == NOT_REQUESTED
    assert narrowed(KAFKA_TOPIC_ALL, 1 << 3) == 1 << 3
    assert narrowed(1 << 8, (1 << 3) | (1 << 8)) == 1 << 8  # the broker refused read: kgate does not grant it


# -- describe answers --------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [8, 10, 12, 13])
def test_metadata_topic_and_cluster_operations(version: int) -> None:
    key = ApiKey.METADATA
    rq = api.API_INFO[key].request_class
    request = rq(
        topics=None, include_topic_authorized_operations=True, include_cluster_authorized_operations=version <= 10
    )
    rc = api.API_INFO[key].response_class
    broker = rc(
        cluster_authorized_operations=KAFKA_CLUSTER_ALL if version <= 10 else NOT_REQUESTED,
        topics=[
            struct(rc, "topics", name="orders", topic_id=OK_ID, topic_authorized_operations=KAFKA_TOPIC_ALL),
            struct(rc, "topics", name="secret-pay", topic_id=SECRET_ID, topic_authorized_operations=KAFKA_TOPIC_ALL),
        ],
    )
    out = seen(key, version, authorizer().described_topics(ctx(key, version, request), broker))
    assert [(t.name, operation_names(t.topic_authorized_operations)) for t in out.topics] == [
        ("orders", {"read", "describe"})
    ]
    if version <= 10:
        assert operation_names(out.cluster_authorized_operations) == {"describe", "idempotent_write"}
    admin = authorizer().described_topics(
        ctx(key, version, request, principal="admin"),
        rc(topics=[struct(rc, "topics", name="orders", topic_authorized_operations=KAFKA_TOPIC_ALL)]),
    )
    assert admin is FORWARD  # every operation allowed: the broker's bytes go on


def test_metadata_without_the_flag_costs_nothing_and_hidden_topics_lose_the_brokers_bits() -> None:
    key, version = ApiKey.METADATA, 12
    rq = api.API_INFO[key].request_class
    rc = api.API_INFO[key].response_class
    plain = rq(topics=[struct(rq, "topics", name="orders")])
    broker = rc(topics=[struct(rc, "topics", name="orders", topic_authorized_operations=NOT_REQUESTED)])
    assert authorizer().described_topics(ctx(key, version, plain), broker) is FORWARD
    asked = rq(topics=[struct(rq, "topics", name="secret-pay")], include_topic_authorized_operations=True)
    broker = rc(topics=[struct(rc, "topics", name="secret-pay", topic_authorized_operations=KAFKA_TOPIC_ALL)])
    (t,) = seen(key, version, authorizer().described_topics(ctx(key, version, asked), broker)).topics
    assert t.error_code == 29
    assert t.topic_authorized_operations == NOT_REQUESTED


def test_describe_topic_partitions_operations() -> None:
    key, version = ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0
    rq = api.API_INFO[key].request_class
    rc = api.API_INFO[key].response_class
    request = rq(topics=[struct(rq, "topics", name="orders")], response_partition_limit=10)
    broker = rc(topics=[struct(rc, "topics", name="orders", topic_id=OK_ID, topic_authorized_operations=3576)])
    (t,) = seen(key, version, authorizer().described_topics(ctx(key, version, request), broker)).topics
    assert operation_names(t.topic_authorized_operations) == {"read", "describe"}


@pytest.mark.parametrize(
    ("key", "version"),
    [(ApiKey.DESCRIBE_GROUPS, 5), (ApiKey.CONSUMER_GROUP_DESCRIBE, 0), (ApiKey.SHARE_GROUP_DESCRIBE, 1)],
)
def test_group_operations(key: int, version: int) -> None:
    rc = api.API_INFO[key].response_class
    broker = rc(
        groups=[
            struct(rc, "groups", group_id="g1", authorized_operations=KAFKA_GROUP_ALL, members=[]),
            struct(rc, "groups", group_id="g2", authorized_operations=NOT_REQUESTED, members=[]),
        ]
    )
    if key == ApiKey.DESCRIBE_GROUPS:
        for g in broker.groups:
            g.protocol_type = "consumer"
    out = seen(key, version, authorizer().group_descriptions(ctx(key, version), broker))
    assert operation_names(out.groups[0].authorized_operations) == {"read", "describe"}
    assert out.groups[1].authorized_operations == NOT_REQUESTED


def test_describe_cluster_operations() -> None:
    key, version = ApiKey.DESCRIBE_CLUSTER, 1
    broker = response(key, cluster_authorized_operations=KAFKA_CLUSTER_ALL, brokers=[])
    out = seen(key, version, authorizer().cluster_description(ctx(key, version), broker))
    assert operation_names(out.cluster_authorized_operations) == {"describe", "idempotent_write"}
    unasked = response(key, cluster_authorized_operations=NOT_REQUESTED, brokers=[])
    assert authorizer().cluster_description(ctx(key, version), unasked) is FORWARD


def test_every_answer_with_a_bitfield_or_an_assignment_is_hooked() -> None:
    hooked = {(attr, spec.api_key) for attr, spec in Authorizer.hooks if spec.direction == "response"}
    assert {
        ("described_topics", ApiKey.METADATA),
        ("described_topics", ApiKey.DESCRIBE_TOPIC_PARTITIONS),
        ("group_descriptions", ApiKey.DESCRIBE_GROUPS),
        ("group_descriptions", ApiKey.CONSUMER_GROUP_DESCRIBE),
        ("group_descriptions", ApiKey.SHARE_GROUP_DESCRIBE),
        ("cluster_description", ApiKey.DESCRIBE_CLUSTER),
        ("heartbeat_answer", ApiKey.CONSUMER_GROUP_HEARTBEAT),
        ("heartbeat_answer", ApiKey.SHARE_GROUP_HEARTBEAT),
    } <= hooked


# -- heartbeat assignments -------------------------------------------------------------------------
@pytest.mark.parametrize("key", [ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT])
async def test_heartbeat_assignment_loses_topics_the_member_may_not_describe(key: int) -> None:
    version = 1  # ConsumerGroupHeartbeat v1; ShareGroupHeartbeat starts at v1 (v0 is gone since Kafka 4.1)
    rc = api.API_INFO[key].response_class
    assigned = [OK_ID, SECRET_ID, UNKNOWN_ID, LATER_ID]
    broker = rc(
        member_id="m",
        member_epoch=3,
        assignment=struct(
            rc,
            "assignment",
            topic_partitions=[
                struct(rc, "assignment.topic_partitions", topic_id=i, partitions=[0, 1]) for i in assigned
            ],
        ),
    )
    c = ctx(key, version, cache={OK_ID: "orders", SECRET_ID: "secret-pay"}, cluster={LATER_ID: "later"})
    result = await testing.run_hook(authorizer().heartbeat_answer, c, broker)
    out = seen(key, version, result)
    # secret-pay denied; an id nobody can name left out (fail closed); an id named by a lookup kept
    assert [tp.topic_id for tp in out.assignment.topic_partitions] == [OK_ID, LATER_ID]
    assert c.lookups == [[UNKNOWN_ID, LATER_ID]]


async def test_topic_policy_strips_denied_topics_from_heartbeat_assignments() -> None:
    from kgate.filters.builtin.authz.topic_policy import TopicPolicy

    key, version = ApiKey.CONSUMER_GROUP_HEARTBEAT, 1
    rc = api.API_INFO[key].response_class
    broker = rc(
        member_id="m",
        member_epoch=3,
        assignment=struct(
            rc,
            "assignment",
            topic_partitions=[
                struct(rc, "assignment.topic_partitions", topic_id=i, partitions=[0]) for i in (OK_ID, SECRET_ID)
            ],
        ),
    )
    policy = TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))
    c = ctx(key, version, principal=None, cache={OK_ID: "orders", SECRET_ID: "secret-pay"})
    out = seen(key, version, await testing.run_hook(policy.heartbeat_answer, c, broker))
    assert [tp.topic_id for tp in out.assignment.topic_partitions] == [OK_ID]


async def test_heartbeat_answers_without_assignment_or_denied_topics_stream_through() -> None:
    key, version = ApiKey.CONSUMER_GROUP_HEARTBEAT, 1
    rc = api.API_INFO[key].response_class
    c = ctx(key, version, cache={OK_ID: "orders"})
    assert await testing.run_hook(authorizer().heartbeat_answer, c, rc(member_epoch=3, assignment=None)) is FORWARD
    kept = rc(
        member_epoch=3,
        assignment=struct(
            rc,
            "assignment",
            topic_partitions=[struct(rc, "assignment.topic_partitions", topic_id=OK_ID, partitions=[0])],
        ),
    )
    assert await testing.run_hook(authorizer().heartbeat_answer, c, kept) is FORWARD
