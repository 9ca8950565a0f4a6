"""The ``guardrails`` filter's hooks, bound by bound, through real frame bytes at every version.

Requests are built from the generated classes, put through the wire and kgate's decoder
(``kgate.testing.round_trip_request``), given to the hook as kgate's chain would, and the answers
kgate makes are encoded and decoded again at the request's version: what a client would read.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kgate import testing
from kgate.api import FORWARD, ApiKey, Close, ErrorCode, Forward, Respond
from kgate.filters.builtin.guardrails import report as guardrail_report
from kgate.filters.builtin.guardrails.filter import Guardrails
from kgate.filters.chain import FilterChain
from kgate.filters.exchanges import POLICY_STATE_KEY
from kgate.proxy.sansio.plans import Plans, RequestPlan

HUGE = 1_111_556_097  # the partition count that made Tansu allocate 106 GB
CT, CP = ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS
AC, IAC = ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS
TOPIC, BROKER = 2, 4  # config resource types


def guardrails(**config: Any) -> Guardrails:
    return Guardrails(Guardrails.validate_config(config))


def struct(cls: type, path: str, **fields: Any) -> Any:
    for attr in path.split("."):
        cls = next(f.struct for f in cls._FIELDS if f.name == attr)  # type: ignore[attr-defined]
    return cls(**fields)


def topic(name: str, partitions: int = 3, rf: int = 1, assignments: Any = (), configs: Any = ()) -> Any:
    cls = testing.request_class(CT)
    return struct(
        cls,
        "topics",
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=[
            struct(cls, "topics.assignments", partition_index=i, broker_ids=list(b)) for i, b in enumerate(assignments)
        ],
        configs=[struct(cls, "topics.configs", name=k, value=v) for k, v in configs],
    )


def create_topics(version: int, *topics: Any, validate_only: bool = False) -> Any:
    msg = testing.request_class(CT)(topics=list(topics), timeout_ms=5000, validate_only=validate_only)
    return testing.round_trip_request(CT, version, msg)


def run(f: Guardrails, api_key: int, version: int, request: Any) -> tuple[Any, testing.FakeContext]:
    ctx = testing.FakeContext(api_key, version)
    hooks = [getattr(f, attr) for attr, spec in f.hooks if spec.direction == "request" and spec.api_key == api_key]
    assert len(hooks) == 1
    result = hooks[0](ctx, request)
    return (FORWARD if result is None else result), ctx


def answered(result: Any, api_key: int, version: int) -> Any:
    """kgate's own answer, as the client reads it."""
    assert isinstance(result, Respond), result
    return testing.round_trip_response(api_key, version, result.message)


def merged(f: Guardrails, ctx: testing.FakeContext, api_key: int, version: int, broker_answer: Any) -> Any:
    hook = next(getattr(f, a) for a, s in f.hooks if s.direction == "response" and s.api_key == api_key)
    result = hook(ctx.for_response(), broker_answer)
    assert isinstance(result, Forward)
    assert result.message is not None
    return testing.round_trip_response(api_key, version, result.message)


def refusals(cluster: str, rule: str, api: str) -> float:
    return (
        REGISTRY.get_sample_value("kgate_guardrail_refusals_total", {"cluster": cluster, "rule": rule, "api": api})
        or 0.0
    )


# -- CreateTopics ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(2, 8))
def test_the_partition_count_that_killed_tansu_is_refused_at_every_version(version: int) -> None:
    before = refusals("test", "partitions_per_topic", "CreateTopics")
    result, ctx = run(guardrails(), CT, version, create_topics(version, topic("boom", HUGE)))
    answer = answered(result, CT, version)
    [t] = answer.topics
    assert (t.name, t.error_code) == ("boom", ErrorCode.INVALID_PARTITIONS)
    assert "10000" in t.error_message
    assert "partitions.max_per_topic" in t.error_message
    if version >= 5:
        assert (t.num_partitions, t.replication_factor) == (-1, -1)
    assert refusals("test", "partitions_per_topic", "CreateTopics") == before + 1
    assert ctx.state[POLICY_STATE_KEY][0]["filter"] == "guardrails"  # the audit log's "policy"


