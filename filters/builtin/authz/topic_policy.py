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

The lists are sugar over the authorizer's rules (``acl_rules.topic_policy_rules``) and every request
hook is the authorizer's, run with them: the same answers and error codes (AddPartitionsToTxn and ids
included: docs/authorization.md), and refusals counted in ``kgate_authz_decisions_total{filter=
"topic-policy"}`` and logged as the authorizer's. The response hooks hide denied topics with the
verdict cache below (one dict lookup per listed topic).

Config::

    - name: topic-policy
      config:
        deny: ["secret-*", "__consumer_offsets"]   # shell-style patterns; deny wins
        allow: ["*"]                                # optional; when given, only these pass
        unresolved_error: UNKNOWN_TOPIC_ID          # or TOPIC_AUTHORIZATION_FAILED
        refused_heartbeat_delay_ms: 1000            # a member refused again waits this long (0: never)
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
    on_request,
    on_response,
    respond,
)
from kgate.filters.builtin.authz.acl_rules import Identity, Op, Res, RuleSet, topic_policy_rules
from kgate.filters.builtin.authz.authorizer import PER_TOPIC_KEYS, Authorizer
from kgate.filters.builtin.authz.heartbeat_pacing import delay_config
from kgate.filters.builtin.authz.shapes import known_names, look_up
from kgate.filters.builtin.authz.visibility import (
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
    screen_described_metadata,
)

_ZERO = UUID(int=0)
_ANYONE = Identity()  # topic-policy's rules name topics only: every client gets the same verdict
_UNRESOLVED = {e.name: e for e in (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)}
_KEYS = PER_TOPIC_KEYS  # refused per topic, as the authorizer refuses them


# refused whole (AddPartitionsToTxn: all or nothing, as Kafka; heartbeats subscribing to or naming a denied
# topic) or, for Metadata, cut out of the request and merged back by the response hook (described_topics)
_WHOLE_KEYS = (
    ApiKey.METADATA,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    ApiKey.SHARE_GROUP_HEARTBEAT,
    ApiKey.STREAMS_GROUP_HEARTBEAT,
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
        unknown = set(config) - {"deny", "allow", "unresolved_error", "refused_heartbeat_delay_ms"}
        if unknown:
            raise FilterConfigError(
                f"unknown keys {sorted(unknown)} (allowed: allow, deny, unresolved_error, refused_heartbeat_delay_ms)"
            )
        deny = _patterns(config, "deny") or []
        allow = _patterns(config, "allow")
        unresolved = config.get("unresolved_error", "UNKNOWN_TOPIC_ID")
        if unresolved not in _UNRESOLVED:
            raise FilterConfigError(f"unresolved_error: expected one of {sorted(_UNRESOLVED)}, got {unresolved!r}")
        valid: dict[str, Any] = {"deny": deny, "allow": allow, "unresolved_error": unresolved}
        if "refused_heartbeat_delay_ms" in config:  # left out when not given: the default applies
            valid["refused_heartbeat_delay_ms"] = delay_config(config["refused_heartbeat_delay_ms"])
        return valid

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        # the allow/deny lists are sugar over the authorizer's rules (filters.builtin.acl_rules)
        self.rules = RuleSet(*topic_policy_rules(config["deny"], config["allow"]))
        # admin RPCs on topics go through the authorizer's handlers, with this rule set
        admin_config = Authorizer.validate_config(
            {k: config[k] for k in ("unresolved_error", "refused_heartbeat_delay_ms") if k in config}
        )
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

    def _codes(self, names: Mapping[TopicKey, str], unresolved: Iterable[UUID]) -> dict[TopicKey, int]:
        """Error code per refused topic: denied ones, and ids that could not be resolved (fail closed)."""
        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        codes: dict[TopicKey, int] = {k: denied for k, n in names.items() if not self.allowed(n)}
        for topic_id in unresolved:
            codes[topic_id] = self._unresolved_code
        return codes

    # -- requests: the authorizer's handlers with this filter's rule set (one code path) ---------
    def check(self, ctx: FilterContext, request: Any) -> Result | Any:
        """Every request hook: per-topic data RPCs, Metadata, AddPartitionsToTxn, group heartbeats, the
        admin RPCs. Refusals answer what the authorizer answers, and are counted in
        ``kgate_authz_decisions_total{filter="topic-policy"}`` and logged as the authorizer logs them."""
        if ctx.api_key == ApiKey.ELECT_LEADERS and request.topic_partitions is None:
            # null asks for an election on every partition, the denied topics' too: refused whole,
            # as Kafka refuses a client without ALTER on the cluster
            return respond(
                error_response(ctx.api_key, ctx.api_version, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            )
        return self._admin.check(ctx, request)

    def merge(self, ctx: FilterContext, response: Any) -> Result:
        return self._admin.merge(ctx, response)

    # -- screens: the authorizer's, with this filter's rules (filters.builtin.authz.authorizer) ----------
    def screen_metadata_request(self, ctx: FilterContext, body: memoryview) -> Result | None:
        return self._admin.screen_metadata_request(ctx, body)

    def screen_produce_request(self, ctx: FilterContext, body: memoryview) -> Result | None:
        return self._admin.screen_produce_request(ctx, body)

    def screen_metadata_response(self, ctx: FilterContext, body: memoryview) -> Result | None:
        """``described_topics`` for a Metadata answer, from its bytes (no operations to narrow here)."""
        return screen_described_metadata(ctx, body, self.allowed, narrows=False)

    # -- listings, offsets and groups (filters.builtin.topic_visibility) -----------------------
    def keep_request(self, ctx: FilterContext, request: Any) -> Result:
        """Nothing to refuse up front; declaring it makes kgate decode the request for the response hook
        (and DescribeTopicPartitions notes the rule for the pages kgate may ask for: ``fill_pages``)."""
        if ctx.api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
            return note_describe_rule(ctx, request, self.allowed)
        return FORWARD

    @on_response(ApiKey.METADATA, screen="screen_metadata_response")
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
        produce = _key == ApiKey.PRODUCE
        check = on_request(_key, peek=produce, screen="screen_produce_request" if produce else "")(check)
        merge = on_response(_key, needs_state=True)(merge)
    for _key in _WHOLE_KEYS:
        check = on_request(_key, screen="screen_metadata_request" if _key == ApiKey.METADATA else "")(check)
    for _key in (ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS):
        keep_request = on_request(_key)(keep_request)
    del _key, produce
