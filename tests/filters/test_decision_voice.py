"""topic-policy is sugar over the authorizer: the same answers, counts and log lines for the same rule.

* Every api key that names a topic on the request (the table of test_marks_topic_everywhere) gets the
  same answer from ``topic-policy`` denying a topic as from the ``authorizer`` denying everything on it
  (AddPartitionsToTxn included: 29 per partition, where topic-policy used to let it through).
* topic-policy's refusals are counted in ``kgate_authz_decisions_total{filter="topic-policy"}`` and
  logged as the authorizer logs its own, with the facts as log record fields for the JSON format.
* Every ``api`` label is the api's name as Kafka spells it (``Metadata``), as kgate's other metrics.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest
from prometheus_client.core import REGISTRY
from test_marks_topic_everywhere import MARKS, MARKS_ID, REQUESTS

from kgate import testing
from kgate.api import ApiKey, Filter
from kgate.codec import api
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.filters.chain import Decision, FilterChain, Verdict, run_hooks
from kgate.proxy.carrier.settle import settle


def policy() -> TopicPolicy:
    return TopicPolicy(TopicPolicy.validate_config({"deny": [MARKS]}))


def authz() -> Authorizer:
    return Authorizer(Authorizer.validate_config({"default": "allow", "rules": [{"deny": "all", "topic": MARKS}]}))


async def decide(f: Filter, key: int) -> tuple[Verdict, Any]:
    version, build = REQUESTS[key]
    request = testing.round_trip_request(key, version, build())
    ctx = testing.FakeContext(key, version, request=request, cache={MARKS_ID: MARKS}, principal="bob")
    decision = run_hooks(FilterChain([f]).hooks("request", key, version), ctx, request)
    if not isinstance(decision, Decision):
        decision = await settle(decision, 5.0, request)
    if decision.verdict is Verdict.RESPOND:
        return decision.verdict, testing.round_trip_response(key, version, decision.result.message)  # type: ignore[union-attr]
    return decision.verdict, decision.message


@pytest.mark.parametrize("key", sorted(REQUESTS), ids=lambda k: ApiKey(k).name)
async def test_topic_policy_answers_as_the_authorizer(key: int) -> None:
    by_policy, by_authz = await decide(policy(), key), await decide(authz(), key)
    assert by_policy == by_authz
    assert by_policy[0] is Verdict.RESPOND  # (the request names the denied topic only)


async def test_add_partitions_to_txn_on_a_denied_topic_is_refused_per_partition() -> None:
    verdict, answer = await decide(policy(), ApiKey.ADD_PARTITIONS_TO_TXN)
    assert verdict is Verdict.RESPOND
    assert [
        (t.name, [p.partition_error_code for p in t.results_by_partition]) for t in answer.results_by_topic_v3_and_below
    ] == [(MARKS, [29])]


def _samples() -> dict[tuple[str, str, str, str], float]:
    out = {}
    for family in REGISTRY.collect():
        if family.name == "kgate_authz_decisions":
            for s in family.samples:
                if s.name.endswith("_total"):
                    labels = s.labels
                    out[(labels["cluster"], labels["filter"], labels["decision"], labels["api"])] = s.value
    return out


async def test_topic_policy_refusals_are_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    f = policy()
    # the samples sum every live filter's counts (a WeakSet): an earlier test's filter still awaiting
    # the cycle collector would leave the sum between the two samples and hide this test's count
    gc.collect()
    before = _samples()
    with caplog.at_level(logging.WARNING, logger="kgate.authz"):
        for key in (ApiKey.PRODUCE, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.CREATE_PARTITIONS):
            await decide(f, key)
    after = _samples()
    for name in ("Produce", "AddPartitionsToTxn", "CreatePartitions"):
        key = ("test", "topic-policy", "deny", name)
        assert after.get(key, 0) - before.get(key, 0) == 1, name
    records = [r for r in caplog.records if r.name == "kgate.authz"]
    assert records[0].getMessage() == (
        "authz topic-policy: denied cluster=test principal=bob client_id='test-client' address=127.0.0.1:50000 "
        f"api=Produce resource=topic:{MARKS} operation=write"
    )
    first = records[0]
    assert (first.cluster, first.principal, first.client_id, first.api, first.resource, first.decision) == (  # type: ignore[attr-defined]
        "test",
        "bob",
        "test-client",
        "Produce",
        f"topic:{MARKS}",
        "deny",
    )
    assert {r.api for r in records} == {"Produce", "AddPartitionsToTxn", "CreatePartitions"}  # type: ignore[attr-defined]


def test_every_api_label_is_spelled_as_kafka_names_the_api() -> None:
    f = authz()
    f.report.counts[("test", ApiKey.METADATA, True)] += 1
    labels = {k[3] for k in _samples()}
    assert "Metadata" in labels
    assert "METADATA" not in labels
    assert labels <= {info.name for info in api.API_INFO.values()}


@pytest.mark.parametrize("which", ["topic-policy", "authorizer"])
def test_a_peeked_produce_by_an_unknown_id_leaves_no_coroutine_behind(which: str) -> None:
    """The peek cannot decide (the id needs a lookup): its coroutine is closed unstarted, none leaks
    (the authorizer's counting wrapper used to leave the inner one never awaited)."""
    import gc
    import uuid
    import warnings

    from kgate.codec.generated.data.produce import ProduceRequest, TopicProduceData
    from kgate.filters.chain import peek_forwards

    f: Filter = policy() if which == "topic-policy" else authz()
    peeked = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[TopicProduceData(name="", topic_id=uuid.uuid4(), partition_data=[])],
    )
    ctx = testing.FakeContext(ApiKey.PRODUCE, 13)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not peek_forwards(FilterChain([f]).peek_hooks(ApiKey.PRODUCE, 13), ctx, peeked)
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