@pytest.mark.parametrize("version", range(2, 8))
def test_a_refused_topic_leaves_the_others_to_the_broker_and_is_merged_into_its_answer(version: int) -> None:
    f = guardrails()
    result, ctx = run(f, CT, version, create_topics(version, topic("ok", 3), topic("wide", 3, rf=100)))
    assert isinstance(result, Forward)
    assert [t.name for t in result.message.topics] == ["ok"]
    sent = testing.round_trip_request(CT, version, result.message)  # what goes upstream encodes
    assert [t.name for t in sent.topics] == ["ok"]
    resp_cls = testing.response_class(CT)
    broker = resp_cls(
        topics=[struct(resp_cls, "topics", name="ok", error_code=0, num_partitions=3, replication_factor=1)]
    )
    answer = merged(f, ctx, CT, version, broker)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("ok", 0),
        ("wide", ErrorCode.INVALID_REPLICATION_FACTOR),
    ]
    assert "Replication factor 100" in answer.topics[1].error_message


def test_topics_within_every_bound_go_on_as_the_original_bytes() -> None:
    configs = [("retention.ms", "86400000"), ("segment.bytes", "1073741824")]
    req = create_topics(
        7,
        topic("orders", 12, 3, configs=configs),
        topic("defaults", -1, -1),
        topic("placed", -1, -1, assignments=[[1, 2], [2, 3]]),
    )
    assert run(guardrails(), CT, 7, req)[0] is FORWARD


@pytest.mark.parametrize(
    ("kwargs", "code", "words"),
    [
        ({"partitions": 0}, ErrorCode.INVALID_PARTITIONS, "below the minimum of 1"),
        ({"partitions": -7}, ErrorCode.INVALID_PARTITIONS, "below the minimum"),
        ({"partitions": 10_001}, ErrorCode.INVALID_PARTITIONS, "above the limit of 10000"),
        ({"rf": 0}, ErrorCode.INVALID_REPLICATION_FACTOR, "outside 1-16"),
        ({"rf": 17}, ErrorCode.INVALID_REPLICATION_FACTOR, "outside 1-16"),
        ({"partitions": -1, "rf": -1, "assignments": [[1]] * 10_001}, ErrorCode.INVALID_PARTITIONS, "10001"),
        ({"partitions": -1, "rf": -1, "assignments": [list(range(20))]}, ErrorCode.INVALID_REPLICATION_FACTOR, "20"),
        ({"configs": [("segment.bytes", "100")]}, ErrorCode.POLICY_VIOLATION, "at least 1048576"),
        ({"configs": [("segment.bytes", "lots")]}, ErrorCode.POLICY_VIOLATION, "not an integer"),
    ],
)
def test_each_bound_refuses_with_kafkas_code_and_names_the_limit(kwargs: dict[str, Any], code: int, words: str) -> None:
    result, _ctx = run(guardrails(), CT, 6, create_topics(6, topic("t", **kwargs)))
    [t] = answered(result, CT, 6).topics
    assert t.error_code == code, t.error_message
    assert words in t.error_message, t.error_message


@pytest.mark.parametrize("name", ["a" * 250, "has space", "émoji", "slash/es"])
def test_topic_names_kafka_would_not_accept_are_refused(name: str) -> None:
    result, _ctx = run(guardrails(), CT, 7, create_topics(7, topic(name)))
    [t] = answered(result, CT, 7).topics
    assert t.error_code == ErrorCode.POLICY_VIOLATION
    assert "topic_name" in t.error_message


def test_a_configured_name_pattern_and_config_lists_apply() -> None:
    f = guardrails(
        topic_name={"pattern": r"(orders|payments)\.[a-z]+"},
        topic_configs={"deny": ["unclean.leader.election.enable"], "ranges": {"retention.ms": {"max": 604800000}}},
    )
    req = create_topics(
        7,
        topic("orders.eu"),
        topic("misc"),
        topic("payments.x", configs=[("retention.ms", "999999999999")]),
        topic("orders.us", configs=[("unclean.leader.election.enable", "true")]),
    )
    result, ctx = run(f, CT, 7, req)
    assert isinstance(result, Forward)
    assert [t.name for t in result.message.topics] == ["orders.eu"]
    answer = merged(f, ctx, CT, 7, testing.response_class(CT)(topics=[]))
    assert {t.name: t.error_code for t in answer.topics} == dict.fromkeys(["misc", "payments.x", "orders.us"], 44)
    messages = {t.name: t.error_message for t in answer.topics}
    assert "does not match" in messages["misc"]
    assert "at most 604800000" in messages["payments.x"]
    assert "topic_configs.deny" in messages["orders.us"]
    allow_only = guardrails(topic_configs={"allow": ["retention.ms"]})
    result, _ctx = run(allow_only, CT, 7, create_topics(7, topic("t", configs=[("cleanup.policy", "compact")])))
    assert "topic_configs.allow" in answered(result, CT, 7).topics[0].error_message


