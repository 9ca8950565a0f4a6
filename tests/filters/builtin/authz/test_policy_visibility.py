"""``topic-policy`` beyond per-topic request lists, on frames built from the spec.

OffsetFetch (names up to v9, ids from v10, groups from v8), ConsumerGroupHeartbeat and
ShareGroupHeartbeat subscriptions, Consumer/ShareGroupDescribe assignments,
DescribeTopicPartitions, and the name-keyed per-topic RPCs (DeleteRecords, OffsetForLeaderEpoch,
TxnOffsetCommit, OffsetDelete). Tansu lacks most of these (no KIP-848 groups, OffsetFetch only to v9);
the real-broker counterparts are in test_policy_visibility_e2e.py.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from support.spec_tools import (
    AUTHZ,
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

from kgate.api import FORWARD, Forward, Respond, error_response
from kgate.codec import api
from kgate.codec.generated.api_keys import CONSUMER_GROUP_DESCRIBE as CGD
from kgate.codec.generated.api_keys import CONSUMER_GROUP_HEARTBEAT as CGH
from kgate.codec.generated.api_keys import (
    DELETE_RECORDS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    METADATA,
    OFFSET_DELETE,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    TXN_OFFSET_COMMIT,
)
from kgate.codec.generated.api_keys import DESCRIBE_TOPIC_PARTITIONS as DTP
from kgate.codec.generated.api_keys import SHARE_GROUP_DESCRIBE as SGD
from kgate.codec.generated.api_keys import SHARE_GROUP_HEARTBEAT as SGH
from kgate.codec.generated.data.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
    TopicRequest,
)
from kgate.codec.generated.groups.consumer_group_describe import Assignment as CgdAssignment
from kgate.codec.generated.groups.consumer_group_describe import ConsumerGroupDescribeResponse
from kgate.codec.generated.groups.consumer_group_describe import DescribedGroup as CgdGroup
from kgate.codec.generated.groups.consumer_group_describe import Member as CgdMember
from kgate.codec.generated.groups.consumer_group_describe import TopicPartitions as CgdTopicPartitions
from kgate.codec.generated.groups.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kgate.codec.generated.groups.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from kgate.codec.generated.share.share_group_describe import Assignment as SgdAssignment
from kgate.codec.generated.share.share_group_describe import DescribedGroup as SgdGroup
from kgate.codec.generated.share.share_group_describe import Member as SgdMember
from kgate.codec.generated.share.share_group_describe import ShareGroupDescribeResponse
from kgate.codec.generated.share.share_group_describe import TopicPartitions as SgdTopicPartitions
from kgate.codec.generated.share.share_group_heartbeat import ShareGroupHeartbeatRequest
from kgate.filters.builtin.authz.visibility import DESCRIBE_REFUSED


async def run_response_hook(hook: Any, ctx: FakeContext, response: Any) -> tuple[Any, bool]:
    result = hook(ctx, response)
    suspended = inspect.isawaitable(result)
    if suspended:
        result = await result
    return result, suspended


# -- OffsetFetch, v1-v7: one group, topics by name -----------------------------------------------
def _v7_response(*names: str) -> OffsetFetchResponse:
    return OffsetFetchResponse(
        topics=[
            OffsetFetchResponseTopic(
                name=n,
                partitions=[
                    OffsetFetchResponsePartition(
                        partition_index=0, committed_offset=42, committed_leader_epoch=3, metadata="m", error_code=0
                    )
                ],
            )
            for n in names
        ],
        error_code=0,
    )


def _v7_offsets(resp: Any) -> dict[str, list[tuple[int, int, int]]]:
    return {t.name: [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions] for t in resp.topics}


@pytest.mark.parametrize("version", [2, 7])
async def test_offset_fetch_by_name_answers_denied_topics_with_errors(version: int) -> None:
    asked = [OffsetFetchRequestTopic(name=n, partition_indexes=[0]) for n in ("orders", "secret-pay")]
    request = through_frames(OFFSET_FETCH, version, OffsetFetchRequest(group_id="g", topics=asked))
    ctx = FakeContext(OFFSET_FETCH, version, request)
    response = response_through_frames(OFFSET_FETCH, version, _v7_response("orders", "secret-pay"))
    result, suspended = await run_response_hook(policy().offset_fetch, ctx, response)
    assert not suspended
    assert isinstance(result, Forward)
    out = response_through_frames(OFFSET_FETCH, version, result.message)
    assert _v7_offsets(out) == {"orders": [(0, 42, 0)], "secret-pay": [(0, -1, AUTHZ)]}  # no offset leaks
    assert out.topics[1].partitions[0].metadata == ""


async def test_offset_fetch_of_all_topics_leaves_denied_ones_out() -> None:
    request = through_frames(OFFSET_FETCH, 7, OffsetFetchRequest(group_id="g", topics=None))
    ctx = FakeContext(OFFSET_FETCH, 7, request)
    response = response_through_frames(OFFSET_FETCH, 7, _v7_response("orders", "secret-pay", "other"))
    result, _s = await run_response_hook(policy(allow=["orders*", "secret-*"]).offset_fetch, ctx, response)
    out = response_through_frames(OFFSET_FETCH, 7, result.message)
    assert _v7_offsets(out) == {"orders": [(0, 42, 0)]}  # "other" is not allowed, "secret-pay" denied


async def test_offset_fetch_with_nothing_denied_forwards_the_original_bytes() -> None:
    request = through_frames(OFFSET_FETCH, 7, OffsetFetchRequest(group_id="g", topics=None))
    response = response_through_frames(OFFSET_FETCH, 7, _v7_response("orders", "orders-eu"))
    result, _s = await run_response_hook(policy().offset_fetch, FakeContext(OFFSET_FETCH, 7, request), response)
    assert result is FORWARD


# -- OffsetFetch v8+: groups; v10: topic ids --------------------------------------------------------
def _group_response(version: int, group_id: str, keys: list[Any]) -> OffsetFetchResponseGroup:
    def topic(key: Any) -> OffsetFetchResponseTopics:
        t = OffsetFetchResponseTopics(
            partitions=[
                OffsetFetchResponsePartitions(
                    partition_index=p, committed_offset=100 + p, committed_leader_epoch=1, metadata=None, error_code=0
                )
                for p in (0, 1)
            ]
        )
        if version >= 10:
            t.topic_id = key
        else:
            t.name = key
        return t

    return OffsetFetchResponseGroup(group_id=group_id, topics=[topic(k) for k in keys], error_code=0)


def _group_offsets(resp: Any, version: int) -> dict[str, dict[Any, list[tuple[int, int, int]]]]:
    return {
        g.group_id: {
            (t.topic_id if version >= 10 else t.name): [
                (p.partition_index, p.committed_offset, p.error_code) for p in t.partitions
            ]
            for t in g.topics
        }
        for g in resp.groups
    }


async def test_offset_fetch_v9_groups_asked_by_name_and_asked_whole() -> None:
    by_name = OffsetFetchRequestGroup(
        group_id="named",
        member_id=None,
        member_epoch=-1,
        topics=[OffsetFetchRequestTopics(name=n, partition_indexes=[0, 1]) for n in ("orders", "secret-pay")],
    )
    whole = OffsetFetchRequestGroup(group_id="whole", member_id=None, member_epoch=-1, topics=None)
    request = through_frames(OFFSET_FETCH, 9, OffsetFetchRequest(groups=[by_name, whole], require_stable=True))
    response = response_through_frames(
        OFFSET_FETCH,
        9,
        OffsetFetchResponse(
            groups=[
                _group_response(9, "named", ["orders", "secret-pay"]),
                _group_response(9, "whole", ["secret-pay", "orders-eu"]),
            ]
        ),
    )
    result, _s = await run_response_hook(policy().offset_fetch, FakeContext(OFFSET_FETCH, 9, request), response)
    out = response_through_frames(OFFSET_FETCH, 9, result.message)
    assert _group_offsets(out, 9) == {
        "named": {"orders": [(0, 100, 0), (1, 101, 0)], "secret-pay": [(0, -1, AUTHZ), (1, -1, AUTHZ)]},
        "whole": {"orders-eu": [(0, 100, 0), (1, 101, 0)]},
    }


async def test_offset_fetch_v10_resolves_ids_and_hides_denied_and_unresolvable_ones() -> None:
    ids = [OK_ID, SECRET_ID, LATE_ID, GONE_ID]  # cached allowed, cached denied, looked up, does not exist
    asked = OffsetFetchRequestGroup(
        group_id="g",
        member_id=None,
        member_epoch=-1,
        topics=[OffsetFetchRequestTopics(topic_id=i, partition_indexes=[0, 1]) for i in ids],
    )
    request = through_frames(OFFSET_FETCH, 10, OffsetFetchRequest(groups=[asked]))
    assert [t.topic_id for t in request.groups[0].topics] == ids  # ids on the wire, no names
    response = response_through_frames(OFFSET_FETCH, 10, OffsetFetchResponse(groups=[_group_response(10, "g", ids)]))
    ctx = FakeContext(OFFSET_FETCH, 10, request)
    result, suspended = await run_response_hook(policy().offset_fetch, ctx, response)
    assert suspended
    assert ctx.lookups == [[LATE_ID, GONE_ID]]
    out = response_through_frames(OFFSET_FETCH, 10, result.message)
    assert _group_offsets(out, 10)["g"] == {
        OK_ID: [(0, 100, 0), (1, 101, 0)],
        SECRET_ID: [(0, -1, AUTHZ), (1, -1, AUTHZ)],
        LATE_ID: [(0, 100, 0), (1, 101, 0)],
        GONE_ID: [(0, -1, UNKNOWN_ID), (1, -1, UNKNOWN_ID)],  # fail closed
    }


async def test_offset_fetch_v10_listing_leaves_out_denied_and_unresolvable_ids() -> None:
    request = through_frames(
        OFFSET_FETCH,
        10,
        OffsetFetchRequest(
            groups=[OffsetFetchRequestGroup(group_id="g", member_id=None, member_epoch=-1, topics=None)]
        ),
    )
    ids = [OK_ID, SECRET_ID, GONE_ID]
    response = response_through_frames(OFFSET_FETCH, 10, OffsetFetchResponse(groups=[_group_response(10, "g", ids)]))
    result, _s = await run_response_hook(policy().offset_fetch, FakeContext(OFFSET_FETCH, 10, request), response)
    out = response_through_frames(OFFSET_FETCH, 10, result.message)
    assert list(_group_offsets(out, 10)["g"]) == [OK_ID]


# -- group heartbeats: subscriptions by name -----------------------------------------------------
def _cgh(names: list[str] | None) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="m",
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=names,
        topic_partitions=[],
    )


def _sgh(names: list[str] | None) -> ShareGroupHeartbeatRequest:
    return ShareGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0, subscribed_topic_names=names)


@pytest.mark.parametrize(("api_key", "version", "make"), [(CGH, 0, _cgh), (CGH, 1, _cgh), (SGH, 1, _sgh)])
def test_heartbeat_subscribing_to_a_denied_topic_is_refused(api_key: int, version: int, make: Any) -> None:
    p = policy()
    refused = through_frames(api_key, version, make(["orders", "secret-pay"]))
    result = p.check(FakeContext(api_key, version), refused)
    assert isinstance(result, Respond)
    out = response_through_frames(api_key, version, result.message)
    assert out.error_code == AUTHZ
    assert out.assignment is None
    for names in (["orders", "orders-eu"], None):  # allowed, or no subscription change in this heartbeat
        assert p.check(FakeContext(api_key, version), through_frames(api_key, version, make(names))) is FORWARD


# -- group describes: assignments --------------------------------------------------------------
def _cgd_group(group_id: str, topic: str) -> CgdGroup:
    tp = CgdTopicPartitions(topic_id=OK_ID, topic_name=topic, partitions=[0])
    member = CgdMember(
        member_id="m",
        member_epoch=1,
        client_id="c",
        client_host="/127.0.0.1",
        subscribed_topic_names=[topic],
        assignment=CgdAssignment(topic_partitions=[]),
        target_assignment=CgdAssignment(topic_partitions=[tp]),  # only the target names it
    )
    return CgdGroup(group_id=group_id, group_state="Stable", group_epoch=3, assignor_name="uniform", members=[member])


def _sgd_group(group_id: str, topic: str) -> SgdGroup:
    tp = SgdTopicPartitions(topic_id=OK_ID, topic_name=topic, partitions=[0])
    member = SgdMember(
        member_id="m",
        member_epoch=1,
        client_id="c",
        client_host="/127.0.0.1",
        subscribed_topic_names=[topic],
        assignment=SgdAssignment(topic_partitions=[tp]),
    )
    return SgdGroup(group_id=group_id, group_state="Stable", group_epoch=3, assignor_name="simple", members=[member])


@pytest.mark.parametrize(
    ("api_key", "response_cls", "group"),
    [(CGD, ConsumerGroupDescribeResponse, _cgd_group), (SGD, ShareGroupDescribeResponse, _sgd_group)],
)
def test_describe_refuses_groups_assigned_a_denied_topic(api_key: int, response_cls: type, group: Any) -> None:
    p = policy()
    version = 1 if api_key == SGD else 0  # ShareGroupDescribe starts at v1 (v0 is gone since Kafka 4.1)
    response = response_through_frames(
        api_key, version, response_cls(groups=[group("fine", "orders"), group("leaky", "secret-pay")])
    )
    result = p.group_describe(FakeContext(api_key, version), response)
    assert isinstance(result, Forward)
    out = response_through_frames(api_key, version, result.message)
    fine, leaky = out.groups
    assert fine.group_id == "fine"
    assert fine.error_code == 0
    assert fine.members[0].member_id == "m"
    assert (leaky.group_id, leaky.error_code, leaky.error_message, leaky.members) == (
        "leaky",
        AUTHZ,
        DESCRIBE_REFUSED,
        [],
    )
    clean = response_through_frames(api_key, version, response_cls(groups=[group("fine", "orders")]))
    assert p.group_describe(FakeContext(api_key, version), clean) is FORWARD


# -- DescribeTopicPartitions: like Metadata ------------------------------------------------------
def _dtp_response(*names: str) -> DescribeTopicPartitionsResponse:
    return DescribeTopicPartitionsResponse(
        topics=[
            DescribeTopicPartitionsResponseTopic(
                error_code=0,
                name=n,
                topic_id=SECRET_ID if n.startswith("secret") else OK_ID,
                partitions=[
                    DescribeTopicPartitionsResponsePartition(
                        partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=[1], isr_nodes=[1]
                    )
                ],
            )
            for n in names
        ]
    )


async def test_describe_topic_partitions_hides_denied_topics() -> None:
    p = policy()
    named = through_frames(
        DTP, 0, DescribeTopicPartitionsRequest(topics=[TopicRequest(name="orders"), TopicRequest(name="secret-pay")])
    )
    resp = response_through_frames(DTP, 0, _dtp_response("orders", "secret-pay"))
    result = p.described_topics(FakeContext(DTP, 0, named), resp)
    out = response_through_frames(DTP, 0, result.message)
    shown = {t.name: (t.error_code, len(t.partitions), t.topic_id.int != 0) for t in out.topics}
    assert shown == {"orders": (0, 1, True), "secret-pay": (AUTHZ, 0, False)}  # no id, no partitions

    listing = through_frames(DTP, 0, DescribeTopicPartitionsRequest(topics=[]))
    resp = response_through_frames(DTP, 0, _dtp_response("orders", "secret-pay"))
    out = response_through_frames(DTP, 0, p.described_topics(FakeContext(DTP, 0, listing), resp).message)
    assert [t.name for t in out.topics] == ["orders"]


# -- name-keyed per-topic RPCs: DeleteRecords, OffsetForLeaderEpoch, TxnOffsetCommit, OffsetDelete ----
def _name_keyed_request(api_key: int, names: list[str]) -> Any:
    info = api.API_INFO[api_key]
    req = info.request_class()
    tcls = _field_struct(type(req), "topics")
    pcls = _field_struct(tcls, "partitions")
    name_attr, index_attr = (
        ("topic", "partition") if api_key == OFFSET_FOR_LEADER_EPOCH else ("name", "partition_index")
    )
    req.topics = [tcls(**{name_attr: n}, partitions=[pcls(**{index_attr: i}) for i in (0, 1)]) for n in names]
    if hasattr(req, "group_id"):
        req.group_id = "g"
    return req


def _field_struct(cls: type, name: str) -> type:
    return next(f.struct for f in cls._FIELDS if f.name == name)  # type: ignore[attr-defined]


def _per_partition_codes(api_key: int, topics: list[Any]) -> dict[str, list[tuple[int, int]]]:
    name_attr, index_attr = (
        ("topic", "partition") if api_key == OFFSET_FOR_LEADER_EPOCH else ("name", "partition_index")
    )
    return {getattr(t, name_attr): [(getattr(p, index_attr), p.error_code) for p in t.partitions] for t in topics}


NAME_KEYED = [
    (key, v)
    for key in (DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH, TXN_OFFSET_COMMIT, OFFSET_DELETE)
    for v in range(api.API_INFO[key].min_version, api.API_INFO[key].max_version + 1)
]


@pytest.mark.parametrize(("api_key", "version"), NAME_KEYED)
async def test_name_keyed_rpcs_refuse_denied_topics_and_keep_the_rest(api_key: int, version: int) -> None:
    p = policy()
    req = through_frames(api_key, version, _name_keyed_request(api_key, ["orders", "secret-pay"]))
    ctx = FakeContext(api_key, version)
    result, suspended = await run_check(p, ctx, req)
    assert not suspended
    assert isinstance(result, Forward)
    sent = through_frames(api_key, version, result.message)
    name_attr = "topic" if api_key == OFFSET_FOR_LEADER_EPOCH else "name"
    assert [getattr(t, name_attr) for t in sent.topics] == ["orders"]  # the denied topic never goes upstream

    broker = api.API_INFO[api_key].response_class()
    broker.topics = _error_topics(api_key, version, sent)
    merged = p.merge(ctx, response_through_frames(api_key, version, broker))
    out = response_through_frames(api_key, version, merged.message)
    assert _per_partition_codes(api_key, out.topics) == {
        "orders": [(0, 0), (1, 0)],
        "secret-pay": [(0, AUTHZ), (1, AUTHZ)],
    }

    everything = through_frames(api_key, version, _name_keyed_request(api_key, ["secret-pay"]))
    result, _s = await run_check(p, FakeContext(api_key, version), everything)
    assert isinstance(result, Respond)  # nothing left to forward: answered by kgate
    out = response_through_frames(api_key, version, result.message)
    assert _per_partition_codes(api_key, out.topics) == {"secret-pay": [(0, AUTHZ), (1, AUTHZ)]}


def _error_topics(api_key: int, version: int, request: Any) -> list[Any]:
    """What a broker would answer for ``request`` with no error (the shape kgate's builder makes)."""
    resp = error_response(api_key, version, request, 0)
    assert resp is not None
    return list(resp.topics)


# -- Metadata requests: a denied name never reaches the broker (it could create it) ---------------
def _metadata_request(version: int, names: list[str], auto_create: bool = True) -> Any:
    from kgate.codec.generated.data.metadata import MetadataRequestTopic

    req = api.API_INFO[METADATA].request_class(topics=[MetadataRequestTopic(name=n) for n in names])
    req.allow_auto_topic_creation = auto_create
    return through_frames(METADATA, version, req)


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_metadata_request_cuts_denied_names_and_the_answer_gets_them_back(version: int) -> None:
    p = policy()
    ctx = FakeContext(METADATA, version)
    result = p.check(ctx, _metadata_request(version, ["orders", "secret-pay"]))
    assert isinstance(result, Forward)
    sent = through_frames(METADATA, version, result.message)
    assert [t.name for t in sent.topics] == ["orders"]
    assert p.check(FakeContext(METADATA, version), _metadata_request(version, ["orders"])) is FORWARD

    everything = p.check(ctx2 := FakeContext(METADATA, version), _metadata_request(version, ["secret-pay"]))
    assert isinstance(everything, Forward)  # still asked upstream, for the brokers and controller
    assert through_frames(METADATA, version, everything.message).topics == []
    broker = api.API_INFO[METADATA].response_class(topics=[_md_topic("orders"), _md_topic("other")])  # Tansu: all
    ctx2.request = everything.message
    out = response_through_frames(METADATA, version, p.described_topics(ctx2, broker).message)
    assert [(t.name, t.error_code) for t in out.topics] == [("secret-pay", AUTHZ)]  # only what was asked


def test_metadata_v0_naming_only_denied_topics_is_answered_by_kgate() -> None:
    """v0 has no way to ask for no topic (an empty list means all of them)."""
    result = policy().check(FakeContext(METADATA, 0), _metadata_request(0, ["secret-pay"]))
    assert isinstance(result, Respond)
    out = response_through_frames(METADATA, 0, result.message)
    assert [(t.name, t.error_code) for t in out.topics] == [("secret-pay", AUTHZ)]


def _md_topic(name: str, topic_id: Any = OK_ID) -> Any:
    from kgate.codec.generated.data.metadata import MetadataResponsePartition, MetadataResponseTopic

    part = MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1])
    return MetadataResponseTopic(error_code=0, name=name, topic_id=topic_id, partitions=[part])


