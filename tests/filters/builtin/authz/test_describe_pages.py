"""DescribeTopicPartitions pages over the topics a client may describe (``topic_visibility.fill_pages``).

A client paging with ``response_partition_limit=1`` (and 2, 3) through topic-policy, the authorizer,
internal-topics or all three never sees a cursor naming a hidden topic, gets every shown partition
exactly once, and every page but the last is full, as Kafka's own handler pages after filtering. The
broker here is a stand-in that pages a sorted topic list as Kafka's ``DescribeTopicPartitions`` does
(the e2e tests against Kafka 4.3.1 and 4.0.2 are in test_describe_pages_e2e.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kgate import testing
from kgate.api import FORWARD, ApiKey, Filter
from kgate.codec.generated.data import describe_topic_partitions as dtp
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.filters.builtin.internal_topics.filter import InternalTopics
from kgate.filters.chain import Decision, FilterChain, Verdict, run_hooks
from kgate.proxy.carrier.settle import settle

MARKS = "__kgate_internal_topics"
BROKER = {  # name -> partitions
    "a-open": 2,
    "b-secret-1": 3,
    "c-open": 1,
    "d-secret-2": 1,
    "e-hidden": 2,
    MARKS: 1,
    "f-open": 3,
    "g-secret-3": 2,
    "secret-data": 2,
    "secret-other": 1,
    "z-open": 1,
}
HIDDEN = {"b-secret-1", "d-secret-2", "g-secret-3", "secret-data", "secret-other", "e-hidden", MARKS}


def broker_page(request: Any) -> dtp.DescribeTopicPartitionsResponse:
    """Kafka's paging: topics sorted by name from the cursor's topic (and partition) on, at most
    ``response_partition_limit`` partitions; the cursor names the first partition not returned."""
    names = sorted(BROKER) if not request.topics else sorted({t.name for t in request.topics if t.name in BROKER})
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    out: list[Any] = []
    left = request.response_partition_limit
    next_cursor = None
    for name in names:
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        parts = list(range(start, BROKER[name]))
        if not parts:
            continue
        if left == 0:
            next_cursor = dtp.DescribeTopicPartitionsResponseCursor(topic_name=name, partition_index=parts[0])
            break
        take = parts[:left]
        out.append(
            dtp.DescribeTopicPartitionsResponseTopic(
                error_code=0,
                name=name,
                topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
                is_internal=False,
                partitions=[
                    dtp.DescribeTopicPartitionsResponsePartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=1,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                    for p in take
                ],
            )
        )
        left -= len(take)
        if len(take) < len(parts):
            next_cursor = dtp.DescribeTopicPartitionsResponseCursor(topic_name=name, partition_index=parts[len(take)])
            break
    return dtp.DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=out, next_cursor=next_cursor)


def policy() -> Filter:
    return TopicPolicy(TopicPolicy.validate_config({"deny": ["*secret-*", "e-hidden"]}))


def authz() -> Filter:
    return Authorizer(
        Authorizer.validate_config(
            {
                "default": "deny",
                "rules": [
                    {"allow": "all", "topic": "*"},
                    {"deny": "all", "topic": {"glob": "*secret-*"}},
                    {"deny": "all", "topic": "e-hidden"},
                ],
            }
        )
    )


def internal() -> Filter:
    f = InternalTopics(InternalTopics.validate_config({}))
    f.store.ready.set()  # as once the store has read the marks (none here)
    return f


CHAINS: dict[str, tuple[Callable[[], list[Filter]], set[str]]] = {
    "topic-policy": (lambda: [policy()], HIDDEN - {MARKS}),
    "authorizer": (lambda: [authz()], HIDDEN - {MARKS}),
    "internal-topics": (lambda: [internal()], {MARKS}),
    "all": (lambda: [policy(), authz(), internal()], HIDDEN),
    "all-reversed": (lambda: [internal(), authz(), policy()], HIDDEN),
}


async def ask(chain: FilterChain, request: dtp.DescribeTopicPartitionsRequest) -> tuple[Any, int]:
    """The client's answer through the chain, and how many requests reached the broker."""
    key, version = ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0
    request = testing.round_trip_request(key, version, request)
    ctx = testing.FakeContext(key, version, request=request, upstream={key: broker_page})
    decision = run_hooks(chain.hooks("request", key, version), ctx, request)
    assert isinstance(decision, Decision)
    if decision.verdict is Verdict.RESPOND:  # every name asked for refused
        return testing.round_trip_response(key, version, decision.result.message), 0  # type: ignore[union-attr]
    assert decision.verdict is Verdict.FORWARD
    answer = testing.round_trip_response(key, version, broker_page(decision.message))
    result = run_hooks(chain.hooks("response", key, version, bool(ctx.state)), ctx.for_response(), answer)
    if not isinstance(result, Decision):
        result = await settle(result, 5.0, answer)
    assert result.verdict is Verdict.FORWARD, result
    return testing.round_trip_response(key, version, result.message), 1 + len(ctx.sent)