def test_partitions_per_request_refuses_the_topics_past_the_limit() -> None:
    req = create_topics(7, *(topic(f"t{i}", 10_000) for i in range(6)))
    result, _ctx = run(guardrails(), CT, 7, req)
    assert isinstance(result, Forward)
    assert len(result.message.topics) == 5
    result, _ctx = run(guardrails(partitions={"max_per_request": 25_000}), CT, 7, req)
    assert isinstance(result, Forward)
    assert len(result.message.topics) == 2


def test_validate_only_is_refused_too_as_kafkas_policy_is() -> None:
    result, _ctx = run(guardrails(), CT, 7, create_topics(7, topic("x", HUGE), validate_only=True))
    assert answered(result, CT, 7).topics[0].error_code == ErrorCode.INVALID_PARTITIONS


# -- CreatePartitions -----------------------------------------------------------------------------
def create_partitions(version: int, *topics: tuple[str, int, list[list[int]]]) -> Any:
    cls = testing.request_class(CP)
    msg = cls(
        topics=[
            struct(
                cls,
                "topics",
                name=n,
                count=c,
                assignments=[struct(cls, "topics.assignments", broker_ids=b) for b in a] or None,
            )
            for n, c, a in topics
        ],
        timeout_ms=5000,
        validate_only=False,
    )
    return testing.round_trip_request(CP, version, msg)


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_bounds_the_new_count_and_the_assignments(version: int) -> None:
    f = guardrails()
    req = create_partitions(version, ("ok", 6, []), ("huge", HUGE, []), ("wide", 4, [list(range(17))]))
    result, ctx = run(f, CP, version, req)
    assert isinstance(result, Forward)
    assert [t.name for t in result.message.topics] == ["ok"]
    rcls = testing.response_class(CP)
    broker = rcls(results=[struct(rcls, "results", name="ok", error_code=0)])
    answer = merged(f, ctx, CP, version, broker)
    assert [(r.name, r.error_code) for r in answer.results] == [
        ("ok", 0),
        ("huge", ErrorCode.INVALID_PARTITIONS),
        ("wide", ErrorCode.INVALID_REPLICATION_FACTOR),
    ]
    assert "partitions.max_per_topic" in answer.results[1].error_message
    only_bad = create_partitions(version, ("huge", HUGE, []))
    assert answered(run(f, CP, version, only_bad)[0], CP, version).results[0].error_code == ErrorCode.INVALID_PARTITIONS


# -- AlterConfigs, IncrementalAlterConfigs ---------------------------------------------------------
def alter_configs(version: int, *resources: tuple[int, str, list[tuple[str, str | None]]]) -> Any:
    cls = testing.request_class(AC)
    msg = cls(
        resources=[
            struct(
                cls,
                "resources",
                resource_type=t,
                resource_name=n,
                configs=[struct(cls, "resources.configs", name=k, value=v) for k, v in c],
            )
            for t, n, c in resources
        ],
        validate_only=False,
    )
    return testing.round_trip_request(AC, version, msg)


@pytest.mark.parametrize("version", range(0, 3))
def test_alter_configs_refuses_out_of_range_topic_configs_per_resource(version: int) -> None:
    f = guardrails()
    req = alter_configs(
        version,
        (TOPIC, "good", [("segment.bytes", "2097152")]),
        (TOPIC, "bad", [("segment.bytes", "1")]),
        (BROKER, "1", [("log.segment.bytes", "1")]),
    )  # broker resources are not bounded
    result, ctx = run(f, AC, version, req)
    assert isinstance(result, Forward)
    assert [r.resource_name for r in result.message.resources] == ["good", "1"]
    rcls = testing.response_class(AC)
    broker = rcls(
        responses=[
            struct(rcls, "responses", resource_type=TOPIC, resource_name="good", error_code=0),
            struct(rcls, "responses", resource_type=BROKER, resource_name="1", error_code=0),
        ]
    )
    answer = merged(f, ctx, AC, version, broker)
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [
        ("good", 0),
        ("1", 0),
        ("bad", ErrorCode.POLICY_VIOLATION),
    ]
    assert answer.responses[2].resource_type == TOPIC
    assert "segment.bytes" in answer.responses[2].error_message


