"""The authorizer end to end, against Tansu and Apache Kafka 4.0.2, with real clients.

With ``secret-*`` topics, ``secret-`` groups and ``secret-`` transactional ids denied (everything else
allowed), through kgate:

* the four leaks of issue 9 are closed: DescribeConfigs of a denied topic is refused (the broker is
  not asked), AlterConfigs / IncrementalAlterConfigs do not change it, CreateTopics of an existing
  denied name answers TOPIC_AUTHORIZATION_FAILED (not TOPIC_ALREADY_EXISTS) and of a new one creates
  nothing; each with a control straight at the broker, and with confluent-kafka, kafka-python and
  aiokafka admin clients;
* data and group RPCs: producing to and consuming a denied topic fail with authorization errors while
  the allowed topic works; a denied consumer group gets GROUP_AUTHORIZATION_FAILED; Metadata hides
  the denied topic;
* every decision is counted in ``kgate_authz_decisions_total`` and denials are logged.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.timeout(180)

RULES = [
    {"allow": "all", "topic": "*"},
    {"allow": "all", "group": "*"},
    {"allow": "all", "transactional_id": "*"},
    {"allow": "all", "cluster": True},
    {"deny": "all", "topic": {"glob": "secret-*"}},
    {"deny": "all", "group": {"prefix": "secret-"}},
    {"deny": "all", "transactional_id": {"prefix": "secret-"}},
]
AUTHZ = [{"name": "authorizer", "config": {"default": "deny", "rules": RULES}}]
POLICY = [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}]
TOPIC_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED
RETENTION = "retention.ms"


class Setup:
    def __init__(self, broker: Any, k: Any, secret: str, shown: str) -> None:
        self.broker, self.k, self.secret, self.shown = broker, k, secret, shown
        # kept for the test's life: a handle garbage-collected while a future is pending fails it
        self._direct = AdminClient({"bootstrap.servers": broker.bootstrap})
        self._via = AdminClient({"bootstrap.servers": k.bootstrap})

    def direct(self) -> AdminClient:
        return self._direct

    def via(self) -> AdminClient:
        return self._via


def _make(broker: Any, kgate_factory: Any, filters: list[dict[str, Any]]) -> Setup:
    tag = uuid.uuid4().hex[:8]
    secret, shown = f"secret-{tag}", f"shown-{tag}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in (secret, shown)]).values():
        f.result(30)
    # a config set on both (Tansu describes only configs that were set)
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            n,
            incremental_configs=[ConfigEntry(RETENTION, "86400000", incremental_operation=AlterConfigOpType.SET)],
        )
        for n in (secret, shown)
    ]
    for f in admin.incremental_alter_configs(resources).values():
        f.result(30)
    k = kgate_factory(broker.bootstrap, extra={"proxy": {"drain_timeout_s": 1}, "filters": filters})
    return Setup(broker, k, secret, shown)


@pytest.fixture(params=["authorizer", "topic-policy"])
def setup(request, broker, kgate_factory) -> Setup:
    """Both filters close the leaks: the authorizer, and topic-policy as sugar over it."""
    return _make(broker, kgate_factory, AUTHZ if request.param == "authorizer" else POLICY)


@pytest.fixture
def authz(broker, kgate_factory) -> Setup:
    return _make(broker, kgate_factory, AUTHZ)


def _error_code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), repr(exc)
    return exc.args[0].code()


def _fails_with(future: Any, code: int) -> None:
    with pytest.raises(KafkaException) as info:
        future.result(30)
    assert _error_code(info.value) == code, info.value


def _retention(admin: AdminClient, topic: str) -> str | None:
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(30)
    entry = configs.get(RETENTION)
    return None if entry is None else entry.value


# -- the leaks of issue 9 ---------------------------------------------------------------------
def test_describe_configs_of_a_denied_topic_is_refused(setup) -> None:
    s = setup
    assert _retention(s.direct(), s.secret) is not None  # control: the broker has them
    assert _retention(s.via(), s.shown) is not None
    res = ConfigResource(ResourceType.TOPIC, s.secret)
    _fails_with(s.via().describe_configs([res])[res], TOPIC_DENIED)


def test_alter_configs_of_a_denied_topic_is_refused_and_changes_nothing(setup) -> None:
    s = setup
    before = _retention(s.direct(), s.secret)
    res = ConfigResource(
        ResourceType.TOPIC,
        s.secret,
        incremental_configs=[ConfigEntry(RETENTION, "12345", incremental_operation=AlterConfigOpType.SET)],
    )
    _fails_with(s.via().incremental_alter_configs([res])[res], TOPIC_DENIED)
    if s.broker.kind == "kafka":  # Tansu has no AlterConfigs (librdkafka refuses it before sending)
        legacy = ConfigResource(ResourceType.TOPIC, s.secret, set_config={RETENTION: "12345"})
        _fails_with(s.via().alter_configs([legacy])[legacy], TOPIC_DENIED)
    assert _retention(s.direct(), s.secret) == before
    ok = ConfigResource(
        ResourceType.TOPIC,
        s.shown,
        incremental_configs=[ConfigEntry(RETENTION, "12345", incremental_operation=AlterConfigOpType.SET)],
    )
    s.via().incremental_alter_configs([ok])[ok].result(30)
    deadline = time.monotonic() + 10
    while _retention(s.direct(), s.shown) != "12345" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _retention(s.direct(), s.shown) == "12345"


def test_create_topics_of_an_existing_denied_name_is_no_existence_oracle(setup) -> None:
    s = setup
    _fails_with(s.direct().create_topics([NewTopic(s.secret, 1, 1)])[s.secret], KafkaError.TOPIC_ALREADY_EXISTS)
    _fails_with(s.via().create_topics([NewTopic(s.secret, 1, 1)])[s.secret], TOPIC_DENIED)
    _fails_with(s.via().create_topics([NewTopic(s.shown, 1, 1)])[s.shown], KafkaError.TOPIC_ALREADY_EXISTS)


def test_create_topics_of_a_new_denied_name_creates_nothing(setup) -> None:
    s = setup
    new_secret, new_ok = f"secret-new-{uuid.uuid4().hex[:6]}", f"ok-new-{uuid.uuid4().hex[:6]}"
    futures = s.via().create_topics([NewTopic(new_secret, 1, 1), NewTopic(new_ok, 1, 1)])
    _fails_with(futures[new_secret], TOPIC_DENIED)
    futures[new_ok].result(30)  # the allowed one of the same request is created
    topics = s.direct().list_topics(timeout=10).topics
    assert new_secret not in topics
    assert new_ok in topics


def test_kafka_python_admin(authz) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import TopicAuthorizationFailedError

    s = authz
    admin = KafkaAdminClient(bootstrap_servers=s.k.bootstrap, client_id="kafka-python-admin")
    try:
        with pytest.raises(TopicAuthorizationFailedError):  # not TopicAlreadyExistsError
            admin.create_topics([KNewTopic(s.secret, 1, 1)])
        try:
            described: Any = admin.describe_configs(
                [KConfigResource(ConfigResourceType.TOPIC, s.secret)], config_filter="all"
            )
        except TopicAuthorizationFailedError as exc:
            described = exc
        # kafka-python 3 reports the refused resource as empty (or raises): nothing of it shows
        assert "86400000" not in repr(described), described
        shown = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, s.shown)], config_filter="all")
        assert "86400000" in repr(shown), shown  # control: the allowed topic's configs come through
        try:
            altered: Any = admin.alter_configs(
                [KConfigResource(ConfigResourceType.TOPIC, s.secret, configs={RETENTION: "1"})], raise_on_unknown=False
            )
        except TopicAuthorizationFailedError as exc:
            altered = exc
        assert "TopicAuthorization" in repr(altered), altered
    finally:
        admin.close()
    assert _retention(s.direct(), s.secret) == "86400000"


def _entries(resp: Any, *attrs: str) -> list[Any]:
    for attr in attrs:
        found = getattr(resp, attr, None)
        if found is not None:
            return list(found)
    raise AssertionError(f"{resp!r} has none of {attrs}")


async def test_aiokafka_admin(authz) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as ANewTopic
    from aiokafka.admin.config_resource import ConfigResource as AConfigResource
    from aiokafka.admin.config_resource import ConfigResourceType as AType

    s = authz
    admin = AIOKafkaAdminClient(bootstrap_servers=s.k.bootstrap, client_id="aiokafka-admin")
    await admin.start()
    try:
        new_secret = f"secret-aio-{uuid.uuid4().hex[:6]}"
        resp = await admin.create_topics([ANewTopic(new_secret, 1, 1), ANewTopic(s.secret, 1, 1)])
        got = {t[0]: t[1] for t in _entries(resp, "topic_errors", "topics")}
        assert got == {new_secret: TOPIC_DENIED, s.secret: TOPIC_DENIED}
        described = await admin.describe_configs([AConfigResource(AType.TOPIC, s.secret)])
        results = [r for d in described for r in _entries(d, "resources", "results")]
        assert [(r[0], r[3]) for r in results] == [(TOPIC_DENIED, s.secret)]
        if s.broker.kind == "kafka":  # aiokafka alters with AlterConfigs, which Tansu lacks
            altered = await admin.alter_configs([AConfigResource(AType.TOPIC, s.secret, configs={RETENTION: "1"})])
            results = [r for a in altered for r in _entries(a, "resources", "responses")]
            assert [(r[0], r[3]) for r in results] == [(TOPIC_DENIED, s.secret)]
    finally:
        await admin.close()
    assert new_secret not in s.direct().list_topics(timeout=10).topics
    assert _retention(s.direct(), s.secret) == "86400000"


# -- data, groups, Metadata, metrics ------------------------------------------------------------
def _produce(bootstrap: str, topic: str, n: int = 5, **conf: Any) -> list[Any]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 15000, **conf})
    errors: list[Any] = []
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, on_delivery=lambda err, _m: errors.append(err))
    p.flush(30)
    return errors


def _consume_error(bootstrap: str, topic: str, group: str, want: int, timeout: float = 60) -> tuple[int, Any]:
    """(messages read, first error) of a group consumer reading ``topic``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    got, err = 0, None
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and got < want and err is None:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                err = msg.error()
            else:
                got += 1
    finally:
        c.close()
    return got, err


