"""The authorizer's hooks, api key by api key, with spec-built messages through real frame bytes.

For every row of the table (``filters.builtin.acl_table``) a request naming an allowed resource is
forwarded unchanged and one naming a denied resource is answered with the api's own error (the
answer is encoded and decoded at the request's version, so it is what a client would read). The
table is total over the codec's api keys and docs/authorization.md shows it as it is in code.
"""

from __future__ import annotations

import inspect
import uuid
from pathlib import Path
from typing import Any

import pytest

from kgate import testing
from kgate.api import FORWARD, ApiKey, ErrorCode, Forward, Respond
from kgate.codec import api
from kgate.filters.builtin.authz.acl_table import TABLE, UNCHECKED, markdown_table
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.exchanges import POLICY_STATE_KEY

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED

RULES = [
    {"allow": "all", "topic": "*"},
    {"allow": "all", "group": "*"},
    {"allow": "all", "transactional_id": "*"},
    {"allow": "all", "cluster": True, "principal": "admin"},
    {"deny": "all", "topic": {"glob": "secret-*"}},
    {"deny": "all", "group": {"prefix": "secret-"}},
    {"deny": "all", "transactional_id": {"prefix": "secret-"}},
]
OK_ID, SECRET_ID = uuid.uuid4(), uuid.uuid4()
CACHE = {OK_ID: "orders", SECRET_ID: "secret-pay"}
REPO = Path(__file__).resolve().parents[4]


def authorizer(rules: list[dict[str, Any]] = RULES, default: str = "deny") -> Authorizer:
    return Authorizer(Authorizer.validate_config({"rules": rules, "default": default}))


def struct(cls: type, path: str, **fields: Any) -> Any:
    """An element of the list field ``path`` (dotted through nested lists) of message class ``cls``."""
    for attr in path.split("."):
        cls = next(f.struct for f in cls._FIELDS if f.name == attr)  # type: ignore[attr-defined]
    return cls(**fields)


def req(api_key: int, /, **fields: Any) -> Any:
    return api.API_INFO[api_key].request_class(**fields)


def rq(key: int) -> type:
    return api.API_INFO[key].request_class


def codes(message: Any) -> set[int]:
    """Every non-zero error code anywhere in a message."""
    found: set[int] = set()

    def walk(m: Any) -> None:
        for attr in getattr(m, "__slots__", ()):
            v = getattr(m, attr, None)
            if attr in ("error_code", "partition_error_code", "topic_config_error_code") and isinstance(v, int) and v:
                found.add(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif hasattr(v, "__slots__"):
                walk(v)

    walk(message)
    return found


async def run(f: Authorizer, key: int, version: int, request: Any, principal: str = "alice") -> tuple[Any, Any]:
    request = testing.round_trip_request(key, version, request)
    ctx = testing.FakeContext(key, version, request=request, principal=principal, cache=CACHE)
    result = f.check(ctx, request)
    if inspect.isawaitable(result):
        result = await result
    return result, ctx


def answer(key: int, version: int, result: Any) -> Any:
    assert isinstance(result, Respond), result
    return testing.round_trip_response(key, version, result.message)


def topics_req(key: int, name: str) -> Any:
    """The request of a per-topic api naming topic ``name``, partition 0."""
    c = rq(key)
    if key == ApiKey.PRODUCE:
        return req(
            key,
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                struct(c, "topic_data", name=name, partition_data=[struct(c, "topic_data.partition_data", index=0)])
            ],
        )
    if key == ApiKey.FETCH:
        return req(
            key,
            replica_id=-1,
            topics=[struct(c, "topics", topic=name, partitions=[struct(c, "topics.partitions", partition=0)])],
        )
    if key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        return req(
            key, topics=[struct(c, "topics", topic=name, partitions=[struct(c, "topics.partitions", partition=0)])]
        )
    if key == ApiKey.DESCRIBE_PRODUCERS:
        return req(key, topics=[struct(c, "topics", name=name, partition_indexes=[0])])
    if key == ApiKey.OFFSET_COMMIT:
        return req(
            key,
            group_id="g",
            topics=[struct(c, "topics", name=name, partitions=[struct(c, "topics.partitions", partition_index=0)])],
        )
    if key == ApiKey.TXN_OFFSET_COMMIT:
        return req(
            key,
            transactional_id="tx",
            group_id="g",
            topics=[struct(c, "topics", name=name, partitions=[struct(c, "topics.partitions", partition_index=0)])],
        )
    if key == ApiKey.OFFSET_DELETE:
        return req(
            key,
            group_id="g",
            topics=[struct(c, "topics", name=name, partitions=[struct(c, "topics.partitions", partition_index=0)])],
        )
    return req(
        key, topics=[struct(c, "topics", name=name, partitions=[struct(c, "topics.partitions", partition_index=0)])]
    )