@pytest.mark.parametrize("limit", [1, 2, 3])
@pytest.mark.parametrize("which", sorted(CHAINS))
async def test_paging_never_names_a_hidden_topic(which: str, limit: int) -> None:
    build, hidden = CHAINS[which]
    chain = FilterChain(build())
    cursor = None
    seen: list[tuple[str, int]] = []
    pages: list[int] = []
    for _ in range(100):
        answer, _asked = await ask(
            chain, dtp.DescribeTopicPartitionsRequest(topics=[], response_partition_limit=limit, cursor=cursor)
        )
        assert not {t.name for t in answer.topics} & hidden
        page = [(t.name, p.partition_index) for t in answer.topics for p in t.partitions]
        seen += page
        pages.append(len(page))
        nxt = answer.next_cursor
        if nxt is None:
            break
        assert nxt.topic_name not in hidden, (which, nxt.topic_name)
        cursor = dtp.Cursor(topic_name=nxt.topic_name, partition_index=nxt.partition_index)
    want = [(n, p) for n in sorted(BROKER) if n not in hidden for p in range(BROKER[n])]
    assert seen == want
    assert all(n == limit for n in pages[:-1]), pages
    assert 0 < pages[-1] <= limit, pages


@pytest.mark.parametrize("which", ["topic-policy", "authorizer", "all"])
async def test_explicit_topics_denied_ones_never_reach_the_broker(which: str) -> None:
    """As Kafka: names asked for and refused answer 29 (on every page from the cursor's topic on); they
    take no room in a page, and the cursor never names one."""
    chain = FilterChain(CHAINS[which][0]())
    asked = [dtp.TopicRequest(name=n) for n in ("c-open", "b-secret-1", "a-open", "secret-data")]
    answer, sent = await ask(chain, dtp.DescribeTopicPartitionsRequest(topics=asked, response_partition_limit=2))
    assert [(t.name, t.error_code, len(t.partitions), t.topic_id.int) for t in answer.topics] == [
        ("a-open", 0, 2, answer.topics[0].topic_id.int),
        ("b-secret-1", 29, 0, 0),
        ("secret-data", 29, 0, 0),
    ]
    assert answer.next_cursor.topic_name == "c-open"
    assert sent == 1
    cursor = dtp.Cursor(topic_name="c-open", partition_index=0)
    answer, _ = await ask(
        chain, dtp.DescribeTopicPartitionsRequest(topics=asked, response_partition_limit=2, cursor=cursor)
    )
    assert [(t.name, t.error_code) for t in answer.topics] == [("c-open", 0), ("secret-data", 29)]
    assert answer.next_cursor is None
    only_denied = [dtp.TopicRequest(name="b-secret-1")]
    answer, sent = await ask(chain, dtp.DescribeTopicPartitionsRequest(topics=only_denied))
    assert [(t.name, t.error_code) for t in answer.topics] == [("b-secret-1", 29)]
    assert sent == 0


async def test_a_page_nothing_was_hidden_from_asks_the_broker_once() -> None:
    chain = FilterChain([policy()])
    answer, asked = await ask(chain, dtp.DescribeTopicPartitionsRequest(topics=[], response_partition_limit=1))
    assert [t.name for t in answer.topics] == [MARKS]
    assert asked == 1
    assert answer.next_cursor.topic_name == "a-open"


def test_hooks_are_sync_when_nothing_is_hidden() -> None:
    """The common answer (nothing hidden, cursor on a shown topic) takes no coroutine."""
    f = TopicPolicy(TopicPolicy.validate_config({"deny": ["nothing-*"]}))
    ctx = testing.FakeContext(
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        0,
        request=dtp.DescribeTopicPartitionsRequest(topics=[], response_partition_limit=1),
    )
    result = f.described_topics(ctx, broker_page(ctx.request))
    assert result is FORWARD
