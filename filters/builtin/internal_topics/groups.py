"""``internal-topics`` and groups: kgate's marks topic never reaches a consumer, share or Streams group.

docs/internal-topics.md promises that clients never see the marks topic: it is refused in every RPC
that names a topic's partitions and left out of listings. Groups name topics in their own shapes:

* a heartbeat subscribing to the marks topic by name (Consumer/ShareGroupHeartbeat) or a Streams topology
  naming it is answered TOPIC_AUTHORIZATION_FAILED, as Kafka answers a topic the client may not describe;
* a KIP-848 regex is resolved by the broker over every topic, so the marks topic is left out of the
  assignment a Consumer/ShareGroupHeartbeat answer carries (by id: kgate knows its own topic's id);
* ShareFetch and ShareAcknowledge (ids only) naming it are refused per topic, as Fetch is;
* DescribeShareGroupOffsets leaves it out (or answers it TOPIC_AUTHORIZATION_FAILED where asked for),
  Alter/DeleteShareGroupOffsets refuse it per topic.

System- and user-defined internal topics are read by groups like any other (Connect and Streams read
theirs), so nothing else changes here. The refusals reuse the authorizer's handlers with a rule set that
denies the marks topic alone (as topic-policy does with its lists).
"""

from __future__ import annotations

from typing import Any

from kgate.api import (
    FORWARD,
    ApiKey,
    ErrorCode,
    FilterContext,
    Result,
    TopicKey,
    error_response,
    forward,
    merge_refused,
    on_request,
    on_response,
    refuse_topics,
    respond,
)
from kgate.filters.builtin.authz.acl_rules import RuleSet, topic_policy_rules
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.visibility import hide_share_group_offsets, strip_assignment, topology_topics
from kgate.filters.builtin.internal_topics.answers import AUTHZ_MESSAGE
from kgate.filters.builtin.internal_topics.marks import MarksStore


class GroupHooks:
    """Mixed into ``InternalTopics``: the marks topic kept out of group RPCs (see the module doc)."""

    marks_topic: str
    store: MarksStore
    _group_guard: Authorizer | None = None

    def _guard(self) -> Authorizer:
        """The authorizer's handlers with a rule set that denies the marks topic alone."""
        if self._group_guard is None:  # built on first use: most chains never see these RPCs
            config = Authorizer.validate_config({"unresolved_error": "UNKNOWN_TOPIC_ID"})
            self._group_guard = Authorizer(
                config, rules=RuleSet(*topic_policy_rules([self.marks_topic], None)), report_as="internal-topics"
            )
        return self._group_guard

    def _is_marks(self, name: str | None) -> bool:
        return name == self.marks_topic

    # -- heartbeats --------------------------------------------------------------------------
    @on_request(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    @on_request(ApiKey.SHARE_GROUP_HEARTBEAT)
    @on_request(ApiKey.STREAMS_GROUP_HEARTBEAT)
    def group_heartbeat(self, ctx: FilterContext, request: Any) -> Result:
        """Subscribing to the marks topic by name, or a topology naming it: refused, nothing upstream."""
        if ctx.api_key == ApiKey.STREAMS_GROUP_HEARTBEAT:
            named = topology_topics(request.topology)
        else:
            named = request.subscribed_topic_names or []
        if self.marks_topic not in named:
            return FORWARD
        resp = error_response(ctx.api_key, ctx.api_version, request, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        assert resp is not None  # heartbeat answers have an error field
        resp.error_message = AUTHZ_MESSAGE
        return respond(resp)

    @on_response(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    @on_response(ApiKey.SHARE_GROUP_HEARTBEAT)
    def heartbeat_assignment(self, ctx: FilterContext, response: Any) -> Result:
        """The marks topic left out of an assignment (a regex resolved by the broker may include it)."""
        own = self.store.topic_id
        if own is None or not own.int:
            return FORWARD
        return forward(response) if strip_assignment(response, lambda tid: tid != own) else FORWARD

    # -- share-group data RPCs (topics by id only) ---------------------------------------------------
    @on_request(ApiKey.SHARE_FETCH)
    @on_request(ApiKey.SHARE_ACKNOWLEDGE)
    def share_data(self, ctx: FilterContext, request: Any) -> Result:
        """The marks topic's id refused per topic; no lookup (an id kgate does not know cannot be it)."""
        own = self.store.topic_id
        if own is None or not own.int or not any(t.topic_id == own for t in request.topics or []):
            return FORWARD
        codes: dict[TopicKey, int] = {own: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        return refuse_topics(ctx, request, codes)

    @on_response(ApiKey.SHARE_FETCH, needs_state=True)
    @on_response(ApiKey.SHARE_ACKNOWLEDGE, needs_state=True)
    def share_data_merge(self, ctx: FilterContext, response: Any) -> Result:
        return merge_refused(ctx, response)

    # -- share-group offset admin ----------------------------------------------------------------
    @on_request(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
    @on_request(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
    def share_offsets(self, ctx: FilterContext, request: Any) -> Result | Any:
        if not any(self._is_marks(t.topic_name) for t in request.topics or []):
            return FORWARD
        return self._guard().check(ctx, request)

    @on_response(ApiKey.ALTER_SHARE_GROUP_OFFSETS, needs_state=True)
    @on_response(ApiKey.DELETE_SHARE_GROUP_OFFSETS, needs_state=True)
    def share_offsets_merge(self, ctx: FilterContext, response: Any) -> Result:
        return self._guard().merge(ctx, response)

    @on_request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
    def share_offsets_asked(self, ctx: FilterContext, request: Any) -> Result:
        """Nothing refused up front; declaring it makes kgate decode the request for the answer's hook."""
        return FORWARD

    @on_response(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
    def share_offsets_described(self, ctx: FilterContext, response: Any) -> Result:
        marks = self.marks_topic
        return forward(response) if hide_share_group_offsets(ctx.request, response, lambda n: n != marks) else FORWARD
