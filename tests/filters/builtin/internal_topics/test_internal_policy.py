"""``internal-topics``, the pure parts: KIP-619's table, the config, the marks' record format and table.

And the hooks on the versions the test brokers lack (Produce v13 by id; DeleteTopics v6 by id is
also run end to end), driven with spec-built messages through real frame bytes and kgate's
``FakeContext``.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

import pytest

from kgate import testing
from kgate.api import FORWARD, ApiKey, ErrorCode, FilterConfigError, Respond
from kgate.codec.generated.admin.delete_topics import DeleteTopicsRequest, DeleteTopicState
from kgate.codec.generated.data.metadata import MetadataResponse, MetadataResponseTopic
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.codec.records import encode_batch
from kgate.filters.builtin.internal_topics.filter import InternalTopics
from kgate.filters.builtin.internal_topics.marks import MarkTable, mark_key, mark_value, parse_mark
from kgate.filters.builtin.internal_topics.policy import Classifier, Kind, is_internal, parse_internal, refusal

INVALID_TOPIC = ErrorCode.INVALID_TOPIC_EXCEPTION
AUTHZ = ErrorCode.TOPIC_AUTHORIZATION_FAILED


# -- KIP-619's table ------------------------------------------------------------------------
def classifier() -> Classifier:
    return Classifier(["__consumer_offsets", "__transaction_state"], ["connect-*"], "__kgate_internal_topics")


def test_kinds() -> None:
    c = classifier()
    assert c.kind("__consumer_offsets") is Kind.SYSTEM
    assert c.kind("__share_group_state", broker_internal={"__share_group_state"}) is Kind.SYSTEM
    assert c.kind("connect-configs") is Kind.USER  # configured pattern
    assert c.kind("orders", marked=True) is Kind.USER  # internal=true mark
    assert c.kind("orders") is None
    assert c.kind("__kgate_internal_topics") is Kind.KGATE
    # a system topic that is also marked stays system: the refusals apply
    assert c.kind("__consumer_offsets", marked=True) is Kind.SYSTEM


@pytest.mark.parametrize(
    ("api_key", "system", "user"),
    [
        (ApiKey.PRODUCE, INVALID_TOPIC, None),
        (ApiKey.DELETE_TOPICS, INVALID_TOPIC, None),
        (ApiKey.DELETE_RECORDS, INVALID_TOPIC, None),
        (ApiKey.CREATE_TOPICS, None, None),
        (ApiKey.ADD_PARTITIONS_TO_TXN, None, None),
        (ApiKey.FETCH, None, None),
    ],
)
def test_refusals_follow_kip_619(api_key: int, system: int | None, user: int | None) -> None:
    assert refusal(api_key, Kind.SYSTEM) == system
    assert refusal(api_key, Kind.USER) == user
    assert refusal(api_key, None) is None
    assert refusal(api_key, Kind.KGATE) == AUTHZ  # kgate's own topic: refused to clients on every RPC


def test_listed_as_internal() -> None:
    assert is_internal(Kind.SYSTEM)
    assert is_internal(Kind.USER)
    assert not is_internal(None)
    assert not is_internal(Kind.KGATE)


@pytest.mark.parametrize(
    ("value", "parsed"), [("true", True), ("TRUE", True), (" false ", False), ("yes", None), (None, None)]
)
def test_internal_config_values(value: str | None, parsed: bool | None) -> None:
    assert parse_internal(value) is parsed


# -- config -----------------------------------------------------------------------------------
def test_defaults_work_with_no_config() -> None:
    cfg = InternalTopics.validate_config({})
    assert cfg["system_topics"] == ["__consumer_offsets", "__transaction_state"]
    assert cfg["user_topics"] == []
    assert cfg["marks_topic"] == "__kgate_internal_topics"
    assert cfg["poll_interval_ms"] == 1000
    InternalTopics(cfg)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"user_topics": 5}, "user_topics: expected a list of topic name patterns"),
        ({"system_topics": [""]}, "system_topics: expected a list"),
        ({"marks_topic": "a*"}, "marks_topic: expected a topic name"),
        ({"poll_interval_ms": 10}, "poll_interval_ms: expected an integer from 50"),
        ({"write_timeout_ms": "5s"}, "write_timeout_ms: expected an integer"),
        ({"bogus": 1}, "unknown keys ['bogus']"),
    ],
)
def test_config_errors_name_the_key(config: dict[str, Any], message: str) -> None:
    with pytest.raises(FilterConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        InternalTopics.validate_config(config)


# -- marks: record format and table -----------------------------------------------------------
def test_mark_record_format() -> None:
    tid = uuid.uuid4()
    key = mark_key(tid)
    assert len(key) == 17
    assert key[0] == 1
    assert key[1:] == tid.bytes
    assert parse_mark(key, mark_value("orders", at_ms=5, by="kgate/a")) == (tid, "orders")
    assert parse_mark(key, None) == (tid, None)  # tombstone: unmarked
    assert parse_mark(key, b'{"name":"orders","internal":false}') == (tid, None)
    assert parse_mark(b"\x02" + tid.bytes, mark_value("x", at_ms=1, by="y")) is None  # a newer format: skipped
    assert parse_mark(key, b"not json") is None
    assert parse_mark(key, b'{"internal":true}') is None


def test_a_recreated_topic_does_not_inherit_the_mark() -> None:
    old, new = uuid.uuid4(), uuid.uuid4()
    table = MarkTable()
    table.apply(old, "orders")
    assert table.marked_id(old)
    assert not table.marked_id(new)
    assert table.marked_name("orders")  # current id unknown: the name's mark counts
    assert not table.marked_name("orders", current_id=new)  # kgate knows the name now has a new id
    assert table.marked_name("orders", current_id=old)
    table.apply(old, None)
    assert not table.marked_name("orders")
    assert table.by_id == {}


# -- hooks on spec-built frames: Produce v13 and DeleteTopics v6 by id ---------------------------
OFFSETS_ID, MARKED_ID, PLAIN_ID, GONE_ID = (uuid.uuid4() for _ in range(4))
NAMES = {OFFSETS_ID: "__consumer_offsets", MARKED_ID: "connect-offsets-x", PLAIN_ID: "orders"}


def _filter() -> InternalTopics:
    f = InternalTopics(InternalTopics.validate_config({}))
    f.store.table.apply(MARKED_ID, "connect-offsets-x")
    f.store.ready.set()
    return f


async def _run(hook: Any, ctx: Any, message: Any) -> tuple[Any, bool]:
    result = hook(ctx, message)
    suspended = inspect.isawaitable(result)
    return (await result if suspended else result), suspended


def _produce(*ids: uuid.UUID) -> Any:
    batch = encode_batch([(None, b"v")], timestamp_ms=1)
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(name="", topic_id=t, partition_data=[PartitionProduceData(index=0, records=batch)])
            for t in ids
        ],
    )
    return testing.round_trip_request(ApiKey.PRODUCE, 13, req)


async def test_produce_v13_by_id_refuses_system_topics_and_passes_user_ones() -> None:
    f = _filter()
    ctx = testing.FakeContext(ApiKey.PRODUCE, 13, cache={MARKED_ID: NAMES[MARKED_ID]}, cluster=NAMES)
    result, suspended = await _run(f.check, ctx, _produce(OFFSETS_ID, MARKED_ID))
    assert suspended
    assert ctx.lookups == [[OFFSETS_ID]]
    resp = testing.round_trip_response(ApiKey.PRODUCE, 13, _merged(f, ctx, result))
    codes = {t.topic_id: t.partition_responses[0].error_code for t in resp.responses}
    assert codes == {OFFSETS_ID: INVALID_TOPIC, MARKED_ID: 0}


def _merged(f: InternalTopics, ctx: Any, result: Any) -> Any:
    """The client's answer: kgate's own, or the broker's (all ok) with the refusals merged in."""
    if isinstance(result, Respond):
        return result.message
    from kgate.codec.generated.data.produce import PartitionProduceResponse, ProduceResponse, TopicProduceResponse

    broker = ProduceResponse(
        responses=[
            TopicProduceResponse(name="", topic_id=t.topic_id, partition_responses=[PartitionProduceResponse(index=0)])
            for t in result.message.topic_data
        ]
    )
    merged = f.merge(ctx.for_response(), broker)
    return merged.message