PER_TOPIC = [
    (ApiKey.PRODUCE, 9),
    (ApiKey.FETCH, 12),
    (ApiKey.LIST_OFFSETS, 7),
    (ApiKey.OFFSET_COMMIT, 8),
    (ApiKey.DELETE_RECORDS, 2),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4),
    (ApiKey.TXN_OFFSET_COMMIT, 3),
    (ApiKey.OFFSET_DELETE, 0),
    (ApiKey.DESCRIBE_PRODUCERS, 0),
]


@pytest.mark.parametrize(("key", "version"), PER_TOPIC, ids=[ApiKey(k).name for k, _v in PER_TOPIC])
async def test_per_topic_apis(key: int, version: int) -> None:
    f = authorizer()
    ok, _ = await run(f, key, version, topics_req(key, "orders"))
    assert ok is FORWARD
    denied, _ = await run(f, key, version, topics_req(key, "secret-pay"))
    assert codes(answer(key, version, denied)) >= {TOPIC_DENIED}


async def test_mixed_topics_refuse_only_the_denied_one() -> None:
    f = authorizer()
    c = rq(ApiKey.PRODUCE)
    parts = [struct(c, "topic_data.partition_data", index=0)]
    request = req(
        ApiKey.PRODUCE,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            struct(c, "topic_data", name="orders", partition_data=parts),
            struct(c, "topic_data", name="secret-pay", partition_data=parts),
        ],
    )
    result, ctx = await run(f, ApiKey.PRODUCE, 9, request)
    assert isinstance(result, Forward)
    assert [t.name for t in result.message.topic_data] == ["orders"]
    resp_cls = api.API_INFO[ApiKey.PRODUCE].response_class
    broker = resp_cls(
        responses=[
            struct(
                resp_cls,
                "responses",
                name="orders",
                partition_responses=[struct(resp_cls, "responses.partition_responses", index=0)],
            )
        ]
    )
    merged = f.merge(ctx.for_response(), broker)
    assert {t.name: t.partition_responses[0].error_code for t in merged.message.responses} == {
        "orders": 0,
        "secret-pay": TOPIC_DENIED,
    }


async def test_refusals_are_noted_for_the_audit_log_and_allowed_requests_note_nothing() -> None:
    """A refusal lands in the exchange's policy list (the audit log's ``policy``); an allowed one leaves no state."""
    f = authorizer()
    ok, ok_ctx = await run(f, ApiKey.PRODUCE, 9, topics_req(ApiKey.PRODUCE, "orders"))
    assert ok is FORWARD
    assert POLICY_STATE_KEY not in ok_ctx.state
    c = rq(ApiKey.JOIN_GROUP)
    _denied, ctx = await run(f, ApiKey.PRODUCE, 9, topics_req(ApiKey.PRODUCE, "secret-pay"))
    assert [
        (d["filter"], d["resource_type"], d["resource"], d["error_code"], d["operation"])
        for d in ctx.state[POLICY_STATE_KEY]
    ] == [("authorizer", "topic", "secret-pay", TOPIC_DENIED, "Produce")]
    join = req(
        ApiKey.JOIN_GROUP,
        group_id="secret-g",
        session_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[struct(c, "protocols", name="range", metadata=b"")],
    )
    _denied, ctx = await run(f, ApiKey.JOIN_GROUP, 5, join)
    assert [(d["resource_type"], d["resource"], d["error_code"]) for d in ctx.state[POLICY_STATE_KEY]] == [
        ("group", "secret-g", GROUP_DENIED)
    ]


async def test_ids_are_resolved_and_unknown_ids_fail_closed() -> None:
    f = authorizer()
    c = rq(ApiKey.FETCH)

    def fetch(topic_id: uuid.UUID) -> Any:
        return req(
            ApiKey.FETCH,
            replica_id=-1,
            topics=[struct(c, "topics", topic_id=topic_id, partitions=[struct(c, "topics.partitions", partition=0)])],
        )

    assert (await run(f, ApiKey.FETCH, 13, fetch(OK_ID)))[0] is FORWARD
    denied, _ = await run(f, ApiKey.FETCH, 13, fetch(SECRET_ID))
    assert codes(answer(ApiKey.FETCH, 13, denied)) == {TOPIC_DENIED}
    gone, _ = await run(f, ApiKey.FETCH, 13, fetch(uuid.uuid4()))  # looked up; the cluster has no such id
    assert codes(answer(ApiKey.FETCH, 13, gone)) == {ErrorCode.UNKNOWN_TOPIC_ID}


