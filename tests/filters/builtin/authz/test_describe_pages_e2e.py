"""DescribeTopicPartitions paged through kgate never names a denied topic (Apache Kafka 4.3.1 and 4.0.2).

kgate in process in front of a real Kafka broker, with topic-policy or the authorizer denying
``*secret-*``. A client pages with ``response_partition_limit=1``: every cursor names a topic it may
describe, every partition of the allowed topics comes back exactly once, and no page is empty but the
last. The direct listing is the control that the broker pages through the denied topics.
"""

from __future__ import annotations

import fnmatch
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.inproc_kgate import InprocKgate, make_config

from kgate.codec.generated.api_keys import DESCRIBE_TOPIC_PARTITIONS as DTP
from kgate.codec.generated.data.describe_topic_partitions import Cursor, DescribeTopicPartitionsRequest, TopicRequest
from kgate.proxy.carrier.upstream_client import UpstreamClient

DENY = "*secret-*"
FILTERS = {
    "topic-policy": [{"name": "topic-policy", "config": {"deny": [DENY]}}],
    "authorizer": [
        {"name": "authorizer", "config": {"default": "allow", "rules": [{"deny": "all", "topic": {"glob": DENY}}]}}
    ],
}


@pytest.fixture(params=["kafka", "kafka40"])
def kafka_broker(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def topics(kafka_broker: Any) -> dict[str, int]:
    """Allowed and denied topics side by side in name order (a leading digit sorts them before other tests')."""
    tag = "0" + uuid.uuid4().hex[:6]
    made = {
        f"{tag}-a": 2,
        f"{tag}-b-secret-data": 2,
        f"{tag}-c": 1,
        f"{tag}-d-secret-other": 1,
        f"{tag}-d-secret-x": 1,
        f"{tag}-e": 2,
    }
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for f in admin.create_topics([NewTopic(n, p, 1) for n, p in made.items()]).values():
        f.result(30)
    # CreateTopics answers once the controller made them; the broker's metadata, which pages the
    # listing, can lag behind on a loaded machine (the direct control then missed a denied topic)
    deadline = time.monotonic() + 30
    while not all(len(admin.list_topics(n, timeout=10).topics[n].partitions) == p for n, p in made.items()):
        assert time.monotonic() < deadline, f"topics not all in the broker's metadata within 30 s: {made}"
        time.sleep(0.1)
    return made


async def pages(port: int, names: list[str], prefix: str, asked: list[str] | None = None) -> list[Any]:
    """Every page of a listing with limit 1, from the ``prefix`` range's start until the cursor leaves it.

    A listing of every topic starts at ``prefix`` (a cursor naming no topic starts at the next name):
    the session's broker holds other tests' topics, and paging through them one partition a page
    would not reach this test's within any bound.
    """
    client = UpstreamClient(lambda: [("127.0.0.1", port)])
    out: list[Any] = []
    cursor = None if asked else Cursor(topic_name=prefix, partition_index=0)
    try:
        for _ in range(200):
            req = DescribeTopicPartitionsRequest(
                topics=[TopicRequest(name=n) for n in asked or []], response_partition_limit=1, cursor=cursor
            )
            _v, resp = await client.request(DTP, req, 0)
            out.append(resp)
            nxt = resp.next_cursor
            if nxt is None or nxt.topic_name > prefix + "~":
                break
            cursor = Cursor(topic_name=nxt.topic_name, partition_index=nxt.partition_index)
    finally:
        client.close()
    return out


def partitions(answers: list[Any], prefix: str) -> list[tuple[str, int]]:
    return [
        (t.name, p.partition_index)
        for a in answers
        for t in a.topics
        if t.name.startswith(prefix)
        for p in t.partitions
    ]


@pytest.mark.parametrize("which", sorted(FILTERS))
async def test_paging_with_limit_1_never_names_a_denied_topic(
    kafka_broker: Any, topics: dict[str, int], which: str
) -> None:
    prefix = next(iter(topics)).split("-")[0]
    want = [(n, p) for n in sorted(topics) if not fnmatch.fnmatch(n, DENY) for p in range(topics[n])]
    direct = await pages(kafka_broker.port, list(topics), prefix)
    assert any(a.next_cursor is not None and fnmatch.fnmatch(a.next_cursor.topic_name, DENY) for a in direct)
    kgate = InprocKgate(make_config(kafka_broker.bootstrap, FILTERS[which])).start()
    try:
        for asked in (None, list(topics)):
            via = await pages(kgate.port, list(topics), prefix, asked)
            cursors = [a.next_cursor.topic_name for a in via if a.next_cursor is not None]
            assert not [c for c in cursors if fnmatch.fnmatch(c, DENY)], cursors
            assert partitions(via, prefix) == want
            shown = [t.name for a in via for t in a.topics if t.error_code == 0]
            assert not [n for n in shown if fnmatch.fnmatch(n, DENY)]
            assert all(sum(len(t.partitions) for t in a.topics) == 1 for a in via[:-1])
            if asked:  # names asked for and refused: TOPIC_AUTHORIZATION_FAILED, no partitions, no id
                refused = {
                    t.name
                    for a in via
                    for t in a.topics
                    if t.error_code == 29 and not t.partitions and not t.topic_id.int
                }
                assert refused == {n for n in topics if fnmatch.fnmatch(n, DENY)}
    finally:
        kgate.stop()