async def test_produce_v13_unknown_or_unresolvable_ids_fail_closed() -> None:
    f = _filter()
    ctx = testing.FakeContext(ApiKey.PRODUCE, 13, cluster=NAMES)
    result, _ = await _run(f.check, ctx, _produce(GONE_ID))
    assert isinstance(result, Respond)
    assert result.message.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


async def test_produce_by_known_names_decides_synchronously() -> None:
    f = _filter()
    ctx = testing.FakeContext(ApiKey.PRODUCE, 13, cache=NAMES)
    result, suspended = await _run(f.check, ctx, _produce(PLAIN_ID, MARKED_ID))
    assert result is FORWARD
    assert not suspended


def _produce_v9(name: str) -> Any:
    batch = encode_batch([(None, b"v")], timestamp_ms=1)
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[TopicProduceData(name=name, partition_data=[PartitionProduceData(index=0, records=batch)])],
    )
    return testing.round_trip_request(ApiKey.PRODUCE, 9, req)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("orders", None),
        ("connect-offsets-x", None),
        ("__consumer_offsets", INVALID_TOPIC),
        ("__kgate_internal_topics", AUTHZ),
    ],
)
async def test_single_topic_produce_by_name(name: str, code: int | None) -> None:
    """One topic (the shortcut every peeked Produce takes) answers as the general loop does."""
    f = _filter()
    ctx = testing.FakeContext(ApiKey.PRODUCE, 9)
    result, suspended = await _run(f.check, ctx, _produce_v9(name))
    assert not suspended
    if code is None:
        assert result is FORWARD
    else:
        assert isinstance(result, Respond)
        assert [(t.name, t.partition_responses[0].error_code) for t in result.message.responses] == [(name, code)]