async def test_follower_fetch_needs_cluster_action() -> None:
    request = topics_req(ApiKey.FETCH, "orders")
    request.replica_id = 1
    result, _ = await run(authorizer(), ApiKey.FETCH, 12, request)
    assert codes(answer(ApiKey.FETCH, 12, result)) >= {CLUSTER_DENIED}


async def test_produce_transactional_id() -> None:
    request = topics_req(ApiKey.PRODUCE, "orders")
    request.transactional_id = "secret-tx"
    result, _ = await run(authorizer(), ApiKey.PRODUCE, 9, request)
    assert codes(answer(ApiKey.PRODUCE, 9, result)) == {TXN_DENIED}
    request.transactional_id = "tx"
    assert (await run(authorizer(), ApiKey.PRODUCE, 9, request))[0] is FORWARD


@pytest.mark.parametrize(
    ("key", "version"), [(ApiKey.OFFSET_COMMIT, 8), (ApiKey.TXN_OFFSET_COMMIT, 3), (ApiKey.OFFSET_DELETE, 0)]
)
async def test_group_of_an_offset_api(key: int, version: int) -> None:
    request = topics_req(key, "orders")
    request.group_id = "secret-g"
    result, _ = await run(authorizer(), key, version, request)
    assert GROUP_DENIED in codes(answer(key, version, result))


# -- whole-request apis -------------------------------------------------------------------------
def group_req(key: int, group: str) -> Any:
    return req(key, group_id=group)


GROUP_APIS = [
    (ApiKey.JOIN_GROUP, 5),
    (ApiKey.HEARTBEAT, 3),
    (ApiKey.LEAVE_GROUP, 3),
    (ApiKey.SYNC_GROUP, 3),
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0),
    (ApiKey.SHARE_GROUP_HEARTBEAT, 1),
]


@pytest.mark.parametrize(("key", "version"), GROUP_APIS, ids=[ApiKey(k).name for k, _v in GROUP_APIS])
async def test_group_apis(key: int, version: int) -> None:
    f = authorizer()
    assert (await run(f, key, version, group_req(key, "g")))[0] is FORWARD
    result, _ = await run(f, key, version, group_req(key, "secret-g"))
    assert codes(answer(key, version, result)) == {GROUP_DENIED}


@pytest.mark.parametrize("key", [ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT])
async def test_subscribing_to_a_denied_topic(key: int) -> None:
    version = 1 if key == ApiKey.SHARE_GROUP_HEARTBEAT else 0  # share groups start at v1 (Kafka 4.1+)
    request = req(key, group_id="g", subscribed_topic_names=["orders", "secret-x"])
    result, _ = await run(authorizer(), key, version, request)
    assert codes(answer(key, version, result)) == {TOPIC_DENIED}


TXN_APIS = [(ApiKey.END_TXN, 3), (ApiKey.ADD_OFFSETS_TO_TXN, 3), (ApiKey.INIT_PRODUCER_ID, 4)]


@pytest.mark.parametrize(("key", "version"), TXN_APIS, ids=[ApiKey(k).name for k, _v in TXN_APIS])
async def test_transactional_apis(key: int, version: int) -> None:
    f = authorizer()
    extra = {"group_id": "g"} if key == ApiKey.ADD_OFFSETS_TO_TXN else {}
    assert (await run(f, key, version, req(key, transactional_id="tx", **extra)))[0] is FORWARD
    result, _ = await run(f, key, version, req(key, transactional_id="secret-tx", **extra))
    assert codes(answer(key, version, result)) == {TXN_DENIED}
    if key == ApiKey.ADD_OFFSETS_TO_TXN:
        result, _ = await run(f, key, version, req(key, transactional_id="tx", group_id="secret-g"))
        assert codes(answer(key, version, result)) == {GROUP_DENIED}


async def test_idempotent_producer_needs_idempotent_write_or_write_on_some_topic() -> None:
    request = req(ApiKey.INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=-1)
    assert (await run(authorizer(), ApiKey.INIT_PRODUCER_ID, 4, request))[0] is FORWARD  # write on topics
    readers = authorizer([{"allow": ["read"], "topic": "*"}])
    result, _ = await run(readers, ApiKey.INIT_PRODUCER_ID, 4, request)
    assert codes(answer(ApiKey.INIT_PRODUCER_ID, 4, result)) == {CLUSTER_DENIED}
    granted = authorizer([{"allow": ["idempotent_write"], "cluster": True}])
    assert (await run(granted, ApiKey.INIT_PRODUCER_ID, 4, request))[0] is FORWARD


