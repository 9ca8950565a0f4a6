"""Every order of authorizer / topic-policy / internal-topics / audit-log answers each partition once.

A Produce (v3..v13) or Fetch (v12..v18) naming allowed topics, topics each filter refuses, a topic two
of them refuse, kgate's marks topic and (by id) an id nobody can name goes through an in-process
``FilterChain`` run as kgate's connection core runs it (request hooks in order, a stand-in broker that
answers what reached it, response hooks of the exchange). The broker here is a stand-in: what is under
test is how the filters' kept-back error entries are merged, which no broker sees.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest

from kgate import testing
from kgate.api import ApiKey, ErrorCode, Filter
from kgate.codec.generated.data.fetch import (
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from kgate.codec.generated.data.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from kgate.filters.builtin.audit.filter import AuditLog
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.filters.builtin.internal_topics.filter import InternalTopics
from kgate.filters.chain import Decision, FilterChain, Verdict, run_hooks
from kgate.proxy.carrier.settle import settle

AUTHZ = ErrorCode.TOPIC_AUTHORIZATION_FAILED
MARKS = "__kgate_internal_topics"
TOPICS = {  # name -> the code its partitions must answer (Produce; Fetch differs for system topics)
    "orders": 0,
    "p-hidden-x": AUTHZ,  # topic-policy
    "p-secret-x": AUTHZ,  # authorizer
    "p-secret-hidden-x": AUTHZ,  # both
    "__consumer_offsets": ErrorCode.INVALID_TOPIC_EXCEPTION,  # internal-topics (system topic, Produce only)
    MARKS: AUTHZ,  # internal-topics (kgate's own)
    "audit-x": 0,
}
IDS = {uuid.uuid5(uuid.NAMESPACE_DNS, n): n for n in TOPICS}
MARKS_ID = next(i for i, n in IDS.items() if n == MARKS)
UNKNOWN = uuid.uuid5(uuid.NAMESPACE_DNS, "nobody-knows")
PARTITIONS = (0, 1)


def filters(tmp: Path) -> list[Filter]:
    policy = TopicPolicy(TopicPolicy.validate_config({"deny": ["*-hidden-*"]}))
    authz = Authorizer(
        Authorizer.validate_config(
            {
                "default": "deny",
                "rules": [
                    {"allow": "all", "topic": "*"},
                    {"allow": "all", "group": "*"},
                    {"allow": "all", "cluster": True},
                    {"deny": "all", "topic": {"glob": "*-secret-*"}},
                ],
            }
        )
    )
    internal = InternalTopics(InternalTopics.validate_config({}))
    internal.store.topic_id = MARKS_ID  # the marks store learns its topic's id once started
    audit = AuditLog(AuditLog.validate_config({"directory": str(tmp)}))
    return [authz, policy, internal, audit]


def expected(api_key: int, name: str) -> int:
    if api_key == ApiKey.FETCH and name == "__consumer_offsets":
        return 0  # reading a system topic is allowed
    return TOPICS[name]


def produce(version: int) -> ProduceRequest:
    by_id = version >= 13
    keys: list[Any] = [*IDS, UNKNOWN] if by_id else list(TOPICS)
    return testing.round_trip_request(
        ApiKey.PRODUCE,
        version,
        ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                TopicProduceData(
                    name="" if by_id else k,
                    topic_id=k if by_id else uuid.UUID(int=0),
                    partition_data=[PartitionProduceData(index=p, records=None) for p in PARTITIONS],
                )
                for k in keys
            ],
        ),
    )


def fetch(version: int) -> FetchRequest:
    by_id = version >= 13
    keys: list[Any] = [*IDS, UNKNOWN] if by_id else list(TOPICS)
    return testing.round_trip_request(
        ApiKey.FETCH,
        version,
        FetchRequest(
            max_wait_ms=0,
            min_bytes=1,
            session_id=0,
            session_epoch=-1,
            forgotten_topics_data=[],
            topics=[
                FetchTopic(
                    topic="" if by_id else k,
                    topic_id=k if by_id else uuid.UUID(int=0),
                    partitions=[
                        FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1024) for p in PARTITIONS
                    ],
                )
                for k in keys
            ],
        ),
    )


def broker_answer(api_key: int, request: Any) -> Any:
    """What a broker answers for the topics that reached it: every partition without error."""
    if api_key == ApiKey.PRODUCE:
        return ProduceResponse(
            responses=[
                TopicProduceResponse(
                    name=t.name,
                    topic_id=t.topic_id,
                    partition_responses=[
                        PartitionProduceResponse(index=p.index, error_code=0) for p in t.partition_data
                    ],
                )
                for t in request.topic_data
            ]
        )
    return FetchResponse(
        error_code=0,
        session_id=0,
        responses=[
            FetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    PartitionData(partition_index=p.partition, error_code=0, high_watermark=0, records=None)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


async def run(result: Decision | Any) -> Decision:
    return result if isinstance(result, Decision) else await settle(result, 5.0, None)


async def exchange(chain: FilterChain, api_key: int, version: int, request: Any) -> tuple[Any, Any]:
    """(what reached the broker or None, the client's answer), as proxy/sansio/core.py runs the chain."""
    ctx = testing.FakeContext(api_key, version, request=request, cache=IDS)
    decision = await run(run_hooks(chain.hooks("request", api_key, version), ctx, request))
    if decision.verdict is Verdict.RESPOND:
        return None, decision.result.message  # type: ignore[union-attr]
    assert decision.verdict is Verdict.FORWARD, decision
    sent = testing.round_trip_request(api_key, version, decision.message)
    answer = testing.round_trip_response(api_key, version, broker_answer(api_key, sent))
    rctx = ctx.for_response(request=decision.message)
    hooks = chain.hooks("response", api_key, version, bool(ctx.state))
    final = await run(run_hooks(hooks, rctx, answer))
    assert final.verdict is Verdict.FORWARD, final
    return sent, final.message


def answered(api_key: int, version: int, answer: Any) -> list[tuple[str, int, int]]:
    """(topic, partition, error) for every partition of the answer, topics named by name or id."""
    out = []
    if api_key == ApiKey.PRODUCE:
        for t in answer.responses:
            name = IDS.get(t.topic_id, str(t.topic_id)) if version >= 13 else t.name
            out += [(name, p.index, p.error_code) for p in t.partition_responses]
    else:
        for t in answer.responses:
            name = IDS.get(t.topic_id, str(t.topic_id)) if version >= 13 else t.topic
            out += [(name, p.partition_index, p.error_code) for p in t.partitions]
    return out


CASES = [(ApiKey.PRODUCE, v) for v in range(3, 14)] + [(ApiKey.FETCH, v) for v in range(12, 19)]


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))), ids=lambda o: "".join(map(str, o)))
async def test_every_partition_answered_once_in_any_order(order: tuple[int, ...], tmp_path: Path) -> None:
    chain = FilterChain([filters(tmp_path)[i] for i in order])
    for api_key, version in CASES:
        request = produce(version) if api_key == ApiKey.PRODUCE else fetch(version)
        sent, answer = await exchange(chain, api_key, version, request)
        got = sorted(answered(api_key, version, testing.round_trip_response(api_key, version, answer)))
        want = sorted((n, p, expected(api_key, n)) for n in TOPICS for p in PARTITIONS)
        if version >= 13:
            want += [(str(UNKNOWN), p, ErrorCode.UNKNOWN_TOPIC_ID) for p in PARTITIONS]
            want.sort()
        assert got == want, (ApiKey(api_key).name, version, order)
        reached = {n for n, _p, _e in answered(api_key, version, broker_answer(api_key, sent))}
        assert reached == {n for n in TOPICS if expected(api_key, n) == 0}, (ApiKey(api_key).name, version)