@pytest.mark.parametrize(
    ("topic_id", "cached", "code", "looked_up"),
    [
        (PLAIN_ID, True, None, False),  # known, plain: at once
        (OFFSETS_ID, True, INVALID_TOPIC, False),  # known, system: refused at once
        (OFFSETS_ID, False, INVALID_TOPIC, True),  # not cached: looked up, then refused
        (GONE_ID, False, ErrorCode.UNKNOWN_TOPIC_ID, True),  # cannot be named: fail closed
    ],
)
async def test_single_topic_produce_by_id(topic_id: uuid.UUID, cached: bool, code: int | None, looked_up: bool) -> None:
    f = _filter()
    cache = {topic_id: NAMES[topic_id]} if cached else {}
    ctx = testing.FakeContext(ApiKey.PRODUCE, 13, cache=cache, cluster=NAMES)
    result, suspended = await _run(f.check, ctx, _produce(topic_id))
    assert suspended == looked_up
    assert ctx.lookups == ([[topic_id]] if looked_up else [])
    if code is None:
        assert result is FORWARD
    else:
        assert isinstance(result, Respond)
        answered = [(t.topic_id, t.partition_responses[0].error_code) for t in result.message.responses]
        assert answered == [(topic_id, code)]


async def test_delete_topics_v6_by_id_refuses_system_with_a_message_and_allows_user() -> None:
    f = _filter()
    req = DeleteTopicsRequest(
        topics=[DeleteTopicState(name=None, topic_id=OFFSETS_ID), DeleteTopicState(name=None, topic_id=MARKED_ID)],
        timeout_ms=1000,
    )
    req = testing.round_trip_request(ApiKey.DELETE_TOPICS, 6, req)
    ctx = testing.FakeContext(ApiKey.DELETE_TOPICS, 6, cluster=NAMES)
    result, suspended = await _run(f.check, ctx, req)
    assert suspended
    assert [t.topic_id for t in result.message.topics] == [MARKED_ID]  # the user-defined one goes on
    from kgate.codec.generated.admin.delete_topics import DeletableTopicResult, DeleteTopicsResponse

    broker = DeleteTopicsResponse(responses=[DeletableTopicResult(name="connect-offsets-x", topic_id=MARKED_ID)])
    out = f.deleted(ctx.for_response(), broker)
    resp = testing.round_trip_response(ApiKey.DELETE_TOPICS, 6, out.message)
    by_id = {r.topic_id: r for r in resp.responses}
    assert by_id[MARKED_ID].error_code == 0
    assert by_id[OFFSETS_ID].error_code == INVALID_TOPIC
    assert "Cannot delete the system-defined internal topic __consumer_offsets" in by_id[OFFSETS_ID].error_message