async def test_add_partitions_to_txn_is_all_or_nothing() -> None:
    c = rq(ApiKey.ADD_PARTITIONS_TO_TXN)

    def add(txn: str, *names: str) -> Any:
        return req(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=1,
            v3_and_below_topics=[struct(c, "v3_and_below_topics", name=n, partitions=[0]) for n in names],
        )

    f = authorizer()
    assert (await run(f, ApiKey.ADD_PARTITIONS_TO_TXN, 3, add("tx", "orders")))[0] is FORWARD
    result, _ = await run(f, ApiKey.ADD_PARTITIONS_TO_TXN, 3, add("tx", "orders", "secret-x"))
    resp = answer(ApiKey.ADD_PARTITIONS_TO_TXN, 3, result)
    got = {t.name: t.results_by_partition[0].partition_error_code for t in resp.results_by_topic_v3_and_below}
    assert got == {"orders": ErrorCode.OPERATION_NOT_ATTEMPTED, "secret-x": TOPIC_DENIED}
    result, _ = await run(f, ApiKey.ADD_PARTITIONS_TO_TXN, 3, add("secret-tx", "orders"))
    assert codes(answer(ApiKey.ADD_PARTITIONS_TO_TXN, 3, result)) == {TXN_DENIED}


CLUSTER_ONLY = sorted(k for k, needs in TABLE.items() if [n.res.name for n in needs] == ["CLUSTER"])


@pytest.mark.parametrize("key", CLUSTER_ONLY, ids=[ApiKey(k).name for k in CLUSTER_ONLY])
async def test_cluster_apis_refused_without_the_cluster_permission(key: int) -> None:
    version = api.API_INFO[key].max_version
    request = req(key)
    try:
        request = testing.round_trip_request(key, version, request)
    except Exception:  # a default message some version cannot encode (non-null required fields)
        pytest.skip("no default message for this version")
    admin_ctx = testing.FakeContext(key, version, request=request, principal="admin")
    assert authorizer().check(admin_ctx, request) is FORWARD
    result = authorizer().check(testing.FakeContext(key, version, request=request, principal="alice"), request)
    if isinstance(result, Respond):
        assert CLUSTER_DENIED in codes(testing.round_trip_response(key, version, result.message))
    else:  # no error field in this api: the connection is closed instead
        assert type(result).__name__ == "Close"


# -- per-entry apis (the leaks of issue 9 among them) ----------------------------------------------
def configs_req(key: int, *names: str) -> Any:
    c = rq(key)
    return req(key, resources=[struct(c, "resources", resource_type=2, resource_name=n) for n in names])


@pytest.mark.parametrize(
    ("key", "version"), [(ApiKey.DESCRIBE_CONFIGS, 4), (ApiKey.ALTER_CONFIGS, 2), (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)]
)
async def test_configs_of_a_denied_topic_are_refused_before_the_broker(key: int, version: int) -> None:
    f = authorizer()
    assert (await run(f, key, version, configs_req(key, "orders")))[0] is FORWARD
    result, _ = await run(f, key, version, configs_req(key, "secret-pay"))
    resp = answer(key, version, result)
    entries = resp.results if key == ApiKey.DESCRIBE_CONFIGS else resp.responses
    assert [(e.resource_name, e.error_code) for e in entries] == [("secret-pay", TOPIC_DENIED)]
    mixed, ctx = await run(f, key, version, configs_req(key, "orders", "secret-pay"))
    assert isinstance(mixed, Forward)
    assert [r.resource_name for r in mixed.message.resources] == ["orders"]
    broker = api.API_INFO[key].response_class()
    merged = f.merge(ctx.for_response(), broker)
    entries = merged.message.results if key == ApiKey.DESCRIBE_CONFIGS else merged.message.responses
    assert [(e.resource_name, e.error_code) for e in entries] == [("secret-pay", TOPIC_DENIED)]


async def test_broker_configs_need_the_cluster() -> None:
    c = rq(ApiKey.DESCRIBE_CONFIGS)
    request = req(ApiKey.DESCRIBE_CONFIGS, resources=[struct(c, "resources", resource_type=4, resource_name="1")])
    result, _ = await run(authorizer(), ApiKey.DESCRIBE_CONFIGS, 4, request)
    assert codes(answer(ApiKey.DESCRIBE_CONFIGS, 4, result)) == {CLUSTER_DENIED}
    assert (await run(authorizer(), ApiKey.DESCRIBE_CONFIGS, 4, request, principal="admin"))[0] is FORWARD


