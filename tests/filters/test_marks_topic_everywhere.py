"""kgate's marks topic is refused by every api key that names a topic (the authorizer's table says which).

Table-driven over ``acl_table.TABLE``: each api key with a topic check on the request gets a request
naming only the marks topic, run through an in-process chain of ``internal-topics``; nothing may reach
the broker, and the answer must carry TOPIC_AUTHORIZATION_FAILED. A new topic-naming api key in the
table fails ``test_every_topic_naming_key_is_covered`` until it is listed here. Answers that list
topics (log dirs, transactions) leave the marks topic out.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kgate import testing
from kgate.api import ApiKey, ErrorCode
from kgate.codec import api
from kgate.codec.generated.admin import describe_log_dirs as dld
from kgate.codec.generated.transactions import describe_transactions as dtx
from kgate.filters.builtin.authz.acl_rules import Res
from kgate.filters.builtin.authz.acl_table import TABLE
from kgate.filters.builtin.internal_topics.filter import InternalTopics
from kgate.filters.chain import Decision, FilterChain, Verdict, run_hooks
from kgate.proxy.carrier.settle import settle

MARKS = "__kgate_internal_topics"
MARKS_ID = uuid.uuid5(uuid.NAMESPACE_DNS, MARKS)
AUTHZ = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def filled(cls: type, **fields: Any) -> Any:
    """An instance of codec class ``cls`` with every field not given set to an empty value."""
    out = cls()
    for f in cls._FIELDS:  # type: ignore[attr-defined]
        if f.name in fields:
            value = fields[f.name]
        elif f.array:
            value = []
        elif f.struct is not None:
            value = None if f.nullable else filled(f.struct)
        elif f.type == "string":
            value = None if f.nullable else ""
        elif f.type == "uuid":
            value = uuid.UUID(int=0)
        elif f.type == "bool":
            value = False
        elif f.type in ("records", "bytes"):
            value = None if f.nullable else b""
        else:
            value = f.default if isinstance(f.default, int) else 0
        setattr(out, f.name, value)
    return out


def el(cls: type, path: str, **fields: Any) -> Any:
    """An element of the (nested, dotted) struct field ``path`` of ``cls``."""
    for attr in path.split("."):
        cls = next(f.struct for f in cls._FIELDS if f.name == attr)  # type: ignore[attr-defined]
    return filled(cls, **fields)


def rq(key: int) -> type:
    return api.API_INFO[key].request_class


def req(key: int, **fields: Any) -> Any:
    return filled(rq(key), **fields)


def parts(key: int, list_attr: str, name_attr: str, part_attr: str, index_attr: str, **extra: Any) -> Any:
    c = rq(key)
    return req(
        key,
        **extra,
        **{
            list_attr: [
                el(
                    c,
                    list_attr,
                    **{name_attr: MARKS, part_attr: [el(c, f"{list_attr}.{part_attr}", **{index_attr: 0})]},
                )
            ]
        },
    )


def _topology() -> Any:
    c = rq(ApiKey.STREAMS_GROUP_HEARTBEAT)
    return el(
        c,
        "topology",
        epoch=0,
        subtopologies=[el(c, "topology.subtopologies", subtopology_id="0", source_topics=[MARKS])],
    )


#: api key -> (version, request naming the marks topic)
REQUESTS: dict[int, tuple[int, Callable[[], Any]]] = {
    ApiKey.PRODUCE: (
        11,
        lambda: parts(
            ApiKey.PRODUCE,
            "topic_data",
            "name",
            "partition_data",
            "index",
            acks=-1,
            timeout_ms=1000,
            transactional_id=None,
        ),
    ),
    ApiKey.FETCH: (
        12,
        lambda: parts(ApiKey.FETCH, "topics", "topic", "partitions", "partition", max_wait_ms=0, min_bytes=1),
    ),
    ApiKey.LIST_OFFSETS: (9, lambda: parts(ApiKey.LIST_OFFSETS, "topics", "name", "partitions", "partition_index")),
    ApiKey.OFFSET_COMMIT: (
        9,
        lambda: parts(
            ApiKey.OFFSET_COMMIT,
            "topics",
            "name",
            "partitions",
            "partition_index",
            group_id="g",
            member_id="",
            generation_id_or_member_epoch=-1,
        ),
    ),
    ApiKey.CREATE_TOPICS: (
        7,
        lambda: req(
            ApiKey.CREATE_TOPICS,
            timeout_ms=1000,
            topics=[el(rq(ApiKey.CREATE_TOPICS), "topics", name=MARKS, num_partitions=1, replication_factor=1)],
        ),
    ),
    ApiKey.DELETE_TOPICS: (5, lambda: req(ApiKey.DELETE_TOPICS, timeout_ms=1000, topic_names=[MARKS])),
    ApiKey.DELETE_RECORDS: (
        2,
        lambda: parts(ApiKey.DELETE_RECORDS, "topics", "name", "partitions", "partition_index", timeout_ms=1000),
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (
        4,
        lambda: parts(ApiKey.OFFSET_FOR_LEADER_EPOCH, "topics", "topic", "partitions", "partition"),
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        3,
        lambda: req(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            v3_and_below_transactional_id="tx",
            v3_and_below_producer_id=1,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[
                el(rq(ApiKey.ADD_PARTITIONS_TO_TXN), "v3_and_below_topics", name=MARKS, partitions=[0])
            ],
        ),
    ),
    ApiKey.TXN_OFFSET_COMMIT: (
        3,
        lambda: parts(
            ApiKey.TXN_OFFSET_COMMIT,
            "topics",
            "name",
            "partitions",
            "partition_index",
            transactional_id="tx",
            group_id="g",
        ),
    ),
    ApiKey.DESCRIBE_CONFIGS: (
        4,
        lambda: req(
            ApiKey.DESCRIBE_CONFIGS,
            resources=[
                el(
                    rq(ApiKey.DESCRIBE_CONFIGS),
                    "resources",
                    resource_type=2,
                    resource_name=MARKS,
                    configuration_keys=None,
                )
            ],
        ),
    ),
    ApiKey.ALTER_CONFIGS: (
        2,
        lambda: req(
            ApiKey.ALTER_CONFIGS,
            resources=[el(rq(ApiKey.ALTER_CONFIGS), "resources", resource_type=2, resource_name=MARKS)],
        ),
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        1,
        lambda: req(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            resources=[el(rq(ApiKey.INCREMENTAL_ALTER_CONFIGS), "resources", resource_type=2, resource_name=MARKS)],
        ),
    ),
    ApiKey.CREATE_PARTITIONS: (
        3,
        lambda: req(
            ApiKey.CREATE_PARTITIONS,
            timeout_ms=1000,
            topics=[el(rq(ApiKey.CREATE_PARTITIONS), "topics", name=MARKS, count=4, assignments=None)],
        ),
    ),
    ApiKey.ELECT_LEADERS: (
        2,
        lambda: req(
            ApiKey.ELECT_LEADERS,
            timeout_ms=1000,
            topic_partitions=[el(rq(ApiKey.ELECT_LEADERS), "topic_partitions", topic=MARKS, partitions=[0])],
        ),
    ),
    ApiKey.OFFSET_DELETE: (
        0,
        lambda: parts(ApiKey.OFFSET_DELETE, "topics", "name", "partitions", "partition_index", group_id="g"),
    ),
    ApiKey.DESCRIBE_PRODUCERS: (
        0,
        lambda: req(
            ApiKey.DESCRIBE_PRODUCERS,
            topics=[el(rq(ApiKey.DESCRIBE_PRODUCERS), "topics", name=MARKS, partition_indexes=[0])],
        ),
    ),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (
        1,
        lambda: req(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            group_id="g",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            subscribed_topic_names=[MARKS],
            subscribed_topic_regex=None,
            server_assignor=None,
            topic_partitions=None,
        ),
    ),
    ApiKey.SHARE_GROUP_HEARTBEAT: (
        1,
        lambda: req(
            ApiKey.SHARE_GROUP_HEARTBEAT, group_id="g", member_epoch=0, rack_id=None, subscribed_topic_names=[MARKS]
        ),
    ),
    ApiKey.SHARE_FETCH: (
        1,
        lambda: req(
            ApiKey.SHARE_FETCH,
            group_id="g",
            member_id="m",
            topics=[
                el(
                    rq(ApiKey.SHARE_FETCH),
                    "topics",
                    topic_id=MARKS_ID,
                    partitions=[el(rq(ApiKey.SHARE_FETCH), "topics.partitions", partition_index=0)],
                )
            ],
        ),
    ),
    ApiKey.SHARE_ACKNOWLEDGE: (
        1,
        lambda: req(
            ApiKey.SHARE_ACKNOWLEDGE,
            group_id="g",
            member_id="m",
            topics=[
                el(
                    rq(ApiKey.SHARE_ACKNOWLEDGE),
                    "topics",
                    topic_id=MARKS_ID,
                    partitions=[el(rq(ApiKey.SHARE_ACKNOWLEDGE), "topics.partitions", partition_index=0)],
                )
            ],
        ),
    ),
    ApiKey.STREAMS_GROUP_HEARTBEAT: (
        0,
        lambda: req(
            ApiKey.STREAMS_GROUP_HEARTBEAT,
            group_id="g",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            instance_id=None,
            rack_id=None,
            topology=_topology(),
            active_tasks=None,
            standby_tasks=None,
            warmup_tasks=None,
            user_endpoint=None,
            client_tags=None,
            task_offsets=None,
            task_end_offsets=None,
        ),
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (
        0,
        lambda: req(
            ApiKey.ALTER_SHARE_GROUP_OFFSETS,
            group_id="g",
            topics=[
                el(
                    rq(ApiKey.ALTER_SHARE_GROUP_OFFSETS),
                    "topics",
                    topic_name=MARKS,
                    partitions=[el(rq(ApiKey.ALTER_SHARE_GROUP_OFFSETS), "topics.partitions", partition_index=0)],
                )
            ],
        ),
    ),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (
        0,
        lambda: req(
            ApiKey.DELETE_SHARE_GROUP_OFFSETS,
            group_id="g",
            topics=[el(rq(ApiKey.DELETE_SHARE_GROUP_OFFSETS), "topics", topic_name=MARKS)],
        ),
    ),
}
#: topic-naming keys whose topics are checked in the answer (hidden there; see test_answers_leave_it_out and
#: the e2e tests of internal-topics for Metadata / DescribeTopicPartitions)
ANSWERED = {
    ApiKey.METADATA,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    ApiKey.OFFSET_FETCH,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.DESCRIBE_LOG_DIRS,
    ApiKey.DESCRIBE_TRANSACTIONS,
    ApiKey.CONSUMER_GROUP_DESCRIBE,
    ApiKey.SHARE_GROUP_DESCRIBE,
    ApiKey.STREAMS_GROUP_DESCRIBE,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
}


def internal() -> InternalTopics:
    f = InternalTopics(InternalTopics.validate_config({}))
    f.store.topic_id = MARKS_ID  # the marks store learns its topic's id once started
    return f


def codes(message: Any) -> set[int]:
    """Every non-zero error code anywhere in a message."""
    found: set[int] = set()

    def walk(m: Any) -> None:
        for attr in getattr(m, "__slots__", ()):
            v = getattr(m, attr, None)
            if attr.endswith("error_code") and isinstance(v, int) and v:
                found.add(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif hasattr(v, "__slots__"):
                walk(v)

    walk(message)
    return found


def test_every_topic_naming_key_is_covered() -> None:
    naming = {k for k, needs in TABLE.items() if any(n.res is Res.TOPIC for n in needs)}
    assert naming == set(REQUESTS) | ANSWERED


@pytest.mark.parametrize("key", sorted(REQUESTS), ids=lambda k: ApiKey(k).name)
async def test_a_request_naming_the_marks_topic_never_reaches_the_broker(key: int) -> None:
    version, build = REQUESTS[key]
    request = testing.round_trip_request(key, version, build())
    ctx = testing.FakeContext(key, version, request=request, cache={MARKS_ID: MARKS})
    chain = FilterChain([internal()])
    decision = run_hooks(chain.hooks("request", key, version), ctx, request)
    if not isinstance(decision, Decision):
        decision = await settle(decision, 5.0, request)
    assert decision.verdict is Verdict.RESPOND, (ApiKey(key).name, decision)
    answer = testing.round_trip_response(key, version, decision.result.message)  # type: ignore[union-attr]
    assert AUTHZ in codes(answer), (ApiKey(key).name, answer)


async def test_answers_leave_it_out() -> None:
    chain = FilterChain([internal()])
    logs = dld.DescribeLogDirsResponse(
        results=[
            dld.DescribeLogDirsResult(
                error_code=0,
                log_dir="/d",
                topics=[dld.DescribeLogDirsTopic(name=n, partitions=[]) for n in (MARKS, "orders")],
                total_bytes=-1,
                usable_bytes=-1,
            )
        ]
    )
    txns = dtx.DescribeTransactionsResponse(
        transaction_states=[
            dtx.TransactionState(
                error_code=0,
                transactional_id="tx",
                transaction_state="Ongoing",
                transaction_timeout_ms=1,
                transaction_start_time_ms=0,
                producer_id=1,
                producer_epoch=0,
                topics=[dtx.TopicData(topic=n, partitions=[0]) for n in (MARKS, "orders")],
            )
        ]
    )
    for key, version, message, names in (
        (ApiKey.DESCRIBE_LOG_DIRS, 4, logs, lambda m: [t.name for t in m.results[0].topics]),
        (ApiKey.DESCRIBE_TRANSACTIONS, 0, txns, lambda m: [t.topic for t in m.transaction_states[0].topics]),
    ):
        message = testing.round_trip_response(key, version, message)
        ctx = testing.FakeContext(key, version)
        decision = run_hooks(chain.hooks("response", key, version, False), ctx, message)
        assert isinstance(decision, Decision)
        assert decision.verdict is Verdict.FORWARD
        assert names(decision.message) == ["orders"], ApiKey(key).name