def test_produce_consume_and_groups(authz) -> None:
    s = authz
    assert [e for e in _produce(s.k.bootstrap, s.shown) if e is not None] == []
    denied = _produce(s.k.bootstrap, s.secret)
    assert denied
    assert all(e is not None and e.code() == TOPIC_DENIED for e in denied)
    got, err = _consume_error(s.k.bootstrap, s.shown, f"ok-{uuid.uuid4().hex[:6]}", want=5)
    assert (got, err) == (5, None)
    got, err = _consume_error(s.k.bootstrap, s.shown, f"secret-{uuid.uuid4().hex[:6]}", want=1, timeout=30)
    assert got == 0
    assert err is not None
    assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    topics = s.via().list_topics(timeout=10).topics
    assert s.shown in topics
    assert s.secret not in topics


def test_transactional_id_denied(authz) -> None:
    s = authz
    p = Producer({"bootstrap.servers": s.k.bootstrap, "transactional.id": f"secret-{uuid.uuid4().hex[:6]}"})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(20)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_delete_and_group_admin(authz) -> None:
    s = authz
    _fails_with(s.via().delete_topics([s.secret])[s.secret], TOPIC_DENIED)
    assert s.secret in s.direct().list_topics(timeout=10).topics
    group = f"secret-{uuid.uuid4().hex[:6]}"
    _fails_with(s.via().delete_consumer_groups([group])[group], KafkaError.GROUP_AUTHORIZATION_FAILED)


