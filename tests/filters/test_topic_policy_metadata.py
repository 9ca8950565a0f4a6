"""topic-policy hides denied topics from Metadata, as Kafka's authorizer does (real Tansu, real clients)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.inproc_kgate import InprocKgate, make_config

from codec import api
from codec.generated.metadata import MetadataRequestTopic
from proxy.upstream_client import UpstreamClient


@pytest.fixture
def kgate(tansu):
    k = InprocKgate(make_config(tansu.bootstrap, [{"name": "topic-policy", "config": {"deny": ["hidden-*"]}}])).start()
    yield k
    k.stop()


def _create(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(10)


def test_listing_leaves_denied_topics_out(tansu, kgate) -> None:
    tag = uuid.uuid4().hex[:6]
    shown, hidden = f"shown-{tag}", f"hidden-{tag}"
    _create(tansu.bootstrap, shown, hidden)
    direct = AdminClient({"bootstrap.servers": tansu.bootstrap}).list_topics(timeout=10).topics
    via = AdminClient({"bootstrap.servers": kgate.bootstrap}).list_topics(timeout=10).topics
    assert {shown, hidden} <= set(direct)  # control: the broker has both
    assert shown in via and hidden not in via


async def test_asking_for_a_denied_topic_gets_authorization_failed(tansu, kgate) -> None:
    tag = uuid.uuid4().hex[:6]
    shown, hidden = f"shown-{tag}", f"hidden-{tag}"
    _create(tansu.bootstrap, shown, hidden)
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
    assert by_name[shown].error_code == 0 and by_name[shown].partitions and by_name[shown].topic_id.int
    assert by_name[hidden].error_code == 29
    assert by_name[hidden].partitions == [] and by_name[hidden].topic_id.int == 0  # no id leaks