async def test_create_topics_of_a_denied_name_never_reaches_the_broker() -> None:
    c = rq(ApiKey.CREATE_TOPICS)
    request = req(
        ApiKey.CREATE_TOPICS,
        timeout_ms=1000,
        topics=[struct(c, "topics", name="secret-new", num_partitions=1, replication_factor=1)],
    )
    result, _ = await run(authorizer(), ApiKey.CREATE_TOPICS, 7, request)
    resp = answer(ApiKey.CREATE_TOPICS, 7, result)
    assert [(t.name, t.error_code) for t in resp.topics] == [("secret-new", TOPIC_DENIED)]


async def test_create_topics_answer_reveals_no_existence_without_describe() -> None:
    """A client allowed to create but not to describe never reads TOPIC_ALREADY_EXISTS nor the configs."""
    f = authorizer([{"allow": ["create"], "topic": "*"}])
    c = rq(ApiKey.CREATE_TOPICS)
    request = req(
        ApiKey.CREATE_TOPICS,
        timeout_ms=1000,
        topics=[struct(c, "topics", name="hidden", num_partitions=1, replication_factor=1)],
    )
    result, ctx = await run(f, ApiKey.CREATE_TOPICS, 7, request)
    assert result is FORWARD
    rc = api.API_INFO[ApiKey.CREATE_TOPICS].response_class
    broker = rc(
        topics=[
            struct(
                rc,
                "topics",
                name="hidden",
                error_code=ErrorCode.TOPIC_ALREADY_EXISTS,
                configs=[struct(rc, "topics.configs", name="retention.ms", value="1")],
            )
        ]
    )
    out = f.created_topics(ctx.for_response(), broker)
    topic = testing.round_trip_response(ApiKey.CREATE_TOPICS, 7, out.message).topics[0]
    assert topic.error_code == TOPIC_DENIED
    assert not topic.configs
    assert topic.topic_config_error_code == TOPIC_DENIED


ENTRY_APIS = [
    (ApiKey.DELETE_GROUPS, 2, lambda n: req(ApiKey.DELETE_GROUPS, groups_names=[n]), "results", GROUP_DENIED),
    (ApiKey.DESCRIBE_GROUPS, 5, lambda n: req(ApiKey.DESCRIBE_GROUPS, groups=[n]), "groups", GROUP_DENIED),
    (
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        0,
        lambda n: req(ApiKey.CONSUMER_GROUP_DESCRIBE, group_ids=[n]),
        "groups",
        GROUP_DENIED,
    ),
    (ApiKey.SHARE_GROUP_DESCRIBE, 1, lambda n: req(ApiKey.SHARE_GROUP_DESCRIBE, group_ids=[n]), "groups", GROUP_DENIED),
    (
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        lambda n: req(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=[n]),
        "transaction_states",
        TXN_DENIED,
    ),
    (
        ApiKey.FIND_COORDINATOR,
        4,
        lambda n: req(ApiKey.FIND_COORDINATOR, key_type=0, coordinator_keys=[n]),
        "coordinators",
        GROUP_DENIED,
    ),
    (
        ApiKey.OFFSET_FETCH,
        8,
        lambda n: req(ApiKey.OFFSET_FETCH, groups=[struct(rq(ApiKey.OFFSET_FETCH), "groups", group_id=n, topics=None)]),
        "groups",
        GROUP_DENIED,
    ),
    (
        ApiKey.CREATE_PARTITIONS,
        3,
        lambda n: req(
            ApiKey.CREATE_PARTITIONS,
            topics=[struct(rq(ApiKey.CREATE_PARTITIONS), "topics", name=n.replace("-g", "-topic"), count=2)],
        ),
        "results",
        TOPIC_DENIED,
    ),
]


@pytest.mark.parametrize(
    ("key", "version", "build", "attr", "code"), ENTRY_APIS, ids=[ApiKey(e[0]).name for e in ENTRY_APIS]
)
async def test_per_entry_apis(key: int, version: int, build: Any, attr: str, code: int) -> None:
    f = authorizer()
    assert (await run(f, key, version, build("ok-g")))[0] is FORWARD
    result, _ = await run(f, key, version, build("secret-g"))
    assert [e.error_code for e in getattr(answer(key, version, result), attr)] == [code]