def test_metadata_marks_both_kinds_and_hides_the_marks_topic() -> None:
    f = _filter()
    topics = [
        MetadataResponseTopic(name="__consumer_offsets", topic_id=OFFSETS_ID, is_internal=False, partitions=[]),
        MetadataResponseTopic(name="connect-offsets-x", topic_id=MARKED_ID, is_internal=False, partitions=[]),
        MetadataResponseTopic(name="orders", topic_id=PLAIN_ID, is_internal=False, partitions=[]),
        MetadataResponseTopic(name="__kgate_internal_topics", topic_id=GONE_ID, is_internal=False, partitions=[]),
    ]
    for version in (1, 9, 12):
        resp = MetadataResponse(
            brokers=[], topics=[MetadataResponseTopic(**{s: getattr(t, s) for s in t.__slots__}) for t in topics]
        )
        ctx = testing.FakeContext(ApiKey.METADATA, version)
        out = f.described_topics(ctx.for_response(), resp)
        got = testing.round_trip_response(ApiKey.METADATA, version, out.message)
        assert {t.name: t.is_internal for t in got.topics} == {
            "__consumer_offsets": True,
            "connect-offsets-x": True,
            "orders": False,
        }, version


# -- waiting for the marks, and a mark that cannot be written ------------------------------------
async def test_listings_wait_for_the_first_read_of_marks_once_at_most() -> None:
    f = InternalTopics(InternalTopics.validate_config({"ready_timeout_ms": 0}))  # never started: never ready
    resp = MetadataResponse(
        brokers=[], topics=[MetadataResponseTopic(name="orders", topic_id=PLAIN_ID, is_internal=False, partitions=[])]
    )
    ctx = testing.FakeContext(ApiKey.METADATA, 12).for_response()
    first = f.described_topics(ctx, resp)
    assert inspect.isawaitable(first)  # waits (here: not at all) for the marks
    await first
    assert f.described_topics(ctx, resp) is FORWARD  # after a timeout, later answers do not wait