def incremental(version: int, *resources: tuple[str, list[tuple[str, int, str | None]]]) -> Any:
    cls = testing.request_class(IAC)
    msg = cls(
        resources=[
            struct(
                cls,
                "resources",
                resource_type=TOPIC,
                resource_name=n,
                configs=[struct(cls, "resources.configs", name=k, config_operation=op, value=v) for k, op, v in c],
            )
            for n, c in resources
        ],
        validate_only=False,
    )
    return testing.round_trip_request(IAC, version, msg)


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs_checks_values_it_sets_and_names_it_touches(version: int) -> None:
    f = guardrails(topic_configs={"deny": ["min.insync.replicas"]})
    ok = incremental(
        version,
        ("a", [("segment.bytes", 1, None)]),  # DELETE: back to the default, no value
        ("b", [("segment.bytes", 0, "1073741824")]),
    )
    assert run(f, IAC, version, ok)[0] is FORWARD
    bad = incremental(version, ("c", [("segment.bytes", 0, "1024")]), ("d", [("min.insync.replicas", 1, None)]))
    answer = answered(run(f, IAC, version, bad)[0], IAC, version)
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [("c", 44), ("d", 44)]
    assert "topic_configs.deny" in answer.responses[1].error_message


# -- Produce -----------------------------------------------------------------------------------------
def produce(version: int, acks: int, *topics: tuple[str, dict[int, int]]) -> Any:
    cls = testing.request_class(ApiKey.PRODUCE)
    tid = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name, _ in topics}
    msg = cls(
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            struct(
                cls,
                "topic_data",
                name=name if version < 13 else "",
                topic_id=tid[name] if version >= 13 else uuid.UUID(int=0),
                partition_data=[
                    struct(cls, "topic_data.partition_data", index=i, records=b"r" * size) for i, size in parts.items()
                ],
            )
            for name, parts in topics
        ],
    )
    return testing.round_trip_request(ApiKey.PRODUCE, version, msg)


def test_without_produce_rules_produce_is_not_hooked_and_stays_on_the_header_only_path() -> None:
    f = guardrails()
    assert not [s for _a, s in f.hooks if s.api_key == ApiKey.PRODUCE]
    chain = FilterChain([f])
    plans = Plans(chain, chain.version_limits(), False, lambda k, v: [0])
    assert plans.request(ApiKey.PRODUCE, 9) is RequestPlan.TRACK
    assert plans.request(ApiKey.FETCH, 15) is RequestPlan.TRACK
    assert plans.request(CT, 7) is RequestPlan.FILTER
    acks_only = FilterChain([guardrails(produce={"acks": [-1]})])
    peek = Plans(acks_only, acks_only.version_limits(), False, lambda k, v: [0])
    assert peek.request(ApiKey.PRODUCE, 9) is RequestPlan.PEEK
    sizes = FilterChain([guardrails(produce={"max_batch_bytes": 1000})])
    whole = Plans(sizes, sizes.version_limits(), False, lambda k, v: [0])
    assert whole.request(ApiKey.PRODUCE, 9) is RequestPlan.FILTER


@pytest.mark.parametrize("version", [3, 7, 9, 11, 13])
def test_acks_not_allowed_are_refused_per_partition_and_allowed_ones_stream(version: int) -> None:
    f = guardrails(produce={"acks": ["all"]})
    assert run(f, ApiKey.PRODUCE, version, produce(version, -1, ("t", {0: 10})))[0] is FORWARD
    peeked = produce(version, 1, ("t", {}))  # what a peek sees: header fields, the topic, no partitions
    before = refusals("test", "produce_acks", "Produce")
    result, _ctx = run(f, ApiKey.PRODUCE, version, peeked)
    assert result is not FORWARD
    assert refusals("test", "produce_acks", "Produce") == before
    result, _ctx = run(f, ApiKey.PRODUCE, version, produce(version, 1, ("t", {0: 10, 1: 10}), ("u", {0: 5})))
    answer = answered(result, ApiKey.PRODUCE, version)
    assert [[p.error_code for p in t.partition_responses] for t in answer.responses] == [[44, 44], [44]]
    if version >= 8:
        assert "produce.acks" in answer.responses[0].partition_responses[0].error_message
    assert refusals("test", "produce_acks", "Produce") == before + 1
    result, _ctx = run(f, ApiKey.PRODUCE, version, produce(version, 0, ("t", {0: 10})))
    assert isinstance(result, Close)
    assert "acks=0" in result.reason