@pytest.mark.parametrize(
    ("version", "key_type", "name", "code"), [(3, 0, "secret-g", GROUP_DENIED), (3, 1, "secret-tx", TXN_DENIED)]
)
async def test_find_coordinator_before_v4(version: int, key_type: int, name: str, code: int) -> None:
    result, _ = await run(
        authorizer(), ApiKey.FIND_COORDINATOR, version, req(ApiKey.FIND_COORDINATOR, key=name, key_type=key_type)
    )
    resp = answer(ApiKey.FIND_COORDINATOR, version, result)
    assert resp.error_code == code
    assert resp.node_id == -1


async def test_delete_topics_by_name_and_by_id() -> None:
    f = authorizer()
    result, _ = await run(f, ApiKey.DELETE_TOPICS, 5, req(ApiKey.DELETE_TOPICS, topic_names=["secret-pay"]))
    assert codes(answer(ApiKey.DELETE_TOPICS, 5, result)) == {TOPIC_DENIED}
    c = rq(ApiKey.DELETE_TOPICS)
    by_id = req(ApiKey.DELETE_TOPICS, topics=[struct(c, "topics", name=None, topic_id=SECRET_ID)])
    result, _ = await run(f, ApiKey.DELETE_TOPICS, 6, by_id)
    answer6 = answer(ApiKey.DELETE_TOPICS, 6, result)  # one rule for ids in every api (docs/authorization.md)
    assert codes(answer6) == {TOPIC_DENIED}
    assert [t.name for t in answer6.responses] == [None]
    ok = req(ApiKey.DELETE_TOPICS, topics=[struct(c, "topics", name=None, topic_id=OK_ID)])
    assert (await run(f, ApiKey.DELETE_TOPICS, 6, ok))[0] is FORWARD


async def test_elect_leaders_needs_alter_on_the_cluster() -> None:
    c = rq(ApiKey.ELECT_LEADERS)
    request = req(
        ApiKey.ELECT_LEADERS,
        election_type=0,
        timeout_ms=1000,
        topic_partitions=[struct(c, "topic_partitions", topic="orders", partitions=[0])],
    )
    result, _ = await run(authorizer(), ApiKey.ELECT_LEADERS, 2, request)
    assert codes(answer(ApiKey.ELECT_LEADERS, 2, result)) == {CLUSTER_DENIED}
    assert (await run(authorizer(), ApiKey.ELECT_LEADERS, 2, request, principal="admin"))[0] is FORWARD


# -- answers filtered ---------------------------------------------------------------------------
async def test_metadata_hides_and_refuses_denied_topics() -> None:
    f = authorizer()
    c = rq(ApiKey.METADATA)
    request = req(
        ApiKey.METADATA,
        allow_auto_topic_creation=False,
        topics=[struct(c, "topics", name="orders"), struct(c, "topics", name="secret-pay")],
    )
    result, ctx = await run(f, ApiKey.METADATA, 12, request)
    assert isinstance(result, Forward)
    assert [t.name for t in result.message.topics] == ["orders"]
    rc = api.API_INFO[ApiKey.METADATA].response_class
    broker = rc(topics=[struct(rc, "topics", name="orders", topic_id=OK_ID)])
    resp = testing.round_trip_response(ApiKey.METADATA, 12, f.described_topics(ctx.for_response(), broker).message)
    assert {t.name: t.error_code for t in resp.topics} == {"orders": 0, "secret-pay": TOPIC_DENIED}
    listing = rc(topics=[struct(rc, "topics", name="orders"), struct(rc, "topics", name="secret-pay")])
    all_ctx = testing.FakeContext(ApiKey.METADATA, 12, request=req(ApiKey.METADATA, topics=None), principal="alice")
    out = f.described_topics(all_ctx, listing)
    assert [t.name for t in out.message.topics] == ["orders"]


async def test_metadata_turns_auto_creation_off_without_create() -> None:
    f = authorizer([{"allow": ["describe"], "topic": "*"}])
    c = rq(ApiKey.METADATA)
    request = req(ApiKey.METADATA, allow_auto_topic_creation=True, topics=[struct(c, "topics", name="new-one")])
    result, _ = await run(f, ApiKey.METADATA, 12, request)
    assert isinstance(result, Forward)
    assert result.message.allow_auto_topic_creation is False
    creator = authorizer([{"allow": ["describe", "create"], "topic": "*"}])
    assert (await run(creator, ApiKey.METADATA, 12, request))[0] is FORWARD


async def test_list_groups_is_filtered_without_describe_on_the_cluster() -> None:
    f = authorizer()
    rc = api.API_INFO[ApiKey.LIST_GROUPS].response_class
    broker = rc(groups=[struct(rc, "groups", group_id="g1"), struct(rc, "groups", group_id="secret-g")])
    ctx = testing.FakeContext(ApiKey.LIST_GROUPS, 4, principal="alice")
    assert [g.group_id for g in f.list_groups(ctx, broker).message.groups] == ["g1"]
    admin = testing.FakeContext(ApiKey.LIST_GROUPS, 4, principal="admin")
    broker = rc(groups=[struct(rc, "groups", group_id="g1"), struct(rc, "groups", group_id="secret-g")])
    assert f.list_groups(admin, broker) is FORWARD


