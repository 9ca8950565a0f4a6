"""``authorizer``: Kafka-style access control at the proxy, for every api key that touches a resource.

Rules (``filters.builtin.acl_rules``) say who (principal, client id, source address) may do which
operations on which topics, groups, transactional ids and the cluster; ``filters.builtin.acl_table``
says, per api key, which checks a request needs; ``filters.builtin.authz_shapes`` where each RPC
lists what it is refused by. This module applies the table to messages:

* a check that covers the whole request refuses it with the api's own error (per topic and
  partition where the api reports errors that way), and nothing goes upstream;
* per-entry checks (topics of a Produce, resources of a DescribeConfigs, groups of a DeleteGroups,
  ...) refuse only the failing entries; the rest goes to the broker and the error entries are
  merged into its answer;
* listings and descriptions are filtered in the answer, so a client never learns that a topic,
  group or transaction it may not describe exists (CreateTopics never answers TOPIC_ALREADY_EXISTS
  for one, DescribeConfigs refuses it before the broker is asked, Metadata leaves it out).

Fail closed: the filter hooks every api key kgate's codec knows; a key missing from the table is
refused; a topic id that cannot be named is refused (``unresolved_error``).

The hot path (a Produce or Fetch of allowed topics) is one dict lookup per topic in the rule set's
decision cache and returns FORWARD, so the original bytes go on; a single-topic Produce is decided
from its topic alone (``peek``) and streams through.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from uuid import UUID

from kgate.api import (
    FORWARD,
    TOPIC_LISTS,
    ApiKey,
    ConnectionInfo,
    ErrorCode,
    Filter,
    FilterConfigError,
    FilterContext,
    Result,
    TopicKey,
    close,
    error_response,
    forward,
    merge_refused,
    on_request,
    on_response,
    refuse_topics,
    request_topics,
    respond,
)
from kgate.codec import api
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.codec.metadata_walk import metadata_ask
from kgate.filters.builtin.authz.acl_rules import CLUSTER_NAME, Identity, Op, Res, RuleSet, identity, parse_rules
from kgate.filters.builtin.authz.acl_table import TABLE, UNCHECKED
from kgate.filters.builtin.authz.heartbeat_pacing import DEFAULT_DELAY_MS, RefusalPacer, delay_config
from kgate.filters.builtin.authz.operations import NOT_REQUESTED, narrowed, operations_bitfield
from kgate.filters.builtin.authz.produce_head import produce_head
from kgate.filters.builtin.authz.report import DecisionReport
from kgate.filters.builtin.authz.shapes import (
    CONFIG_RESOURCES,
    DENIED_MESSAGE,
    ENTRY_LISTS,
    GROUP_DENIED,
    TOPIC_DENIED,
    TOPIC_LIST_KEYS,
    TOPIC_OP,
    TXN_DENIED,
    Entries,
    element_class,
    known_names,
    look_up,
)
from kgate.filters.builtin.authz.visibility import (
    assigned_topic_ids,
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
    strip_assignment,
    topology_internal_topics,
    topology_topics,
)
from kgate.filters.exchanges import record_policy_decision

log = logging.getLogger("kgate.filters.authorizer")

#: the error a refusal of each resource type carries (what Kafka answers for it)
_DENIED_CODE: Mapping[Res, int] = {
    Res.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    Res.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    Res.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    Res.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
}

_ZERO = UUID(int=0)
_UNRESOLVED = {e.name: e for e in (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)}
_DEFAULTS = ("allow", "deny")
_STATE = "authorizer.refused"  # error entries waiting for the broker's answer
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def missing_topics(ctx: FilterContext, names: list[str]) -> list[str]:
    """Which of ``names`` the broker does not have (kgate's own Metadata request; it creates nothing).

    Fail closed: a topic the answer does not show as existing counts as missing.
    """
    req = MetadataRequest(
        topics=[MetadataRequestTopic(name=n, topic_id=_ZERO) for n in names], allow_auto_topic_creation=False
    )
    resp = await ctx.send_request(ApiKey.METADATA, req)
    present = {t.name for t in resp.topics if t.error_code == ErrorCode.NONE}
    return [n for n in names if n not in present]


#: requests refused per topic (the others of the request go on) and answered with the refused
#: topics merged back: the authorizer's and topic-policy's shared list
PER_TOPIC_KEYS = (
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


#: the request hooks' screens (decided from the request's bytes where the common case allows)
#: the largest Metadata request body ``screen_metadata_request`` remembers (one copy per filter instance)
_SEEN_MAX = 4096
_SCREENS: dict[int, str] = {ApiKey.METADATA: "screen_metadata_request", ApiKey.PRODUCE: "screen_produce_request"}


class Authorizer(Filter):
    name = "authorizer"
    refuses_unknown_api_keys = True  # an api key newer than kgate's codec would pass unseen

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        unknown = set(config) - {"rules", "default", "unresolved_error", "refused_heartbeat_delay_ms"}
        if unknown:
            allowed = "rules, default, unresolved_error, refused_heartbeat_delay_ms"
            raise FilterConfigError(f"unknown keys {sorted(unknown)} (allowed: {allowed})")
        default = config.get("default", "deny")
        if default not in _DEFAULTS:
            raise FilterConfigError(f"default: expected allow or deny, got {default!r}")
        parse_rules(config.get("rules"))  # raises, naming rules[i].key
        unresolved = config.get("unresolved_error", "UNKNOWN_TOPIC_ID")
        if unresolved not in _UNRESOLVED:
            raise FilterConfigError(f"unresolved_error: expected one of {sorted(_UNRESOLVED)}, got {unresolved!r}")
        valid = {"rules": list(config.get("rules") or []), "default": default, "unresolved_error": unresolved}
        if "refused_heartbeat_delay_ms" in config:  # left out when not given: the default applies
            valid["refused_heartbeat_delay_ms"] = delay_config(config["refused_heartbeat_delay_ms"])
        return valid

    def __init__(self, config: Mapping[str, Any], *, rules: RuleSet | None = None, report_as: str = "") -> None:
        """``rules``/``report_as``: for topic-policy, which applies its own rule set through these handlers."""
        super().__init__(config)
        self.rules = rules or RuleSet(parse_rules(config["rules"]), config["default"] == "allow")
        self._unresolved_code = _UNRESOLVED[config["unresolved_error"]]
        self.report = DecisionReport(report_as or self.name)
        #: a member refused its subscription again waits for the answer (heartbeat_pacing: the Java client
        #: otherwise heartbeats as fast as it is answered)
        self._pacer = RefusalPacer(config.get("refused_heartbeat_delay_ms", DEFAULT_DELAY_MS))
        self._who_cache: dict[tuple[str | None, str | None, str], Identity] = {}
        #: the connection asked about last, its principal and client id as they were then, and its
        #: identity: a connection's requests follow each other, so ``_who`` mostly compares three
        #: references instead of building and hashing its cache key (see _who)
        self._last_who: tuple[ConnectionInfo | None, str | None, str | None, Identity | None] = (None, None, None, None)
        #: per identity, the ``allowed(name)`` closure ``_describe`` made for it (cleared with the verdicts)
        self._describers: dict[Identity, Callable[[str], bool]] = {}
        #: the last Produce start ``screen_produce_request`` let through: (connection, identity, version,
        #: its bytes up to the topic name's end); a producer's next request repeats them
        self._produce_seen: tuple[ConnectionInfo | None, Identity | None, int, bytes] = (None, None, -1, b"")
        #: the same for the last Metadata request ``screen_metadata_request`` let through (its whole
        #: body: the names or null, the auto-creation flag, the operations asked)
        self._metadata_seen: tuple[ConnectionInfo | None, Identity | None, int, bytes] = (None, None, -1, b"")
        self._describe_verdicts: dict[Identity, dict[str, bool]] = {}  # see _describe
        self._describe_size = 0  # entries in all of them
        self._denials = 0  # checks refused so far; a request's count decides its decision label
        self._screen_counted: FilterContext | None = None  # the request a screen counted last (_count)
        self._requests: dict[int, Callable[[FilterContext, Any, Identity], Any]] = {
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.METADATA: self._metadata,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DESCRIBE_CONFIGS: self._configs,
            ApiKey.ALTER_CONFIGS: self._configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._configs,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._group_heartbeat,
            ApiKey.SHARE_GROUP_HEARTBEAT: self._group_heartbeat,
            ApiKey.STREAMS_GROUP_HEARTBEAT: self._streams_heartbeat,
            ApiKey.ELECT_LEADERS: self._whole,  # cluster alter, then describe per topic
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self._describe_partitions,
        }
        for key in TABLE:
            if key in self._requests:
                continue
            needs = TABLE[key]
            entry = [n for n in needs if n.scope == "entry"]
            if key in TOPIC_LIST_KEYS:
                self._requests[key] = self._topic_list
            elif entry and key in ENTRY_LISTS:
                self._requests[key] = self._entry_list
            elif all(n.scope in ("request", "answer") for n in needs):
                self._requests[key] = self._whole
        missing = set(TABLE) - set(self._requests)
        if missing:  # a table row without a handler is a bug in kgate, caught by any test that builds one
            raise RuntimeError(f"authorizer: no handler for api keys {sorted(missing)}")

    # -- facts -----------------------------------------------------------------------------------
    def _who(self, conn: ConnectionInfo) -> Identity:
        last_conn, principal, client_id, who = self._last_who
        if conn is last_conn and conn.principal is principal and conn.client_id is client_id and who is not None:
            return who  # the connection asked about last, unchanged (its address is fixed)
        key = (conn.principal, conn.client_id, conn.client_address)
        who = self._who_cache.get(key)
        if who is None:
            if len(self._who_cache) >= 10_000:
                self._who_cache.clear()
            who = self._who_cache[key] = identity(conn.principal, conn.client_id, conn.client_address)
        self._last_who = (conn, conn.principal, conn.client_id, who)
        return who

    def _ok(self, ctx: FilterContext, who: Identity, res: Res, name: str, op: Op, log: bool = True) -> bool:
        if self.rules.allowed(who, res, name, op):
            return True
        if log:
            self._denials += 1
            conn = ctx.connection
            self.report.denied(conn.virtual_cluster, who, conn.client_address, ctx.api_key, res, name, op)
            # the audit log's "policy" field (refusals only, so the allowed path pays nothing)
            record_policy_decision(
                ctx,
                self.report.filter_name,
                name,
                _DENIED_CODE[res],
                f"{op.name.lower()} on {res.name.lower()} denied by {self.report.filter_name}",
                resource_type=res.name.lower(),
            )
        return False

    def _count(self, ctx: FilterContext, denials_before: int, peek: bool = False) -> None:
        """Count a decided request once. ``peek``: a Produce let through from its topic alone, which
        kgate asks about again whole, with the same context, when a later filter's peek declines."""
        if ctx is self._screen_counted:  # its screen (or peek) counted it; a later filter's then declined
            if not peek:
                self._screen_counted = None
            return
        self.report.counts[(ctx.connection.virtual_cluster, ctx.api_key, self._denials == denials_before)] += 1
        if peek:
            self._screen_counted = ctx

    def _count_screened(self, ctx: FilterContext) -> None:
        """Count a request a screen forwards, once: kgate calls the hooks with the same context when a
        later filter's screen declines (then ``_count`` leaves it out)."""
        self.report.counts[(ctx.connection.virtual_cluster, ctx.api_key, True)] += 1
        self._screen_counted = ctx

    # -- the one request hook ----------------------------------------------------------------------
    def check(self, ctx: FilterContext, request: Any) -> Any:
        """Dispatch to the api's handler; count the request once it is decided."""
        before = self._denials
        result = self._requests[ctx.api_key](ctx, request, self._who(ctx.connection))
        if hasattr(result, "__await__"):
            if ctx.api_key == ApiKey.PRODUCE and not self._decided(request):
                return result  # a peek: closed unstarted (asked again whole, counted then), nothing to wrap
            return self._count_later(ctx, result)
        if ctx.api_key != ApiKey.PRODUCE:
            self._count(ctx, before)
        elif self._decided(request):
            self._count(ctx, before)
        elif result is FORWARD:  # (a peek that does not forward is asked again whole: counted then)
            self._count(ctx, before, peek=True)
        return result

    async def _count_later(self, ctx: FilterContext, pending: Any) -> Any:
        """After an id lookup: other requests may have been refused meanwhile, so the result decides
        (only per-topic refusals follow a lookup: anything but FORWARD refused some topic)."""
        result = await pending
        self.report.counts[(ctx.connection.virtual_cluster, ctx.api_key, result is FORWARD)] += 1
        return result

    @staticmethod
    def _decided(request: Any) -> bool:
        """Whether this Produce is whole (not a peek, which carries no partition data and is asked again)."""
        return any(t.partition_data for t in request.topic_data)

    def unchecked(self, ctx: FilterContext, request: Any) -> Result:
        """A codec-known api key that is neither in the table nor exempt: refused (fail closed)."""
        return self._refuse_whole(ctx, request, CLUSTER_DENIED)

    # -- screens: the hot requests and answers decided from their bytes (on_request / on_response screen=) --
    def screen_metadata_request(self, ctx: FilterContext, body: memoryview) -> Result | None:
        """A Metadata request ``_metadata`` forwards unchanged, found from its bytes: every topic (null, or
        v0's empty list), or names this client may describe and, where it asks to create missing ones, may
        create; no ids, no ``*_authorized_operations`` asked (the answer's screen then needs no request)."""
        version = ctx.api_version
        conn = ctx.connection
        who = self._who(conn)
        seen_conn, seen_who, seen_version, seen = self._metadata_seen
        if conn is seen_conn and who is seen_who and version == seen_version and body == seen:
            self._count_screened(ctx)  # what this client asked last, let through then (a poll)
            return FORWARD
        ask = metadata_ask(body, version)
        if ask.include_topic_operations or ask.include_cluster_operations:
            return None
        topics = ask.topics
        if topics is None or (not topics and version == 0):
            if len(body) <= _SEEN_MAX:
                self._metadata_seen = (conn, who, version, bytes(body))
            self._count_screened(ctx)
            return FORWARD
        if not topics:
            return None  # v1+ asks for no topic: its answer is emptied by the hook, which needs the request
        allowed = self.rules.allowed
        create = ask.allow_auto_topic_creation and version >= 4
        for name, topic_id in topics:
            if name is None or topic_id.int or not allowed(who, Res.TOPIC, name, Op.DESCRIBE):
                return None
            if create and not self._may_create(who, name):
                return None
        if len(body) <= _SEEN_MAX:
            self._metadata_seen = (conn, who, version, bytes(body))
        self._count_screened(ctx)
        return FORWARD

    def screen_produce_request(self, ctx: FilterContext, body: memoryview) -> Result | None:
        """A Produce ``_produce`` forwards, found from its first bytes (kgate may hand over only its
        start): one topic named (v3-v12) that this client may write, and no transactional id or one it
        may write. None (the peek, then the hook, decide) for anything else, or a start too short."""
        version = ctx.api_version
        conn = ctx.connection
        who = self._who(conn)
        seen_conn, seen_who, seen_version, seen = self._produce_seen
        if conn is seen_conn and who is seen_who and version == seen_version and body[: len(seen)] == seen:
            self._count_screened(ctx)  # the start this client's last Produce had, let through then
            return FORWARD
        if version < 3 or version > 12:
            return None  # v13+ name topics by id: the peek resolves them
        head = produce_head(body, version)
        if head is None:
            return None
        txn, name, end = head
        allowed = self.rules.allowed
        if txn is not None and not allowed(who, Res.TRANSACTIONAL_ID, txn, Op.WRITE):
            return None
        if not allowed(who, Res.TOPIC, name, Op.WRITE):
            return None
        # what decided it: the transactional id and topic (acks and timeout too: the same bytes, compared at once)
        self._produce_seen = (conn, who, version, bytes(body[:end]))
        self._count_screened(ctx)
        return FORWARD

    def screen_metadata_response(self, ctx: FilterContext, body: memoryview) -> Result | None:
        """``described_topics`` for a Metadata answer, from its bytes (``screen_described_metadata``)."""
        return screen_described_metadata(ctx, body, self._describe(ctx), narrows=True)

    # -- whole-request checks --------------------------------------------------------------------
    def _refuse_whole(self, ctx: FilterContext, request: Any, code: int) -> Result:
        resp = error_response(ctx.api_key, ctx.api_version, request, code)
        if resp is None:
            name = api.API_INFO[ctx.api_key].name
            return close(f"authorizer: {name} refused (error {code}); the api has no error field")
        if hasattr(resp, "error_message"):
            resp.error_message = DENIED_MESSAGE
        return respond(resp)

    def _first_refusal(self, ctx: FilterContext, request: Any, who: Identity) -> int | None:
        """The error of the first whole-request check of this api that fails, else None."""
        for need in TABLE[ctx.api_key]:
            if need.scope != "request":
                continue
            if need.res is Res.CLUSTER:
                if ctx.api_key == ApiKey.FETCH:
                    continue  # only for follower fetches (see _fetch)
                name = CLUSTER_NAME
            else:
                value = getattr(request, need.field, None)
                if value is None:
                    continue  # e.g. Produce without a transactional id
                name = value
            if not self._ok(ctx, who, need.res, name, need.op):
                return need.error
        return None

    def _whole(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        code = self._first_refusal(ctx, request, who)
        if code is not None:
            return self._refuse_whole(ctx, request, code)
        if ctx.api_key == ApiKey.ELECT_LEADERS and request.topic_partitions:
            return self._topic_list(ctx, request, who)
        return FORWARD

    def _init_producer_id(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        if request.transactional_id is not None:
            if not self._ok(ctx, who, Res.TRANSACTIONAL_ID, request.transactional_id, Op.WRITE):
                return self._refuse_whole(ctx, request, TXN_DENIED)
            return FORWARD
        if self.rules.allowed(who, Res.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE) or self.rules.allowed_somewhere(
            who, Res.TOPIC, Op.WRITE
        ):
            return FORWARD
        self._ok(ctx, who, Res.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)  # logs and counts the refusal
        return self._refuse_whole(ctx, request, CLUSTER_DENIED)

    def _group_heartbeat(self, ctx: FilterContext, request: Any, who: Identity) -> Result | Awaitable[Result]:
        """ConsumerGroupHeartbeat / ShareGroupHeartbeat: read on the group, describe on each subscribed name;
        a member's repeated subscription refusal comes after a delay (``heartbeat_pacing``)."""
        if not self._ok(ctx, who, Res.GROUP, request.group_id, Op.READ):
            return self._refuse_whole(ctx, request, GROUP_DENIED)
        for topic in request.subscribed_topic_names or []:
            if not self._ok(ctx, who, Res.TOPIC, topic, Op.DESCRIBE):
                member = (ctx.connection.client_address, request.group_id, request.member_id or "")
                return self._pacer.pace(member, self._refuse_whole(ctx, request, TOPIC_DENIED))
        return FORWARD

    def _streams_heartbeat(self, ctx: FilterContext, request: Any, who: Identity) -> Any:
        """StreamsGroupHeartbeat, as Kafka's ``KafkaApis`` authorizes it: read on the group; with a topology
        (a member joining), describe on every topic it names, then create on the internal topics the broker
        would create for it (changelog, repartition source) that do not exist yet.

        Kafka checks create after its coordinator has said which internal topics are missing, and answers a
        refusal with the status MISSING_INTERNAL_TOPICS while the member stays in the group. kgate cannot keep
        the broker (which it reaches with its own identity) from creating them once the heartbeat is
        forwarded, so it asks the broker which of them exist (only for topics the client may not create) and
        refuses the heartbeat with TOPIC_AUTHORIZATION_FAILED when one is missing: nothing goes upstream.
        """
        if not self._ok(ctx, who, Res.GROUP, request.group_id, Op.READ):
            return self._refuse_whole(ctx, request, GROUP_DENIED)
        topology = request.topology
        if topology is None:
            return FORWARD
        named = dict.fromkeys(topology_topics(topology))
        denied = [n for n in named if not self._ok(ctx, who, Res.TOPIC, n, Op.DESCRIBE)]
        if denied:
            return self._refuse_streams(ctx, request, "Topics not authorized for describe: " + ", ".join(denied))
        uncreatable = [n for n in topology_internal_topics(topology) if not self._may_create(who, n)]
        if not uncreatable:
            return FORWARD
        return self._streams_after_lookup(ctx, request, who, uncreatable)

    async def _streams_after_lookup(self, ctx: FilterContext, request: Any, who: Identity, names: list[str]) -> Result:
        try:
            missing = await missing_topics(ctx, names)
        except Exception as exc:  # kgate's own request failed: nothing is known, nothing goes upstream
            conn = ctx.connection
            log.warning(
                "authorizer: StreamsGroupHeartbeat: checking internal topics failed: %s",
                exc,
                extra={
                    "cluster": conn.virtual_cluster,
                    "principal": conn.principal,
                    "client_id": conn.client_id,
                    "api": "StreamsGroupHeartbeat",
                    "resource": f"group:{request.group_id}",
                    "decision": "error",
                },
            )
            # retriable: the member asks again (a Streams client treats TOPIC_AUTHORIZATION_FAILED as fatal)
            result = self._refuse_whole(ctx, request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            result.message.error_message = "kgate could not check the internal topics; retry"  # type: ignore[attr-defined]
            return result
        if not missing:
            return FORWARD
        for name in missing:
            self._ok(ctx, who, Res.TOPIC, name, Op.CREATE)  # logs and counts the refusal
        return self._refuse_streams(ctx, request, "Unauthorized to CREATE on topics " + ", ".join(missing))

    def _refuse_streams(self, ctx: FilterContext, request: Any, message: str) -> Result:
        result = self._refuse_whole(ctx, request, TOPIC_DENIED)
        result.message.error_message = message  # type: ignore[attr-defined]
        return result

    # -- per-topic data RPCs (kgate.api.refuse_topics) ----------------------------------------------
    def _produce(self, ctx: FilterContext, request: Any, who: Identity) -> Any:
        txn = request.transactional_id
        if txn is not None and not self._ok(ctx, who, Res.TRANSACTIONAL_ID, txn, Op.WRITE, log=self._decided(request)):
            return self._refuse_whole(ctx, request, TXN_DENIED)
        topics = request.topic_data
        if len(topics) == 1:  # the common case, and every peek: one cache lookup
            t = topics[0]
            name = t.name if not t.topic_id.int else ctx.cached_topic_name(t.topic_id)
            if name is not None and self.rules.allowed(who, Res.TOPIC, name, Op.WRITE):
                return FORWARD
            if name is not None and not self._decided(request):
                return self._refuse_whole(ctx, request, TOPIC_DENIED)  # a peek: asked again whole, logged then
        return self._topic_list(ctx, request, who)

    def _fetch(self, ctx: FilterContext, request: Any, who: Identity) -> Any:
        replica = request.replica_id if ctx.api_version < 15 else request.replica_state.replica_id
        if (
            replica is not None
            and replica >= 0
            and not self._ok(ctx, who, Res.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION)
        ):
            return self._refuse_whole(ctx, request, CLUSTER_DENIED)
        return self._topic_list(ctx, request, who)

    def _topic_list(self, ctx: FilterContext, request: Any, who: Identity) -> Any:
        """Whole-request checks first, then each topic with the api's topic operation."""
        key = ctx.api_key
        if key != ApiKey.PRODUCE and key != ApiKey.FETCH and key != ApiKey.ELECT_LEADERS:
            code = self._first_refusal(ctx, request, who)
            if code is not None:
                return self._refuse_whole(ctx, request, code)
        op = TOPIC_OP[key]
        if self._all_allowed(ctx, request, who, op):
            return FORWARD
        names, missing = known_names(ctx, request_topics(key, request))
        if missing:
            return self._topic_list_after_lookup(ctx, request, who, op, names, missing)
        return refuse_topics(ctx, request, self._topic_codes(ctx, who, op, names, ()))

    def _all_allowed(self, ctx: FilterContext, request: Any, who: Identity, op: Op) -> bool:
        """The hot path: every topic named (or a known id) and allowed; no list or dict is built."""
        attr, name_attr, _resp = TOPIC_LISTS[ctx.api_key]
        entries = getattr(request, attr, None)
        if not entries or (ctx.api_key == ApiKey.DELETE_TOPICS and not getattr(request, "topics", None)):
            return False
        allowed = self.rules.allowed
        for t in entries:
            topic_id = getattr(t, "topic_id", None)
            if topic_id is not None and topic_id.int:
                name = ctx.cached_topic_name(topic_id)
                if name is None:
                    return False
            else:
                name = getattr(t, name_attr)
            if name is None or not allowed(who, Res.TOPIC, name, op):
                return False
        return True

    async def _topic_list_after_lookup(
        self, ctx: FilterContext, request: Any, who: Identity, op: Op, names: dict[TopicKey, str], missing: list[UUID]
    ) -> Result:
        unresolved = await look_up(ctx, names, missing)
        return refuse_topics(ctx, request, self._topic_codes(ctx, who, op, names, unresolved))

    def _topic_codes(
        self, ctx: FilterContext, who: Identity, op: Op, names: Mapping[TopicKey, str], unresolved: Iterable[UUID]
    ) -> dict[TopicKey, int]:
        # One rule for topics named by id, in every api (docs/authorization.md, "Topic ids"): an id kgate
        # can name and the client may not use answers TOPIC_AUTHORIZATION_FAILED, as Kafka's Metadata and
        # Fetch answer it ("topic IDs are not considered sensitive information"); one kgate cannot name
        # answers ``unresolved_error``, by default UNKNOWN_TOPIC_ID, as the broker answers an unknown id.
        codes: dict[TopicKey, int] = {}
        for key, name in names.items():
            if not self._ok(ctx, who, Res.TOPIC, name, op):
                codes[key] = TOPIC_DENIED
        for topic_id in unresolved:
            codes[topic_id] = self._unresolved_code
            # the audit log's "policy" field: refused because kgate could not name it (fail closed)
            record_policy_decision(
                ctx,
                self.report.filter_name,
                topic_id,
                self._unresolved_code,
                "topic id could not be resolved (fail closed)",
            )
        return codes

    # -- per-entry RPCs ------------------------------------------------------------------------------
    def _entry_list(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        code = self._first_refusal(ctx, request, who)
        if code is not None:
            return self._refuse_whole(ctx, request, code)
        spec = ENTRY_LISTS[ctx.api_key]
        res, op, error = spec.check
        return self._refuse_entries(ctx, request, spec, lambda e: None if self._ok(ctx, who, res, e, op) else error)

    def _refuse_entries(
        self, ctx: FilterContext, request: Any, spec: Entries, verdict: Callable[[Any], int | None]
    ) -> Result:
        """Refuse the entries ``verdict`` gives an error; forward the rest, merging errors into the answer."""
        entries = list(getattr(request, spec.request_list) or [])
        kept, refused = [], []
        for entry in entries:
            code = verdict(spec.name_of(entry))
            if code is None:
                kept.append(entry)
            else:
                refused.append(spec.error_entry(ctx, request, entry, code))
        if not refused:
            return FORWARD
        # another Authorizer earlier in the chain (topic-policy's, internal-topics') may have refused other
        # entries of this request: the state is the exchange's, so its entries are kept, never overwritten
        prior = ctx.state.pop(_STATE, None)
        if prior is not None:
            refused = list(prior[1]) + refused
        if not kept:  # the answer ends the chain: the earlier filter's hook will not merge its entries
            resp = api.API_INFO[ctx.api_key].response_class()
            setattr(resp, spec.response_list, refused)
            return respond(resp)
        setattr(request, spec.request_list, kept)
        ctx.state[_STATE] = (spec.response_list, refused)
        return forward(request)

    def _configs(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        op = Op.DESCRIBE_CONFIGS if ctx.api_key == ApiKey.DESCRIBE_CONFIGS else Op.ALTER_CONFIGS
        spec = ENTRY_LISTS[ctx.api_key]

        def verdict(entry: Any) -> int | None:
            res, error = CONFIG_RESOURCES.get(entry.resource_type, (Res.CLUSTER, CLUSTER_DENIED))
            name = entry.resource_name if res is not Res.CLUSTER else CLUSTER_NAME
            return None if self._ok(ctx, who, res, name, op) else error

        return self._refuse_entries(ctx, request, spec, verdict)

    def _may_create(self, who: Identity, name: str) -> bool:
        """Create on the topic, or on the cluster unless a rule denies creating this topic (deny wins)."""
        if self.rules.allowed(who, Res.TOPIC, name, Op.CREATE):
            return True
        return self.rules.allowed(who, Res.CLUSTER, CLUSTER_NAME, Op.CREATE) and not self.rules.denied(
            who, Res.TOPIC, name, Op.CREATE
        )

    def _create_topics(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        def verdict(name: str) -> int | None:
            if self._may_create(who, name):
                return None
            self._ok(ctx, who, Res.TOPIC, name, Op.CREATE)  # logs and counts the refusal
            return TOPIC_DENIED

        return self._refuse_entries(ctx, request, ENTRY_LISTS[ApiKey.CREATE_TOPICS], verdict)

    def _find_coordinator(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        res, error = (Res.TRANSACTIONAL_ID, TXN_DENIED) if request.key_type == 1 else (Res.GROUP, GROUP_DENIED)
        if ctx.api_version < 4:
            if self._ok(ctx, who, res, request.key, Op.DESCRIBE):
                return FORWARD
            resp = api.API_INFO[ApiKey.FIND_COORDINATOR].response_class(error_code=error)
            resp.node_id, resp.host, resp.port, resp.error_message = -1, "", -1, DENIED_MESSAGE
            return respond(resp)
        spec = ENTRY_LISTS[ApiKey.FIND_COORDINATOR]
        return self._refuse_entries(
            ctx, request, spec, lambda key: None if self._ok(ctx, who, res, key, Op.DESCRIBE) else error
        )

    def _offset_fetch(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        if ctx.api_version < 8:
            if self._ok(ctx, who, Res.GROUP, request.group_id, Op.DESCRIBE):
                return FORWARD
            return self._refuse_whole(ctx, request, GROUP_DENIED)
        spec = ENTRY_LISTS[ApiKey.OFFSET_FETCH]
        return self._refuse_entries(
            ctx, request, spec, lambda g: None if self._ok(ctx, who, Res.GROUP, g, Op.DESCRIBE) else GROUP_DENIED
        )

    def _add_partitions_to_txn(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        """v0-3 (clients): write on the transactional id, then on every topic; all or nothing, as in Kafka."""
        if ctx.api_version >= 4:
            if self._ok(ctx, who, Res.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION):
                return FORWARD
            return self._refuse_whole(ctx, request, CLUSTER_DENIED)
        topics = request.v3_and_below_topics or []
        if not self._ok(ctx, who, Res.TRANSACTIONAL_ID, request.v3_and_below_transactional_id, Op.WRITE):
            codes = {t.name: TXN_DENIED for t in topics}
        else:
            denied = {t.name for t in topics if not self._ok(ctx, who, Res.TOPIC, t.name, Op.WRITE)}
            if not denied:
                return FORWARD
            codes = {t.name: TOPIC_DENIED if t.name in denied else ErrorCode.OPERATION_NOT_ATTEMPTED for t in topics}
        resp_cls = api.API_INFO[ApiKey.ADD_PARTITIONS_TO_TXN].response_class
        tcls = element_class(resp_cls, "results_by_topic_v3_and_below")
        pcls = element_class(tcls, "results_by_partition")
        resp = resp_cls()
        resp.results_by_topic_v3_and_below = [
            tcls(
                name=t.name,
                results_by_partition=[
                    pcls(partition_index=p, partition_error_code=codes[t.name]) for p in t.partitions
                ],
            )
            for t in topics
        ]
        return respond(resp)

    def _metadata(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        """Names the client may not describe never reach the broker (it could auto-create them);
        auto-creation is turned off where the client may not create what it asks for."""
        topics = request.topics
        if not topics:
            return FORWARD
        if ctx.api_version < 12 and any(getattr(t, "topic_id", _ZERO).int for t in topics):
            return respond(error_response(ApiKey.METADATA, ctx.api_version, request, ErrorCode.INVALID_REQUEST))
        named = [t.name for t in topics if t.name is not None and not getattr(t, "topic_id", _ZERO).int]
        codes: dict[TopicKey, int] = {
            n: TOPIC_DENIED for n in named if not self._ok(ctx, who, Res.TOPIC, n, Op.DESCRIBE)
        }
        changed = False
        if getattr(request, "allow_auto_topic_creation", False) and ctx.api_version >= 4:
            if not all(self._may_create(who, n) for n in named if n not in codes):
                request.allow_auto_topic_creation = False
                changed = True
        if codes:
            return refuse_topics(ctx, request, codes, answer_when_empty=ctx.api_version == 0)
        return forward(request) if changed else FORWARD

    # -- responses -----------------------------------------------------------------------------------
    def merge(self, ctx: FilterContext, response: Any) -> Result:
        """The error entries a request hook kept back, appended to the broker's answer."""
        result = merge_refused(ctx, response)
        pending = ctx.state.pop(_STATE, None) if ctx.state else None  # merged once, by the first hook to run
        if pending is None:
            return result
        attr, entries = pending
        setattr(response, attr, list(getattr(response, attr) or []) + list(entries))
        return forward(response)

    def _describe(self, ctx: FilterContext) -> Callable[[str], bool]:
        """``allowed(topic name)`` for describe, for this client: asked once per topic in every answer
        that lists topics (a Metadata listing: each of them), so it is a closure over this identity's own
        verdict dict, one ``dict.get`` per topic, rather than the rule set's cache, which builds a 6-tuple
        key per call: a large listing pays it per topic (docs/performance.md, "Where a Metadata answer's
        time goes under the authorizer"; ``bench/authz_rules.py`` prints the hook beside the response
        decode)."""
        who = self._who(ctx.connection)
        found = self._describers.get(who)
        if found is not None:
            return found
        verdicts = self._describe_verdicts.get(who)
        if verdicts is None:
            verdicts = self._describe_verdicts[who] = {}
        get, rules = verdicts.get, self.rules

        def allowed(name: str) -> bool:
            verdict = get(name)
            if verdict is None:
                verdict = rules.allowed(who, Res.TOPIC, name, Op.DESCRIBE)
                if self._describe_size >= RuleSet.CACHE_MAX:  # all identities together: bounded as the rules' cache
                    self._describe_verdicts.clear()  # (this answer goes on filling its own dict, then drops it)
                    self._describers.clear()
                    self._describe_size = 0
                verdicts[name] = verdict
                self._describe_size += 1
            return verdict

        if len(self._describers) >= 10_000:  # bounded as _who's cache
            self._describers.clear()
        self._describers[who] = allowed
        return allowed

    def _describe_logged(self, ctx: FilterContext, who: Identity) -> Callable[[str], bool]:
        """``allowed(name)`` for describe that logs and counts a refusal (a name the client asked for)."""
        return lambda name: self._ok(ctx, who, Res.TOPIC, name, Op.DESCRIBE)

    def described_topics(self, ctx: FilterContext, response: Any) -> Result | Any:
        """Metadata / DescribeTopicPartitions: hide what the client may not describe (as topic-policy does),
        and show the operations kgate allows in the ``*_authorized_operations`` fields."""
        result = hide_undescribable(ctx, response, self._describe(ctx))
        if inspect.isawaitable(result):  # a DescribeTopicPartitions page filled from the broker's next pages
            return self._described_after_paging(ctx, response, result)
        if self._narrow_described_topics(ctx, response):
            return forward(response)
        return result

    async def _described_after_paging(self, ctx: FilterContext, response: Any, paging: Awaitable[Result]) -> Result:
        result = await paging
        self._narrow_described_topics(ctx, response)
        return result

    def _describe_partitions(self, ctx: FilterContext, request: Any, who: Identity) -> Result:
        """DescribeTopicPartitions is filtered in the answer; the rule is noted for the pages kgate asks for."""
        return note_describe_rule(ctx, request, self._describe_logged(ctx, who))

    # -- authorized_operations (filters.builtin.authz_operations) ----------------------------------
    def _bits(self, who: Identity, res: Res, name: str) -> int:
        allowed = self.rules.allowed
        return operations_bitfield(res, lambda op: allowed(who, res, name, op))

    def _narrow(self, holder: Any, attr: str, who: Identity, res: Res, name: str) -> bool:
        """Narrow ``holder.attr`` (a broker-computed bitfield) to kgate's operations; whether it changed."""
        value = getattr(holder, attr)
        if value == NOT_REQUESTED:
            return False
        new = narrowed(value, self._bits(who, res, name))
        if new == value:
            return False
        setattr(holder, attr, new)
        return True

    def _narrow_described_topics(self, ctx: FilterContext, response: Any) -> bool:
        request = ctx.request
        if ctx.api_key == ApiKey.METADATA:
            if ctx.api_version < 8:
                return False  # no such fields
            if request is None or not (
                request.include_topic_authorized_operations
                or getattr(request, "include_cluster_authorized_operations", False)
            ):
                # the metadata refreshes of every client: nothing asked, nothing to do (no request: its
                # screen let it through, which it does only when neither flag is set)
                return False
        who = self._who(ctx.connection)
        changed = False
        for t in response.topics:
            if t.error_code == ErrorCode.NONE and t.name is not None:
                changed |= self._narrow(t, "topic_authorized_operations", who, Res.TOPIC, t.name)
        if ctx.api_key == ApiKey.METADATA and ctx.api_version <= 10:
            changed |= self._narrow(response, "cluster_authorized_operations", who, Res.CLUSTER, CLUSTER_NAME)
        return changed

    def cluster_description(self, ctx: FilterContext, response: Any) -> Result:
        """DescribeCluster: the cluster's operations as kgate's rules allow them (the api needs no check)."""
        who = self._who(ctx.connection)
        if self._narrow(response, "cluster_authorized_operations", who, Res.CLUSTER, CLUSTER_NAME):
            return forward(response)
        return FORWARD

    def created_topics(self, ctx: FilterContext, response: Any) -> Result:
        """CreateTopics: no existence oracle, no configs without describe_configs; then merge refusals."""
        who = self._who(ctx.connection)
        changed = False
        for t in response.topics:
            if not self.rules.allowed(who, Res.TOPIC, t.name, Op.DESCRIBE):
                if t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                    t.error_code, t.error_message, changed = TOPIC_DENIED, DENIED_MESSAGE, True
            if t.configs and not self.rules.allowed(who, Res.TOPIC, t.name, Op.DESCRIBE_CONFIGS):
                t.configs, t.topic_config_error_code, changed = [], TOPIC_DENIED, True
        merged = self.merge(ctx, response)
        return forward(response) if changed or merged is not FORWARD else FORWARD

    def offset_fetch_response(self, ctx: FilterContext, response: Any) -> Any:
        """Committed offsets of topics the client may not describe are hidden; ids resolved first."""
        self.merge(ctx, response)  # groups refused up front come back as error entries
        keys = offset_fetch_topic_keys(response, ctx.api_version)
        names, missing = known_names(ctx, keys)
        if missing:
            return self._offset_fetch_after_lookup(ctx, response, names, missing)
        return self._hide_offsets(ctx, response, names, ())

    async def _offset_fetch_after_lookup(
        self, ctx: FilterContext, response: Any, names: dict[TopicKey, str], missing: list[UUID]
    ) -> Result:
        unresolved = await look_up(ctx, names, missing)
        return self._hide_offsets(ctx, response, names, unresolved)

    def _hide_offsets(
        self, ctx: FilterContext, response: Any, names: Mapping[TopicKey, str], unresolved: Iterable[UUID]
    ) -> Result:
        allowed = self._describe(ctx)
        codes: dict[str | UUID, int] = {k: TOPIC_DENIED for k, n in names.items() if not allowed(n)}
        codes.update({u: self._unresolved_code for u in unresolved})
        hide_offsets(ctx.request, response, ctx.api_version, codes)
        return forward(response)

    def transactions(self, ctx: FilterContext, response: Any) -> Result:
        merged = self.merge(ctx, response)
        changed = hide_transaction_topics(response, self._describe(ctx))
        return forward(response) if changed or merged is not FORWARD else FORWARD

    def group_descriptions(self, ctx: FilterContext, response: Any) -> Result:
        merged = self.merge(ctx, response)
        allowed = self._describe(ctx)
        if ctx.api_key == ApiKey.DESCRIBE_GROUPS:
            changed = refuse_classic_groups_with_denied_assignments(response, allowed)
        elif ctx.api_key == ApiKey.STREAMS_GROUP_DESCRIBE:
            changed = refuse_streams_groups_with_denied_topics(response, allowed)
        else:
            changed = refuse_groups_with_denied_assignments(response, allowed)
        if ctx.api_key != ApiKey.DESCRIBE_GROUPS or ctx.api_version >= 3:
            who = self._who(ctx.connection)
            for g in response.groups:
                if g.error_code == ErrorCode.NONE:
                    changed |= self._narrow(g, "authorized_operations", who, Res.GROUP, g.group_id)
        return forward(response) if changed or merged is not FORWARD else FORWARD

    def share_group_offsets(self, ctx: FilterContext, response: Any) -> Result:
        """DescribeShareGroupOffsets: groups refused up front merged back; topics the client may not
        describe left out of a whole-group listing, or answered TOPIC_AUTHORIZATION_FAILED where asked for."""
        merged = self.merge(ctx, response)
        changed = hide_share_group_offsets(ctx.request, response, self._describe(ctx))
        return forward(response) if changed or merged is not FORWARD else FORWARD

    def heartbeat_answer(self, ctx: FilterContext, response: Any) -> Any:
        """Consumer/ShareGroupHeartbeat: assigned topics the member may not describe are left out.

        A KIP-848 regex subscription is resolved by the broker over every topic, so its assignment may
        name topics kgate's rules hide from this member (Kafka's own authorizer leaves those out of the
        regex's resolution). Ids are named first (an id kgate cannot name is left out: fail closed).
        """
        ids = assigned_topic_ids(response)
        if not ids:
            return FORWARD
        names, missing = known_names(ctx, ids)
        if missing:
            return self._heartbeat_after_lookup(ctx, response, names, missing)
        return self._strip_assignment(ctx, response, names)

    async def _heartbeat_after_lookup(
        self, ctx: FilterContext, response: Any, names: dict[TopicKey, str], missing: list[UUID]
    ) -> Result:
        await look_up(ctx, names, missing)
        return self._strip_assignment(ctx, response, names)

    def _strip_assignment(self, ctx: FilterContext, response: Any, names: Mapping[TopicKey, str]) -> Result:
        who = self._who(ctx.connection)

        def keep(topic_id: UUID) -> bool:
            name = names.get(topic_id)
            return name is not None and self._ok(ctx, who, Res.TOPIC, name, Op.DESCRIBE)

        return forward(response) if strip_assignment(response, keep) else FORWARD

    def log_dirs(self, ctx: FilterContext, response: Any) -> Result:
        return forward(response) if hide_log_dir_topics(response, self._describe(ctx)) else FORWARD

    def list_groups(self, ctx: FilterContext, response: Any) -> Result:
        """ListGroups: every group with describe on the cluster (as Kafka), else those the client may describe."""
        who = self._who(ctx.connection)
        if self.rules.allowed(who, Res.CLUSTER, CLUSTER_NAME, Op.DESCRIBE):
            return FORWARD
        kept = [g for g in response.groups if self.rules.allowed(who, Res.GROUP, g.group_id, Op.DESCRIBE)]
        if len(kept) == len(response.groups):
            return FORWARD
        response.groups = kept
        return forward(response)

    def list_transactions(self, ctx: FilterContext, response: Any) -> Result:
        who = self._who(ctx.connection)
        states = response.transaction_states
        kept = [s for s in states if self.rules.allowed(who, Res.TRANSACTIONAL_ID, s.transactional_id, Op.DESCRIBE)]
        if len(kept) == len(states):
            return FORWARD
        response.transaction_states = kept
        return forward(response)

    # -- hook registration ---------------------------------------------------------------------
    for _key in sorted(api.API_INFO):
        if _key in UNCHECKED:
            continue
        if _key in TABLE:
            check = on_request(_key, peek=_key == ApiKey.PRODUCE, screen=_SCREENS.get(_key, ""))(check)
        else:  # pragma: no cover - the table is total (tests/filters/test_acl_table.py)
            unchecked = on_request(_key)(unchecked)
    described_topics = on_response(ApiKey.METADATA, screen="screen_metadata_response")(described_topics)
    described_topics = on_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS)(described_topics)
    created_topics = on_response(ApiKey.CREATE_TOPICS)(created_topics)
    offset_fetch_response = on_response(ApiKey.OFFSET_FETCH)(offset_fetch_response)
    transactions = on_response(ApiKey.DESCRIBE_TRANSACTIONS)(transactions)
    for _key in (
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        ApiKey.SHARE_GROUP_DESCRIBE,
        ApiKey.STREAMS_GROUP_DESCRIBE,
    ):
        group_descriptions = on_response(_key)(group_descriptions)
    share_group_offsets = on_response(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)(share_group_offsets)
    log_dirs = on_response(ApiKey.DESCRIBE_LOG_DIRS)(log_dirs)
    for _key in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT):
        heartbeat_answer = on_response(_key)(heartbeat_answer)
    cluster_description = on_response(ApiKey.DESCRIBE_CLUSTER)(cluster_description)
    list_groups = on_response(ApiKey.LIST_GROUPS)(list_groups)
    list_transactions = on_response(ApiKey.LIST_TRANSACTIONS)(list_transactions)
    for _key in (
        *PER_TOPIC_KEYS,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.DELETE_GROUPS,
        ApiKey.FIND_COORDINATOR,
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
    ):
        merge = on_response(_key, needs_state=True)(merge)
    del _key