def test_metadata_by_id_keeps_the_id_and_hides_the_name() -> None:
    from kgate.codec.generated.data.metadata import MetadataRequestTopic

    req = api.API_INFO[METADATA].request_class(
        topics=[MetadataRequestTopic(name=None, topic_id=i) for i in (OK_ID, SECRET_ID)]
    )
    req = through_frames(METADATA, 12, req)
    p = policy()
    assert p.check(FakeContext(METADATA, 12), req) is FORWARD  # ids: decided on the answer
    broker = api.API_INFO[METADATA].response_class(topics=[_md_topic("orders"), _md_topic("secret-pay", SECRET_ID)])
    out = response_through_frames(METADATA, 12, p.described_topics(FakeContext(METADATA, 12, req), broker).message)
    assert [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in out.topics] == [
        ("orders", OK_ID, 0, 1),
        (None, SECRET_ID, AUTHZ, 0),
    ]


# -- DescribeProducers, DescribeTransactions -------------------------------------------------------
async def test_describe_producers_refuses_denied_topics() -> None:
    from kgate.codec.generated.data.describe_producers import TopicRequest as DpTopic

    req = api.API_INFO[DESCRIBE_PRODUCERS].request_class(
        topics=[DpTopic(name=n, partition_indexes=[0, 1]) for n in ("orders", "secret-pay")]
    )
    req = through_frames(DESCRIBE_PRODUCERS, 0, req)
    ctx = FakeContext(DESCRIBE_PRODUCERS, 0)
    result, _s = await run_check(policy(), ctx, req)
    assert [t.name for t in through_frames(DESCRIBE_PRODUCERS, 0, result.message).topics] == ["orders"]
    merged = policy().merge(ctx, api.API_INFO[DESCRIBE_PRODUCERS].response_class(topics=[]))
    out = response_through_frames(DESCRIBE_PRODUCERS, 0, merged.message)
    assert [(t.name, [(q.partition_index, q.error_code) for q in t.partitions]) for t in out.topics] == [
        ("secret-pay", [(0, AUTHZ), (1, AUTHZ)])
    ]