async def test_list_transactions_is_filtered() -> None:
    rc = api.API_INFO[ApiKey.LIST_TRANSACTIONS].response_class
    broker = rc(transaction_states=[struct(rc, "transaction_states", transactional_id=t) for t in ("tx", "secret-t")])
    out = authorizer().list_transactions(testing.FakeContext(ApiKey.LIST_TRANSACTIONS, 1, principal="alice"), broker)
    assert [s.transactional_id for s in out.message.transaction_states] == ["tx"]


async def test_describe_log_dirs_needs_describe_on_the_cluster_and_hides_topics() -> None:
    f = authorizer()
    request = req(ApiKey.DESCRIBE_LOG_DIRS, topics=None)
    result, _ = await run(f, ApiKey.DESCRIBE_LOG_DIRS, 4, request)
    assert codes(answer(ApiKey.DESCRIBE_LOG_DIRS, 4, result)) == {CLUSTER_DENIED}
    result, _ = await run(f, ApiKey.DESCRIBE_LOG_DIRS, 4, request, principal="admin")
    assert result is FORWARD
    rc = api.API_INFO[ApiKey.DESCRIBE_LOG_DIRS].response_class
    broker = rc(
        results=[
            struct(
                rc,
                "results",
                log_dir="/d",
                topics=[struct(rc, "results.topics", name=n) for n in ("orders", "secret-pay")],
            )
        ]
    )
    out = f.log_dirs(testing.FakeContext(ApiKey.DESCRIBE_LOG_DIRS, 4, principal="admin"), broker)
    assert [t.name for t in out.message.results[0].topics] == ["orders"]


# -- the table ------------------------------------------------------------------------------------
def test_table_is_total_over_the_codec() -> None:
    assert set(TABLE) | set(UNCHECKED) == set(api.API_INFO)
    assert not set(TABLE) & set(UNCHECKED)


def test_every_table_key_is_hooked() -> None:
    hooked = {spec.api_key for _attr, spec in Authorizer.hooks if spec.direction == "request"}
    assert hooked == set(TABLE)


def test_docs_show_the_table_in_code() -> None:
    doc = (REPO / "docs" / "authorization.md").read_text()
    assert markdown_table() in doc, "docs/authorization.md: regenerate the table (acl_table.markdown_table())"


def test_peeked_produce_of_an_allowed_topic_forwards_without_counting_twice() -> None:
    f = authorizer()
    c = rq(ApiKey.PRODUCE)
    peek = req(ApiKey.PRODUCE, acks=-1, timeout_ms=1000, topic_data=[struct(c, "topic_data", name="secret-x")])
    ctx = testing.FakeContext(ApiKey.PRODUCE, 9, principal="alice")
    assert f.check(ctx, peek) is not FORWARD  # undecided: kgate waits for the whole request
    assert not f.report.counts
    assert f._denials == 0
    whole = topics_req(ApiKey.PRODUCE, "secret-x")
    f.check(ctx, whole)
    assert f.report.counts == {("test", ApiKey.PRODUCE, False): 1}


