"""Per-topic helpers for filters: which topics a request names, and refusing some of them.

Refusing part of a request must not fail the rest: a Produce carrying an allowed and a denied
topic has to write the allowed one and report an error for the other, or the client retries
the whole batch forever. ``refuse_topics`` therefore forwards the request without the refused
topics and remembers error entries for them in the exchange's state; ``merge_refused`` (call
it from a response hook of the same api key) appends those entries to the broker's answer.
When every topic is refused, the client is answered directly and nothing goes upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgate.api.errors import TopicKey, error_response, topic_key
from kgate.api.filter import FORWARD, FilterContext, Result, forward, respond
from kgate.codec.generated.api_keys import ApiKey

# api key -> (request list attribute, name attribute in it, response list attribute)
TOPIC_LISTS: dict[int, tuple[str, str, str]] = {
    ApiKey.PRODUCE: ("topic_data", "name", "responses"),
    ApiKey.FETCH: ("topics", "topic", "responses"),
    ApiKey.LIST_OFFSETS: ("topics", "name", "topics"),
    ApiKey.METADATA: ("topics", "name", "topics"),
    ApiKey.OFFSET_COMMIT: ("topics", "name", "topics"),
    ApiKey.DELETE_TOPICS: ("topics", "name", "responses"),  # v6+; older versions use topic_names
    ApiKey.DELETE_RECORDS: ("topics", "name", "topics"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ("topics", "topic", "topics"),
    ApiKey.TXN_OFFSET_COMMIT: ("topics", "name", "topics"),
    ApiKey.ELECT_LEADERS: ("topic_partitions", "topic", "replica_election_results"),  # null: every partition
    ApiKey.OFFSET_DELETE: ("topics", "name", "topics"),
    ApiKey.DESCRIBE_PRODUCERS: ("topics", "name", "topics"),
    ApiKey.SHARE_FETCH: ("topics", "topic_id", "responses"),  # ids only
    ApiKey.SHARE_ACKNOWLEDGE: ("topics", "topic_id", "responses"),  # ids only
}

_STATE_KEY = "kgate.refused"


def _entries(api_key: int, request: Any) -> tuple[str, str, list[Any]]:
    list_attr, name_attr, _resp = TOPIC_LISTS[api_key]
    if api_key == ApiKey.DELETE_TOPICS and not getattr(request, "topics", None):
        return "topic_names", "", list(request.topic_names)
    return list_attr, name_attr, list(getattr(request, list_attr) or [])


def request_topics(api_key: int, request: Any) -> list[TopicKey]:
    """The topics (ids or names) a request names, in order, for the api keys in ``TOPIC_LISTS``."""
    _attr, name_attr, entries = _entries(api_key, request)
    if not name_attr:
        return entries
    return [topic_key(t, name_attr) for t in entries]


def refuse_topics(
    ctx: FilterContext, request: Any, codes: Mapping[TopicKey, int], answer_when_empty: bool = True
) -> Result:
    """Answer the topics in ``codes`` with their error code; let the rest through.

    When every topic is refused, kgate answers the client itself; ``answer_when_empty=False``
    forwards the request with an empty topic list instead, for RPCs whose answer carries more than
    the topics (Metadata v1+: the brokers and the controller).
    """
    if not codes:
        return FORWARD
    api_key = ctx.api_key
    attr, name_attr, entries = _entries(api_key, request)

    def key(t: Any) -> TopicKey:
        return t if not name_attr else topic_key(t, name_attr)

    refused = [t for t in entries if key(t) in codes]
    kept = [t for t in entries if key(t) not in codes]
    # An earlier filter of the chain may have refused other topics of this request already (the state is
    # the exchange's, shared by the chain): its error entries are kept, never overwritten.
    prior = ctx.state.pop(_STATE_KEY, None)
    resp_attr = TOPIC_LISTS[api_key][2]
    if not kept and answer_when_empty:
        resp = error_response(api_key, ctx.api_version, request, 0, codes)
        if prior is not None:  # the answer ends the chain: the earlier filter's hook will not merge them
            setattr(resp, resp_attr, list(getattr(prior, resp_attr)) + list(getattr(resp, resp_attr)))
        return respond(resp)
    setattr(request, attr, refused)
    errors = error_response(api_key, ctx.api_version, request, 0, codes)
    setattr(request, attr, kept)
    if prior is not None:
        setattr(errors, resp_attr, list(getattr(prior, resp_attr)) + list(getattr(errors, resp_attr)))
    ctx.state[_STATE_KEY] = errors
    return forward(request)


def merge_refused(ctx: FilterContext, response: Any) -> Result:
    """In a response hook: add the error entries ``refuse_topics`` kept back for this exchange."""
    state = ctx.state
    errors = state.pop(_STATE_KEY, None) if state else None  # merged once, by the first hook to run
    if errors is None:
        return FORWARD
    attr = TOPIC_LISTS[ctx.api_key][2]
    setattr(response, attr, list(getattr(response, attr)) + list(getattr(errors, attr)))
    return forward(response)