async def test_create_topics_answers_an_error_when_the_mark_cannot_be_written() -> None:
    from kgate.codec.generated.admin.create_topics import (
        CreatableTopic,
        CreatableTopicConfig,
        CreatableTopicResult,
        CreateTopicsRequest,
        CreateTopicsResponse,
    )
    from kgate.filters.builtin.internal_topics.marks import MarkWriteError

    f = _filter()

    async def broken(entries: Any) -> None:
        raise MarkWriteError("writing to __kgate_internal_topics failed for 5s: no broker reachable")

    f.store.write = broken  # type: ignore[method-assign]
    req = CreateTopicsRequest(
        topics=[
            CreatableTopic(
                name="connect-configs",
                num_partitions=1,
                replication_factor=1,
                assignments=[],
                configs=[
                    CreatableTopicConfig(name="internal", value="true"),
                    CreatableTopicConfig(name="cleanup.policy", value="compact"),
                ],
            )
        ],
        timeout_ms=1000,
    )
    req = testing.round_trip_request(ApiKey.CREATE_TOPICS, 7, req)
    ctx = testing.FakeContext(ApiKey.CREATE_TOPICS, 7)
    out = f.create_topics(ctx, req)
    assert [c.name for c in out.message.topics[0].configs] == ["cleanup.policy"]  # internal taken out
    broker = CreateTopicsResponse(topics=[CreatableTopicResult(name="connect-configs", topic_id=PLAIN_ID, configs=[])])
    result = await f.created(ctx.for_response(), broker)
    resp = testing.round_trip_response(ApiKey.CREATE_TOPICS, 7, result.message)
    (t,) = resp.topics
    assert t.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "could not record internal=true" in t.error_message
    assert "IncrementalAlterConfigs" in t.error_message


def test_check_config_reports_the_key_path(tmp_path: Any, capsys: Any) -> None:
    """As a user meets it: ``kgate check-config`` names the file, the filter entry and the key."""
    from kgate.proxy.runtime import cli

    good = tmp_path / "good.yaml"
    good.write_text(
        "virtual_clusters: [{name: a, listen: 127.0.0.1:19192, upstream: 127.0.0.1:9092}]\n"
        "filters: [{name: internal-topics}]\n"
    )
    assert cli.main(["check-config", str(good)]) == 0
    assert "filters: internal-topics" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "virtual_clusters: [{name: a, listen: 127.0.0.1:19192, upstream: 127.0.0.1:9092}]\n"
        "filters: [{name: internal-topics, config: {poll_interval_ms: 10}}]\n"
    )
    assert cli.main(["check-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"kgate: config error: {bad}: filters[0].config: poll_interval_ms: "
        "expected an integer from 50 to 60000 (milliseconds), got 10\n"
    )


@pytest.mark.parametrize("incremental", [True, False])
def test_config_changes_refused_for_the_marks_topic_and_bad_values(incremental: bool) -> None:
    from kgate.codec.generated.admin import alter_configs as ac
    from kgate.codec.generated.admin import incremental_alter_configs as iac

    f = _filter()
    if incremental:
        api_key, version = ApiKey.INCREMENTAL_ALTER_CONFIGS, 1
        req = iac.IncrementalAlterConfigsRequest(
            resources=[
                iac.AlterConfigsResource(
                    resource_type=2,
                    resource_name="__kgate_internal_topics",
                    configs=[iac.AlterableConfig(name="cleanup.policy", config_operation=0, value="delete")],
                ),
                iac.AlterConfigsResource(
                    resource_type=2,
                    resource_name="orders",
                    configs=[iac.AlterableConfig(name="internal", config_operation=2, value="true")],
                ),  # APPEND
            ]
        )
    else:
        api_key, version = ApiKey.ALTER_CONFIGS, 2
        req = ac.AlterConfigsRequest(
            resources=[
                ac.AlterConfigsResource(resource_type=2, resource_name="__kgate_internal_topics", configs=[]),
                ac.AlterConfigsResource(
                    resource_type=2,
                    resource_name="orders",
                    configs=[ac.AlterableConfig(name="internal", value="maybe")],
                ),
            ]
        )
    req = testing.round_trip_request(api_key, version, req)
    result = f.alter_configs(testing.FakeContext(api_key, version), req)
    assert isinstance(result, Respond)  # nothing left to send upstream
    resp = testing.round_trip_response(api_key, version, result.message)
    assert {r.resource_name: r.error_code for r in resp.responses} == {
        "__kgate_internal_topics": AUTHZ,
        "orders": ErrorCode.INVALID_CONFIG,
    }