def test_describe_transactions_leaves_denied_topics_out() -> None:
    from kgate.codec.generated.transactions.describe_transactions import TopicData, TransactionState

    state = TransactionState(
        error_code=0,
        transactional_id="tx",
        transaction_state="Ongoing",
        transaction_timeout_ms=60000,
        transaction_start_time_ms=1,
        producer_id=7,
        producer_epoch=0,
        topics=[TopicData(topic="orders", partitions=[0]), TopicData(topic="secret-pay", partitions=[1, 2])],
    )
    resp_cls = api.API_INFO[DESCRIBE_TRANSACTIONS].response_class
    resp = response_through_frames(DESCRIBE_TRANSACTIONS, 0, resp_cls(transaction_states=[state]))
    result = policy().transactions(FakeContext(DESCRIBE_TRANSACTIONS, 0), resp)
    out = response_through_frames(DESCRIBE_TRANSACTIONS, 0, result.message)
    assert [(t.topic, t.partitions) for t in out.transaction_states[0].topics] == [("orders", [0])]
    clean = response_through_frames(
        DESCRIBE_TRANSACTIONS, 0, resp_cls(transaction_states=[TransactionState(transactional_id="t2", topics=[])])
    )
    assert policy().transactions(FakeContext(DESCRIBE_TRANSACTIONS, 0), clean) is FORWARD