def test_decisions_are_counted_and_denials_logged(authz) -> None:
    s = authz
    res = ConfigResource(ResourceType.TOPIC, s.secret)
    _fails_with(s.via().describe_configs([res])[res], TOPIC_DENIED)
    assert _retention(s.via(), s.shown) is not None
    samples = dict(s.k.metric_values("kgate_authz_decisions_total"))
    deny = [v for labels, v in samples.items() if 'decision="deny"' in labels and 'api="DescribeConfigs"' in labels]
    allow = [v for labels, v in samples.items() if 'decision="allow"' in labels and 'api="DescribeConfigs"' in labels]
    assert deny, samples
    assert deny[0] >= 1, samples
    assert allow, samples
    assert allow[0] >= 1, samples
    assert 'filter="authorizer"' in next(iter(samples))
    deadline = time.monotonic() + 5
    line = f"resource=topic:{s.secret} operation=describe_configs"
    while line not in s.k.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "authz authorizer: denied cluster=default principal=ANONYMOUS" in s.k.log_text()
    assert line in s.k.log_text()


async def test_wire_level_describe_configs_of_a_denied_topic_never_reaches_the_broker(authz) -> None:
    """The same refusal at the byte level (kgate's codec), for the DescribeConfigs version librdkafka uses."""
    from kgate.codec.generated.admin import describe_configs as dc
    from kgate.proxy.carrier.upstream_client import UpstreamClient

    s = authz
    c = UpstreamClient(lambda: [("127.0.0.1", s.k.listen_port)])
    try:
        req = dc.DescribeConfigsRequest(resources=[dc.DescribeConfigsResource(resource_type=2, resource_name=s.secret)])
        _v, resp = await asyncio.wait_for(c.request(32, req, 4), 15)
    finally:
        c.close()
    assert [(r.resource_name, r.error_code, r.configs) for r in resp.results] == [(s.secret, TOPIC_DENIED, [])]


def test_transactions_through_the_authorizer(authz) -> None:
    """An allowed transactional id runs a whole transaction (InitProducerId, FindCoordinator for the
    transaction, AddPartitionsToTxn, Produce, EndTxn); the allowed producer cannot add a denied topic."""
    s = authz
    p = Producer(
        {
            "bootstrap.servers": s.k.bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex[:6]}",
            "transaction.timeout.ms": 60000,
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(s.shown, value=b"in-txn")
    p.commit_transaction(30)
    p.begin_transaction()
    reports: list[Any] = []
    p.produce(s.secret, value=b"denied", on_delivery=lambda err, _m: reports.append(err))
    with pytest.raises(KafkaException):
        p.commit_transaction(30)  # the transaction fails; the delivery report says why
    p.poll(0)
    assert [e.code() for e in reports] == [TOPIC_DENIED]
