"""topic-policy hides denied topics from Metadata, as Kafka's authorizer does (real clients; Tansu and Apache Kafka)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.inproc_kgate import InprocKgate, make_config

from kgate.codec import api
from kgate.codec.generated.data.metadata import MetadataRequestTopic
from kgate.proxy.carrier.upstream_client import UpstreamClient


@pytest.fixture
def kgate(broker):
    k = InprocKgate(make_config(broker.bootstrap, [{"name": "topic-policy", "config": {"deny": ["hidden-*"]}}])).start()
    yield k
    k.stop()


def _create(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(10)


def test_listing_leaves_denied_topics_out(broker, kgate) -> None:
    tag = uuid.uuid4().hex[:6]
    shown, hidden = f"shown-{tag}", f"hidden-{tag}"
    _create(broker.bootstrap, shown, hidden)
    direct = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    via = AdminClient({"bootstrap.servers": kgate.bootstrap}).list_topics(timeout=10).topics
    assert {shown, hidden} <= set(direct)  # control: the broker has both
    assert shown in via
    assert hidden not in via


async def test_asking_for_a_denied_topic_gets_authorization_failed(broker, kgate) -> None:
    tag = uuid.uuid4().hex[:6]
    shown, hidden = f"shown-{tag}", f"hidden-{tag}"
    _create(broker.bootstrap, shown, hidden)
    c = UpstreamClient(lambda: [("127.0.0.1", kgate.port)])
    try:
        req = api.API_INFO[3].request_class(
            topics=[MetadataRequestTopic(name=shown), MetadataRequestTopic(name=hidden)],
            allow_auto_topic_creation=False,
        )
        _v, resp = await c.request(3, req, 12)
    finally:
        c.close()
    by_name = {t.name: t for t in resp.topics}
    assert by_name[shown].error_code == 0
    assert by_name[shown].partitions
    assert by_name[shown].topic_id.int
    assert by_name[hidden].error_code == 29
    assert by_name[hidden].partitions == []
    assert by_name[hidden].topic_id.int == 0


async def _metadata(port: int, version: int, topics: list[MetadataRequestTopic] | None, auto_create: bool) -> list:
    c = UpstreamClient(lambda: [("127.0.0.1", port)])
    try:
        req = api.API_INFO[3].request_class(topics=topics, allow_auto_topic_creation=auto_create)
        _v, resp = await c.request(3, req, version)
    finally:
        c.close()
    return resp.topics


async def test_asking_for_a_denied_topic_never_creates_it(broker, kgate) -> None:
    """The broker auto-creates a topic it is asked about (allow_auto_topic_creation); a denied
    name must not reach it: Kafka never creates a topic the client may not describe."""
    tag = uuid.uuid4().hex[:6]
    hidden, control = f"hidden-{tag}", f"auto-{tag}"
    via = await _metadata(kgate.port, 12, [MetadataRequestTopic(name=hidden)], auto_create=True)
    assert [(t.name, t.error_code, t.topic_id.int) for t in via] == [(hidden, 29, 0)]
    ctl = await _metadata(kgate.port, 12, [MetadataRequestTopic(name=control)], auto_create=True)
    # control: an allowed name is auto-created. The first answer says "not yet": Tansu 5 (leader not
    # yet known) or 0; Kafka 3 (its controller creates the topic after answering)
    assert ctl[0].error_code in (0, 3, 5)
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        after = {t.name for t in await _metadata(broker.port, 12, None, auto_create=False)}  # every topic
        if control in after or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert control in after
    assert hidden not in after


async def test_a_denied_topic_looked_up_by_id_keeps_its_id_and_hides_its_name(broker, kgate) -> None:
    """As Kafka answers a lookup by id: error 29, the id the client asked for, and no name."""
    tag = uuid.uuid4().hex[:6]
    shown, hidden = f"shown-{tag}", f"hidden-{tag}"
    _create(broker.bootstrap, shown, hidden)
    named = [MetadataRequestTopic(name=n) for n in (shown, hidden)]
    ids = {t.name: t.topic_id for t in await _metadata(broker.port, 12, named, auto_create=False)}
    asked = [MetadataRequestTopic(name=None, topic_id=ids[n]) for n in (shown, hidden)]
    via = {t.topic_id: t for t in await _metadata(kgate.port, 12, asked, auto_create=False)}
    assert via[ids[shown]].name == shown
    assert via[ids[shown]].error_code == 0
    assert via[ids[shown]].partitions
    assert (via[ids[hidden]].name, via[ids[hidden]].error_code, via[ids[hidden]].partitions) == (None, 29, [])


@pytest.mark.parametrize("version", [10, 11])
async def test_v10_v11_lookup_by_id_is_invalid_for_allowed_and_denied_alike(broker, kgate, version) -> None:
    """The spec allows ids in Metadata requests only from v12; Kafka answers each topic of such a
    request INVALID_REQUEST. Before, a denied id made topic-policy raise (connection closed) while an
    allowed one got an answer: an existence oracle. Now both get 42 and the connection stays."""
    tag = uuid.uuid4().hex[:6]
    shown, hidden = f"shown-{tag}", f"hidden-{tag}"
    _create(broker.bootstrap, shown, hidden)
    ids = {}
    for name in (shown, hidden):
        (t,) = await _metadata(broker.port, 12, [MetadataRequestTopic(name=name)], auto_create=False)
        ids[name] = t.topic_id
    c = UpstreamClient(lambda: [("127.0.0.1", kgate.port)])
    try:
        for name in (hidden, shown, hidden):
            req = api.API_INFO[3].request_class(
                topics=[MetadataRequestTopic(name=None, topic_id=ids[name])], allow_auto_topic_creation=False
            )
            _v, resp = await c.request(3, req, version)
            assert [(t.error_code, t.topic_id) for t in resp.topics] == [(42, ids[name])], name
            assert resp.topics[0].partitions == []
    finally:
        c.close()