@pytest.mark.parametrize("version", [3, 9, 13])
def test_oversized_batches_are_refused_per_partition_and_the_rest_is_written(version: int) -> None:
    f = guardrails(produce={"max_batch_bytes": 100})
    result, ctx = run(f, ApiKey.PRODUCE, version, produce(version, -1, ("t", {0: 100, 1: 101}), ("u", {0: 500})))
    assert isinstance(result, Forward)
    sent = testing.round_trip_request(ApiKey.PRODUCE, version, result.message)
    assert [[p.index for p in t.partition_data] for t in sent.topic_data] == [[0]]
    rcls = testing.response_class(ApiKey.PRODUCE)
    key = sent.topic_data[0]
    broker = rcls(
        responses=[
            struct(
                rcls,
                "responses",
                name=key.name,
                topic_id=key.topic_id,
                partition_responses=[
                    struct(rcls, "responses.partition_responses", index=0, error_code=0, base_offset=7)
                ],
            )
        ]
    )
    answer = merged(f, ctx, ApiKey.PRODUCE, version, broker)
    assert [[(p.index, p.error_code) for p in t.partition_responses] for t in answer.responses] == [
        [(0, 0), (1, ErrorCode.MESSAGE_TOO_LARGE)],
        [(0, ErrorCode.MESSAGE_TOO_LARGE)],
    ]
    result, _ctx = run(f, ApiKey.PRODUCE, version, produce(version, 1, ("u", {0: 500})))
    assert answered(result, ApiKey.PRODUCE, version).responses[0].partition_responses[0].error_code == 10


# -- reporting ---------------------------------------------------------------------------------------
def test_refusals_are_logged_rate_limited(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(guardrail_report.time, "monotonic", lambda: clock[0])
    f = guardrails()
    with caplog.at_level(logging.WARNING, logger="kgate.guardrails"):
        for _ in range(guardrail_report.LOG_BURST + 5):
            run(f, CT, 7, create_topics(7, topic("boom", HUGE)))
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == guardrail_report.LOG_BURST
        assert "api=CreateTopics" in lines[0]
        assert "rule=partitions_per_topic" in lines[0]
        assert "error=37" in lines[0]
        clock[0] += guardrail_report.LOG_WINDOW_S
        run(f, CT, 7, create_topics(7, topic("boom", HUGE)))
    assert "5 more refusals" in caplog.records[-2].getMessage()


def test_when_an_earlier_filter_kept_entries_for_the_answer_an_emptied_request_still_goes() -> None:
    """kgate's own answer runs no response hook: the earlier filter's entries would be lost."""
    f = guardrails()
    req = create_topics(7, topic("boom", HUGE))
    ctx = testing.FakeContext(CT, 7)
    ctx.state["authorizer.refused"] = ("topics", ["an error entry of the authorizer's"])
    result = f.partitions(ctx, req)
    assert isinstance(result, Forward)
    assert result.message.topics == []
    answer = merged(f, ctx, CT, 7, testing.response_class(CT)(topics=[]))
    assert [(t.name, t.error_code) for t in answer.topics] == [("boom", ErrorCode.INVALID_PARTITIONS)]
    alone = testing.FakeContext(CT, 7)  # only audit notes in the state: kgate answers itself
    assert isinstance(f.partitions(alone, create_topics(7, topic("boom", HUGE))), Respond)


def test_the_default_chain_learns_no_topic_names_so_metadata_answers_stay_undecoded() -> None:
    """Guardrails reads names from the request itself: a chain of it alone must not make kgate decode
    every Metadata answer to learn names nobody asks for (callgrind: 5.5x the instructions per
    Metadata before ``uses_topic_names``). A chain with a name-using filter still learns them."""
    from kgate.filters.builtin.authz.topic_policy import TopicPolicy
    from kgate.proxy.sansio.plans import ResponsePlan

    alone = FilterChain([guardrails()])
    assert not alone.uses_topic_names
    plans = Plans(alone, alone.version_limits(), alone.uses_topic_names, lambda k, v: [0])
    assert plans.response(ApiKey.METADATA, 12, False) is ResponsePlan.BROKERS_ONLY
    with_policy = FilterChain([guardrails(), TopicPolicy(TopicPolicy.validate_config({"deny": ["x*"]}))])
    assert with_policy.uses_topic_names
    learning = Plans(with_policy, with_policy.version_limits(), with_policy.uses_topic_names, lambda k, v: [0])
    # decoded, or walked by its hooks' screens (topic-policy's): names are learnt either way
    assert learning.response(ApiKey.METADATA, 12, False) is ResponsePlan.SCREEN
