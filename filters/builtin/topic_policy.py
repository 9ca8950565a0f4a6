"""``topic-policy``: allow or deny topics by name, whether the client names them or sends ids.

Denied topics are also hidden where they are listed or described (Metadata,
DescribeTopicPartitions), their committed offsets from OffsetFetch and their share-group start
offsets from DescribeShareGroupOffsets, and group RPCs (consumer, share and Streams groups) that
subscribe to, assign or name them in a topology are refused (see filters.builtin.topic_visibility),
so no answer reveals their ids or data.

The point of this filter is the topic-id problem: from Fetch v13 and Produce v13 on, clients
name topics only by id, so a name-based rule needs kgate's id -> name service. Names already
known are checked synchronously (no task, no future); an unknown id suspends only this request
while kgate looks it up upstream.

Fail closed: an id that cannot be resolved is refused (``unresolved_error``), never let through.
Refused topics get a per-topic error and the rest of the request goes on (see filters.topics).

Config::

    - name: topic-policy
      config:
        deny: ["secret-*", "__consumer_offsets"]   # shell-style patterns; deny wins
        allow: ["*"]                                # optional; when given, only these pass
        unresolved_error: UNKNOWN_TOPIC_ID          # or TOPIC_AUTHORIZATION_FAILED
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from kgate.api import (
    FORWARD,
    ApiKey,
    ErrorCode,
    Filter,
    FilterConfigError,
    FilterContext,
    Result,
    TopicKey,
    error_response,
    forward,
    merge_refused,
    on_request,
    on_response,
    refuse_topics,
    request_topics,
    respond,
)
from kgate.filters.builtin.acl_rules import Identity, Op, Res, RuleSet, topic_policy_rules
from kgate.filters.builtin.authorizer import Authorizer
from kgate.filters.builtin.authz_shapes import known_names, look_up
from kgate.filters.builtin.topic_visibility import (
    denied_subscriptions,
    hide_log_dir_topics,
    hide_offsets,
    hide_share_group_offsets,
    hide_transaction_topics,
    hide_undescribable,
    note_describe_rule,
    offset_fetch_topic_keys,
    refuse_classic_groups_with_denied_assignments,
    refuse_groups_with_denied_assignments,
    refuse_streams_groups_with_denied_topics,
    topology_topics,
)
from kgate.filters.exchanges import record_policy_decision

_ZERO = UUID(int=0)
_ANYONE = Identity()  # topic-policy's rules name topics only: every client gets the same verdict
_UNRESOLVED = {e.name: e for e in (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)}
_KEYS = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.OFFSET_COMMIT,
    ApiKey.DELETE_TOPICS,
    ApiKey.DELETE_RECORDS,
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.OFFSET_DELETE,
    ApiKey.DESCRIBE_PRODUCERS,
    ApiKey.SHARE_FETCH,
    ApiKey.SHARE_ACKNOWLEDGE,
    ApiKey.ELECT_LEADERS,
)


_ADMIN_KEYS = (
    ApiKey.CREATE_TOPICS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS,  # a denied topic's share-group start offsets are not changed
    ApiKey.DELETE_SHARE_GROUP_OFFSETS,  # nor deleted (topic-policy's rules allow every group)
)


def _patterns(config: Mapping[str, Any], key: str) -> list[str] | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FilterConfigError(f"{key}: expected a list of topic name patterns, got {value!r}")
    return value


class TopicPolicy(Filter):
    name = "topic-policy"

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        unknown = set(config) - {"deny", "allow", "unresolved_error"}
        if unknown:
            raise FilterConfigError(f"unknown keys {sorted(unknown)} (allowed: allow, deny, unresolved_error)")
        deny = _patterns(config, "deny") or []
        allow = _patterns(config, "allow")
        unresolved = config.get("unresolved_error", "UNKNOWN_TOPIC_ID")
        if unresolved not in _UNRESOLVED:
            raise FilterConfigError(f"unresolved_error: expected one of {sorted(_UNRESOLVED)}, got {unresolved!r}")
        return {"deny": deny, "allow": allow, "unresolved_error": unresolved}

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        # the allow/deny lists are sugar over the authorizer's rules (filters.builtin.acl_rules)
        self.rules = RuleSet(*topic_policy_rules(config["deny"], config["allow"]))
        # admin RPCs on topics go through the authorizer's handlers, with this rule set
        admin_config = Authorizer.validate_config({"unresolved_error": config["unresolved_error"]})
        self._admin = Authorizer(admin_config, rules=self.rules, report_as=self.name)
        self._unresolved_code = _UNRESOLVED[config["unresolved_error"]]
        self._verdicts: dict[str, bool] = {}

    def allowed(self, name: str) -> bool:
        verdict = self._verdicts.get(name)
        if verdict is None:
            verdict = self.rules.decide(_ANYONE, Res.TOPIC, name, Op.READ)
            if len(self._verdicts) < 100_000:
                self._verdicts[name] = verdict
        return verdict

    def _noted(
        self, ctx: FilterContext, names: Mapping[TopicKey, str], codes: dict[TopicKey, int]
    ) -> dict[TopicKey, int]:
        """``codes``, each refusal noted for the audit log (filters/exchanges.py); nothing when empty."""
        for key, code in codes.items():
            name = names.get(key)
            if isinstance(key, UUID) and name is None:
                reason = "topic id could not be resolved (fail closed)"
            else:
                reason = "topic denied by topic-policy"
            record_policy_decision(ctx, self.name, name if name is not None else key, code, reason)
        return codes

    def _codes(self, names: Mapping[TopicKey, str], unresolved: Iterable[UUID]) -> dict[TopicKey, int]:
        """Error code per refused topic: denied ones, and ids that could not be resolved (fail closed)."""
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        codes: dict[TopicKey, int] = {k: denied for k, n in names.items() if not self.allowed(n)}
        for topic_id in unresolved:
            codes[topic_id] = self._unresolved_code
        return codes

    # -- per-topic data RPCs: refuse topic by topic (filters.topics) ---------------------------
    def check(self, ctx: FilterContext, request: Any) -> Result | Any:
        if ctx.api_key == ApiKey.ELECT_LEADERS and request.topic_partitions is None:
            # null asks for an election on every partition, the denied topics' too: refused whole,
            # as Kafka refuses a client without ALTER on the cluster
            return respond(
                error_response(ctx.api_key, ctx.api_version, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            )
        names, missing = known_names(ctx, request_topics(ctx.api_key, request))
        if missing:
            return self._check_after_lookup(ctx, request, names, missing)
        return refuse_topics(ctx, request, self._noted(ctx, names, self._codes(names, ())))

    async def _check_after_lookup(
        self, ctx: FilterContext, request: Any, names: dict[TopicKey, str], missing: list[UUID]
    ) -> Result:
        unresolved = await look_up(ctx, names, missing)
        return refuse_topics(ctx, request, self._noted(ctx, names, self._codes(names, unresolved)))

    def merge(self, ctx: FilterContext, response: Any) -> Result:
        return merge_refused(ctx, response)

    # -- listings, offsets and groups (filters.builtin.topic_visibility) -----------------------
    def keep_request(self, ctx: FilterContext, request: Any) -> Result:
        """Nothing to refuse up front; declaring it makes kgate decode the request for the response hook
        (and DescribeTopicPartitions notes the rule for the pages kgate may ask for: ``fill_pages``)."""
        if ctx.api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
            return note_describe_rule(ctx, request, self.allowed)
        return FORWARD

    @on_request(ApiKey.METADATA)
    def metadata_request(self, ctx: FilterContext, request: Any) -> Result:
        """Denied topics named in a Metadata request never reach the broker.

        With ``allow_auto_topic_creation`` (and before v4, always, if the broker auto-creates) the
        broker would create a denied topic just for being asked about it. Such topics are cut out
        of the request and answered with TOPIC_AUTHORIZATION_FAILED, merged into the broker's
        answer; a request left with no topic still goes (v1+: an empty list asks for none), so the
        client gets the brokers and controller as usual. Topics asked for by id are left to the
        response hook: an id lookup creates nothing.
        """
        topics = request.topics
        if not topics:
            return FORWARD
        if ctx.api_version < 12 and any(getattr(t, "topic_id", _ZERO).int for t in topics):
            # The spec allows ids only from v12. Kafka answers every topic of such a request with
            # INVALID_REQUEST (42), allowed or not; so does kgate, which therefore neither fails on
            # it nor reveals whether a denied id exists (the broker never sees it: Tansu answers
            # v10/v11 ids with a malformed response).
            return respond(error_response(ApiKey.METADATA, ctx.api_version, request, ErrorCode.INVALID_REQUEST))
        codes: dict[TopicKey, int] = {
            t.name: ErrorCode.TOPIC_AUTHORIZATION_FAILED
            for t in topics
            if t.name is not None and not getattr(t, "topic_id", _ZERO).int and not self.allowed(t.name)
        }
        if not codes:
            return FORWARD
        self._noted(ctx, {}, codes)
        return refuse_topics(ctx, request, codes, answer_when_empty=ctx.api_version == 0)

    @on_response(ApiKey.METADATA)
    @on_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
    def described_topics(self, ctx: FilterContext, response: Any) -> Result | Any:
        """Hide denied topics, as Kafka's authorizer does: listed -> left out; asked for -> error 29.

        DescribeTopicPartitions pages over allowed topics only: a filtered page is filled from the
        broker's next pages and its ``next_cursor`` never names a denied topic (``fill_pages``).
        """
        return hide_undescribable(ctx, response, self.allowed)

    @on_response(ApiKey.OFFSET_FETCH)
    def offset_fetch(self, ctx: FilterContext, response: Any) -> Result | Any:
        """Hide denied topics' committed offsets; ids (v10) are resolved first, unresolvable ones hidden too."""
        names, missing = known_names(ctx, offset_fetch_topic_keys(response, ctx.api_version))
        if missing:
            return self._offset_fetch_after_lookup(ctx, response, names, missing)
        return self._hide_offsets(ctx, response, self._codes(names, ()))

    async def _offset_fetch_after_lookup(
        self, ctx: FilterContext, response: Any, names: dict[TopicKey, str], missing: list[UUID]
    ) -> Result:
        unresolved = await look_up(ctx, names, missing)
        return self._hide_offsets(ctx, response, self._codes(names, unresolved))

    @staticmethod
    def _hide_offsets(ctx: FilterContext, response: Any, codes: Mapping[TopicKey, int]) -> Result:
        if codes and hide_offsets(ctx.request, response, ctx.api_version, codes):
            return forward(response)
        return FORWARD

    @on_response(ApiKey.DESCRIBE_TRANSACTIONS)
    def transactions(self, ctx: FilterContext, response: Any) -> Result:
        """Denied topics are left out of the partitions a transaction lists."""
        return forward(response) if hide_transaction_topics(response, self.allowed) else FORWARD

    @on_request(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    @on_request(ApiKey.SHARE_GROUP_HEARTBEAT)
    def group_heartbeat(self, ctx: FilterContext, request: Any) -> Result:
        """Subscribing to a denied topic by name: TOPIC_AUTHORIZATION_FAILED, as Kafka answers it."""
        if not denied_subscriptions(request, self.allowed):
            return FORWARD
        return respond(error_response(ctx.api_key, ctx.api_version, request, ErrorCode.TOPIC_AUTHORIZATION_FAILED))

    @on_request(ApiKey.STREAMS_GROUP_HEARTBEAT)
    def streams_heartbeat(self, ctx: FilterContext, request: Any) -> Result:
        """A Streams topology naming a denied topic (source, repartition or changelog): the joining member is
        answered TOPIC_AUTHORIZATION_FAILED and nothing goes upstream (the broker would create the denied
        internal topics for it)."""
        denied = [n for n in dict.fromkeys(topology_topics(request.topology)) if not self.allowed(n)]
        if not denied:
            return FORWARD
        self._noted(ctx, {}, dict.fromkeys(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        resp = error_response(ctx.api_key, ctx.api_version, request, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        assert resp is not None  # the answer has an error field
        resp.error_message = "Topics not authorized for describe: " + ", ".join(denied)
        return respond(resp)

    @on_response(ApiKey.STREAMS_GROUP_DESCRIBE)
    def streams_describe(self, ctx: FilterContext, response: Any) -> Result:
        """A Streams group whose topology names a denied topic is described as TOPIC_AUTHORIZATION_FAILED."""
        return forward(response) if refuse_streams_groups_with_denied_topics(response, self.allowed) else FORWARD

    @on_response(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
    def share_group_offsets(self, ctx: FilterContext, response: Any) -> Result:
        """A denied topic's share-group start offsets: left out of a whole-group listing, else error 29."""
        return forward(response) if hide_share_group_offsets(ctx.request, response, self.allowed) else FORWARD

    @on_response(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    @on_response(ApiKey.SHARE_GROUP_HEARTBEAT)
    def heartbeat_answer(self, ctx: FilterContext, response: Any) -> Result | Any:
        """Denied topics are left out of the assignment a member sees (a KIP-848 regex subscription is
        resolved by the broker over every topic; see the authorizer's ``heartbeat_answer``)."""
        return self._admin.heartbeat_answer(ctx, response)

    @on_response(ApiKey.CONSUMER_GROUP_DESCRIBE)
    @on_response(ApiKey.SHARE_GROUP_DESCRIBE)
    def group_describe(self, ctx: FilterContext, response: Any) -> Result:
        """A group whose assignments include a denied topic is described as TOPIC_AUTHORIZATION_FAILED."""
        if refuse_groups_with_denied_assignments(response, self.allowed):
            return forward(response)
        return FORWARD

    @on_response(ApiKey.DESCRIBE_LOG_DIRS)
    def log_dirs(self, ctx: FilterContext, response: Any) -> Result:
        """Denied topics are left out of every log dir's listing."""
        return forward(response) if hide_log_dir_topics(response, self.allowed) else FORWARD

    @on_response(ApiKey.DESCRIBE_GROUPS)
    def classic_groups(self, ctx: FilterContext, response: Any) -> Result:
        """A classic consumer group with a member assigned a denied topic is described as refused."""
        if refuse_classic_groups_with_denied_assignments(response, self.allowed):
            return forward(response)
        return FORWARD

    # -- administration: creating topics and their configs (through the authorizer's handlers) ---------
    def admin(self, ctx: FilterContext, request: Any) -> Result | Any:
        """CreateTopics, CreatePartitions and the config RPCs of denied topics are refused before the broker.

        So that none of them reveals a denied topic (CreateTopics would answer TOPIC_ALREADY_EXISTS,
        DescribeConfigs its configs) or changes it; see filters.builtin.authorizer.
        """
        return self._admin.check(ctx, request)

    @on_response(ApiKey.CREATE_TOPICS)
    def created_topics(self, ctx: FilterContext, response: Any) -> Result:
        return self._admin.created_topics(ctx, response)

    def admin_merge(self, ctx: FilterContext, response: Any) -> Result:
        return self._admin.merge(ctx, response)

    for _key in _ADMIN_KEYS:
        admin = on_request(_key)(admin)
        if _key != ApiKey.CREATE_TOPICS:
            admin_merge = on_response(_key, needs_state=True)(admin_merge)
    for _key in _KEYS:
        check = on_request(_key, peek=_key == ApiKey.PRODUCE)(check)  # decides from topics alone
        merge = on_response(_key, needs_state=True)(merge)
    for _key in (ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS):
        keep_request = on_request(_key)(keep_request)
    del _key
