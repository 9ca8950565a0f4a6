"""``record_policy_decision``: what a refusal leaves for the audit log's ``policy`` field.

A hostile Metadata request can name 130,000 denied topics (tests/e2e/test_limits.py does); noting each
refusal must stay linear and bounded, or one request costs seconds of CPU and one audit line megabytes.
"""

from __future__ import annotations

import uuid

from kgate import testing
from kgate.api import ApiKey, ErrorCode
from kgate.filters.exchanges import MAX_POLICY_DECISIONS, POLICY_STATE_KEY, record_policy_decision

DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_a_refusal_noted_twice_is_kept_once_and_ids_are_written_as_kafka_strings() -> None:
    ctx = testing.FakeContext(ApiKey.PRODUCE, 9)
    tid = uuid.UUID(int=1)
    for _ in range(2):  # a Produce peek, then the whole request
        record_policy_decision(ctx, "authorizer", "secret-a", DENIED, "denied")
        record_policy_decision(ctx, "authorizer", tid, DENIED, "denied")
    assert [(d["resource"], d["operation"]) for d in ctx.state[POLICY_STATE_KEY]] == [
        ("secret-a", "Produce"),
        ("AAAAAAAAAAAAAAAAAAAAAQ", "Produce"),
    ]


def test_many_refusals_keep_the_first_ones_only() -> None:
    ctx = testing.FakeContext(ApiKey.METADATA, 1)
    for i in range(50_000):  # quadratic bookkeeping would take minutes here
        record_policy_decision(ctx, "topic-policy", f"secret-{i}", DENIED, "denied")
    kept = ctx.state[POLICY_STATE_KEY]
    assert len(kept) == MAX_POLICY_DECISIONS
    assert [d["resource"] for d in kept[:2]] == ["secret-0", "secret-1"]
