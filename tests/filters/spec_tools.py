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
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from kgate.codec import api
from kgate.codec.headers import parse_request_header, request_frame, response_body_offset, response_frame
from kgate.filters.builtin.topic_policy import TopicPolicy
from kgate.proxy.topic_names import LOOKUP_FAILED, TopicNameError

AUTHZ, UNKNOWN_ID = 29, 100

OK_ID, SECRET_ID, LATE_ID, GONE_ID, FLAKY_ID = (uuid.uuid4() for _ in range(5))
CACHE = {OK_ID: "orders", SECRET_ID: "secret-pay"}  # known to kgate already
CLUSTER = {LATE_ID: "orders-eu"}  # resolvable by a lookup
# GONE_ID: the cluster says "does not exist"; FLAKY_ID: the lookup itself fails (retriable)


class FakeContext:
    """What ``TopicPolicy`` uses of a ``FilterContext``."""

    def __init__(self, api_key: int, api_version: int, request: Any = None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = 7
        self.request = request  # in a response hook: the decoded request
        self.state: dict[str, Any] = {}
        self.lookups: list[list[UUID]] = []

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        return CACHE.get(topic_id)

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        ids = list(topic_ids)
        self.lookups.append(ids)
        out: dict[UUID, str | TopicNameError] = {}
        for tid in ids:
            if tid in CLUSTER:
                out[tid] = CLUSTER[tid]
            elif tid == FLAKY_ID:
                out[tid] = TopicNameError(LOOKUP_FAILED, "broker unreachable", True)
            else:
                out[tid] = TopicNameError(UNKNOWN_ID, "topic id does not exist", False)
        return out


def policy(**config: Any) -> TopicPolicy:
    cfg = {"allow": ["orders*"], "deny": ["secret-*"], **config}
    return TopicPolicy(TopicPolicy.validate_config(cfg))


def through_frames(api_key: int, version: int, request: Any) -> Any:
    """Encode ``request`` as a client would send it and decode it as kgate does."""
    body = request.encode(version)
    frame = request_frame(api_key, version, 42, "spec-client", api.request_header_version(api_key, version), body)
    header = parse_request_header(memoryview(frame), api.request_header_version(api_key, version))
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 42)
    return api.decode_request(api_key, version, memoryview(frame)[header.body_offset :])


def response_through_frames(api_key: int, version: int, response: Any) -> Any:
    hv = api.response_header_version(api_key, version)
    frame = response_frame(42, hv, response.encode(version))
    return api.decode_response(api_key, version, memoryview(frame)[response_body_offset(frame, hv) :])


async def run_check(p: TopicPolicy, ctx: FakeContext, request: Any) -> tuple[Any, bool]:
    """(result, whether the hook suspended)."""
    result = p.check(ctx, request)
    suspended = inspect.isawaitable(result)
    if suspended:
        result = await result
    return result, suspended