def test_denials_are_logged_rate_limited(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from kgate.filters.builtin.authz import report as authz_report

    now = [1000.0]
    monkeypatch.setattr(authz_report.time, "monotonic", lambda: now[0])
    f = authorizer()
    ctx = testing.FakeContext(ApiKey.PRODUCE, 9, principal="alice", client_id="app-1")
    with caplog.at_level("WARNING", logger="kgate.authz"):
        for _ in range(authz_report.LOG_BURST + 5):
            f.check(ctx, topics_req(ApiKey.PRODUCE, "secret-pay"))
        now[0] += authz_report.LOG_WINDOW_S
        f.check(ctx, topics_req(ApiKey.PRODUCE, "secret-pay"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == authz_report.LOG_BURST + 2  # a burst, the summary of the rest, the next window's first
    assert lines[0] == (
        "authz authorizer: denied cluster=test principal=alice client_id='app-1' "
        "address=127.0.0.1:50000 api=Produce resource=topic:secret-pay operation=write"
    )
    assert lines[-2] == "authz authorizer: 5 more denied checks in the last window not logged"
    assert f.report.counts == {("test", ApiKey.PRODUCE, False): authz_report.LOG_BURST + 6}


def _by_id(key: int, topic_id: uuid.UUID) -> Any:
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


BY_ID = [
    (ApiKey.PRODUCE, 13),
    (ApiKey.OFFSET_COMMIT, 10),
    (ApiKey.SHARE_FETCH, 1),
    (ApiKey.SHARE_ACKNOWLEDGE, 1),
    (ApiKey.SHARE_FETCH, 2),
    (ApiKey.SHARE_ACKNOWLEDGE, 2),
]


@pytest.mark.parametrize(("key", "version"), BY_ID, ids=[f"{ApiKey(k).name}-v{v}" for k, v in BY_ID])
async def test_rules_hold_for_topic_ids(key: int, version: int) -> None:
    """Versions that name topics by id only: the id is named through the topic-name service first."""
    f = authorizer()
    assert (await run(f, key, version, _by_id(key, OK_ID)))[0] is FORWARD
    denied, _ = await run(f, key, version, _by_id(key, SECRET_ID))
    assert codes(answer(key, version, denied)) == {TOPIC_DENIED}
    gone, ctx = await run(f, key, version, _by_id(key, uuid.uuid4()))
    assert codes(answer(key, version, gone)) == {ErrorCode.UNKNOWN_TOPIC_ID}  # fail closed
    assert ctx.lookups  # it was looked up, not guessed


@pytest.mark.parametrize("which", ["authorizer", "topic-policy"])
async def test_a_topic_entry_without_name_or_id_names_nothing_and_goes_to_the_broker(which: str) -> None:
    """DeleteTopics v6 ``{name: null, topic_id: zero}`` beside a denied name: the denied one is refused,
    the nameless one forwarded (no rule can apply to it; Kafka answers it INVALID_REQUEST). Both filters
    name topics through the one ``authz_shapes.known_names``; topic-policy's former copy raised TypeError."""
    from kgate.filters.builtin.authz.topic_policy import TopicPolicy

    f: Any = authorizer() if which == "authorizer" else TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))
    c = rq(ApiKey.DELETE_TOPICS)
    zero = uuid.UUID(int=0)
    request = req(
        ApiKey.DELETE_TOPICS,
        timeout_ms=1000,
        topics=[struct(c, "topics", name=None, topic_id=zero), struct(c, "topics", name="secret-pay", topic_id=zero)],
    )
    request = testing.round_trip_request(ApiKey.DELETE_TOPICS, 6, request)
    ctx = testing.FakeContext(ApiKey.DELETE_TOPICS, 6, request=request, principal="admin")
    result = await testing.run_hook(f.check, ctx, request)
    assert isinstance(result, Forward)
    assert [t.name for t in result.message.topics] == [None]
    merged = await testing.run_hook(
        f.merge, ctx.for_response(), api.API_INFO[ApiKey.DELETE_TOPICS].response_class(responses=[])
    )
    assert [(r.name, r.error_code) for r in merged.message.responses] == [("secret-pay", TOPIC_DENIED)]


async def test_listing_verdicts_are_remembered_per_client() -> None:
    """The describe verdicts a Metadata listing remembers (``Authorizer._describe``) belong to one identity:
    the same filter shows alice and admin their own topics, in either order, twice."""
    f = authorizer(
        [
            {"allow": "all", "topic": "*", "principal": "admin"},
            {"allow": ["describe"], "topic": "orders", "principal": "alice"},
        ]
    )
    rc = api.API_INFO[ApiKey.METADATA].response_class
    for principal, expected in [("alice", ["orders"]), ("admin", ["orders", "payments"])] * 2:
        listing = rc(topics=[struct(rc, "topics", name=n) for n in ("orders", "payments")])
        ctx = testing.FakeContext(ApiKey.METADATA, 12, request=req(ApiKey.METADATA, topics=None), principal=principal)
        out = f.described_topics(ctx, listing)
        shown = [t.name for t in (listing if out is FORWARD else out.message).topics]
        assert shown == expected, principal


def test_listing_verdicts_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """All identities' remembered describe verdicts together stay under the rule set's cache bound."""
    from kgate.filters.builtin.authz.acl_rules import RuleSet

    monkeypatch.setattr(RuleSet, "CACHE_MAX", 50)
    f = authorizer()
    for i in range(30):
        ctx = testing.FakeContext(ApiKey.METADATA, 12, principal=f"user-{i}")
        allowed = f._describe(ctx)
        assert [allowed(n) for n in ("orders", "secret-pay", f"t-{i}")] == [True, False, True]
        assert sum(map(len, f._describe_verdicts.values())) <= 50
