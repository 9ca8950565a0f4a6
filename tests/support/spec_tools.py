"""Shared by the spec-frame tests of ``topic-policy``: a fake ``FilterContext`` and frame round trips.

Messages are built with the codec classes from the spec, encoded to whole frames and decoded back
as kgate does (header, then body), so what a test checks is what a client or broker would receive.
The fake context has a dict as kgate's topic-name cache (synchronous hits) and a dict as "the
cluster" behind the async ``topic_names`` lookup. It stands in for kgate's context because the
test broker (Tansu) lacks these RPC versions.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any
from uuid import UUID

from kgate import testing
from kgate.api import LOOKUP_FAILED, ErrorCode, TopicNameError
from kgate.filters.builtin.authz.topic_policy import TopicPolicy

AUTHZ, UNKNOWN_ID = ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_ID

OK_ID, SECRET_ID, LATE_ID, GONE_ID, FLAKY_ID = (uuid.uuid4() for _ in range(5))
CACHE = {OK_ID: "orders", SECRET_ID: "secret-pay"}  # known to kgate already
CLUSTER = {LATE_ID: "orders-eu"}  # resolvable by a lookup
# GONE_ID: the cluster says "does not exist"; FLAKY_ID: the lookup itself fails (retriable)


def FakeContext(api_key: int, api_version: int, request: Any = None) -> testing.FakeContext:
    """kgate's scripted context with this module's cache and cluster (FLAKY_ID: the lookup fails)."""
    flaky = TopicNameError(LOOKUP_FAILED, "broker unreachable", True)
    cluster: dict[UUID, str | TopicNameError] = {**CLUSTER, FLAKY_ID: flaky}
    return testing.FakeContext(api_key, api_version, request=request, correlation_id=7, cache=CACHE, cluster=cluster)


def policy(**config: Any) -> TopicPolicy:
    cfg = {"allow": ["orders*"], "deny": ["secret-*"], **config}
    return TopicPolicy(TopicPolicy.validate_config(cfg))


#: a message through real frame bytes: encoded as a client (or broker) sends it, decoded as kgate does
through_frames = testing.round_trip_request
response_through_frames = testing.round_trip_response


async def run_check(p: TopicPolicy, ctx: testing.FakeContext, request: Any) -> tuple[Any, bool]:
    """(result, whether the hook suspended)."""
    result = p.check(ctx, request)
    if inspect.isawaitable(result):
        return await result, True
    return result, False
