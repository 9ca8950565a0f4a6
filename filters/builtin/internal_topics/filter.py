"""``internal-topics``: client-defined internal topics (KIP-619) at the proxy, fleet-wide.

Two kinds of internal topic (filters.builtin.internal_policy has the table of what each RPC may
do to each):

- **system-defined**: the broker's own (``system_topics``, default ``__consumer_offsets`` and
  ``__transaction_state``; a topic the broker answers with ``is_internal=true`` counts too).
  Produce, DeleteRecords and DeleteTopics are refused.
- **user-defined**: created or altered with the topic config ``internal=true`` (CreateTopics,
  IncrementalAlterConfigs, AlterConfigs), or matching ``user_topics``. Listed as internal, so an
  admin client's default listing leaves them out; everything else is allowed.

kgate takes ``internal`` out of every request before forwarding it (Apache Kafka refuses the
unknown config; Tansu would keep it, but one store for both keeps a fleet consistent) and
records the mark, keyed by topic id, in a compacted topic on the cluster that every instance
polls (filters.builtin.topic_marks; design in docs/internal-topics.md). DescribeConfigs through
kgate shows ``internal`` for every topic.

Config (every key optional)::

    - name: internal-topics
      config:
        system_topics: ["__consumer_offsets", "__transaction_state"]   # shell-style patterns
        user_topics: ["connect-*"]             # always user-defined internal, no mark needed
        marks_topic: __kgate_internal_topics   # where marks live (hidden from clients)
        poll_interval_ms: 1000                 # how often other instances' marks are read
        write_timeout_ms: 5000                 # retrying a mark write before answering an error
        ready_timeout_ms: 5000                 # how long a listing waits for the first read of marks
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any
from uuid import UUID

from kgate.api import (
    FORWARD,
    ApiKey,
    ClusterServices,
    ErrorCode,
    Filter,
    FilterConfigError,
    FilterContext,
    Respond,
    Result,
    TopicKey,
    TopicNameError,
    forward,
    merge_refused,
    on_request,
    on_response,
    refuse_topics,
    request_topics,
)
from kgate.filters.builtin.authz.visibility import hide_described_topics, hide_undescribable, note_describe_rule
from kgate.filters.builtin.internal_topics.answers import (
    AUTHZ_MESSAGE,
    TOPIC_RESOURCE,
    described_internal,
)
from kgate.filters.builtin.internal_topics.config_changes import ConfigChangeHooks
from kgate.filters.builtin.internal_topics.groups import GroupHooks
from kgate.filters.builtin.internal_topics.marks import DEFAULT_TOPIC, MarksStore, MarkWriteError
from kgate.filters.builtin.internal_topics.policy import (
    DEFAULT_SYSTEM_TOPICS,
    INTERNAL_CONFIG,
    Classifier,
    Kind,
    is_internal,
    refusal,
    refusal_message,
)

log = logging.getLogger("kgate.filters.internal_topics")

_ZERO = UUID(int=0)
_STATE = "internal-topics"
_MS_KEYS = {
    "poll_interval_ms": (1000, 50, 60_000),
    "write_timeout_ms": (5000, 100, 120_000),
    "ready_timeout_ms": (5000, 0, 120_000),
}


def _pattern_list(config: Mapping[str, Any], key: str, default: Iterable[str]) -> list[str]:
    value = config.get(key, list(default))
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FilterConfigError(f"{key}: expected a list of topic name patterns, got {value!r}")
    return value


class InternalTopics(ConfigChangeHooks, GroupHooks, Filter):
    name = "internal-topics"

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        allowed = {"system_topics", "user_topics", "marks_topic", *_MS_KEYS}
        unknown = set(config) - allowed
        if unknown:
            raise FilterConfigError(f"unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(allowed))})")
        out: dict[str, Any] = {
            "system_topics": _pattern_list(config, "system_topics", DEFAULT_SYSTEM_TOPICS),
            "user_topics": _pattern_list(config, "user_topics", ()),
        }
        marks = config.get("marks_topic", DEFAULT_TOPIC)
        if not isinstance(marks, str) or not marks or len(marks) > 249 or any(c in marks for c in "*?[]/ "):
            raise FilterConfigError(f"marks_topic: expected a topic name, got {marks!r}")
        out["marks_topic"] = marks
        for key, (default, lo, hi) in _MS_KEYS.items():
            value = config.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise FilterConfigError(f"{key}: expected an integer from {lo} to {hi} (milliseconds), got {value!r}")
            out[key] = value
        return out

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.classifier = Classifier(config["system_topics"], config["user_topics"], config["marks_topic"])
        self.marks_topic: str = config["marks_topic"]
        self.store = MarksStore(
            self.marks_topic,
            poll_interval_s=config["poll_interval_ms"] / 1000,
            write_timeout_s=config["write_timeout_ms"] / 1000,
        )
        self._ready_timeout_s = config["ready_timeout_ms"] / 1000
        self.broker_internal: set[str] = set()  # names the broker answered with is_internal=true
        self.current_ids: dict[str, UUID] = {}  # name -> its current id, from answers passing by
        self._system: dict[str, bool] = {}  # name -> system-defined (the Produce fast path)
        self._services: ClusterServices | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._waited_out = False  # the first read of the marks took longer than ready_timeout_ms

    def start(self, services: ClusterServices) -> None:
        self._services = services
        self.store.instance = f"kgate/{services.virtual_cluster}"
        self.store.start(services)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.store.close()

    # -- classification ---------------------------------------------------------------------
    def kind(self, name: str, topic_id: UUID | None = None) -> Kind | None:
        table = self.store.table
        if topic_id is not None and topic_id.int:
            marked = table.marked_id(topic_id)
        else:
            marked = table.marked_name(name, self.current_ids.get(name))
        return self.classifier.kind(name, broker_internal=self.broker_internal, marked=marked)

    def _refused_name(self, api_key: int, name: str) -> int | None:
        """Refusal for a name on a data RPC; the answer depends on config and broker only (cached)."""
        if name == self.marks_topic:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        system = self._system.get(name)
        if system is None:
            system = self.classifier.kind(name, broker_internal=self.broker_internal) is Kind.SYSTEM
            if len(self._system) < 100_000:
                self._system[name] = system
        return refusal(api_key, Kind.SYSTEM) if system else None

    def _learn(self, topics: Iterable[Any]) -> None:
        """Broker-internal names and current ids from a Metadata / DescribeTopicPartitions answer."""
        for t in topics:
            name = t.name
            if not name or t.error_code not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE):
                continue  # (a new topic is answered LEADER_NOT_AVAILABLE for a moment, id already set)
            tid = getattr(t, "topic_id", _ZERO)
            if tid.int:
                self.current_ids[name] = tid
            if t.error_code == ErrorCode.NONE and t.is_internal and name not in self.broker_internal:
                self.broker_internal.add(name)
                self._system.pop(name, None)

    # -- Produce, DeleteRecords, DeleteTopics, Fetch: per-topic refusals ----------------------
    @on_request(ApiKey.PRODUCE, peek=True)
    @on_request(ApiKey.DELETE_RECORDS)
    @on_request(ApiKey.DELETE_TOPICS)
    @on_request(ApiKey.FETCH)
    # the other RPCs that name a topic's partitions: only kgate's marks topic is refused there, so
    # that neither its offsets nor its existence reach a client
    @on_request(ApiKey.LIST_OFFSETS)
    @on_request(ApiKey.OFFSET_COMMIT)
    @on_request(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    @on_request(ApiKey.TXN_OFFSET_COMMIT)
    @on_request(ApiKey.OFFSET_DELETE)
    @on_request(ApiKey.DESCRIBE_PRODUCERS)
    def check(self, ctx: FilterContext, request: Any) -> Result | Any:
        """Decides from names synchronously (the Produce fast path); unknown ids suspend only this request."""
        api_key = ctx.api_key
        if api_key == ApiKey.FETCH:
            return self._check_fetch(ctx, request)
        if api_key == ApiKey.PRODUCE and len(request.topic_data) == 1:
            # One topic (every peeked Produce): the loop below without its lists and dicts, cheaper
            # on every request (docs/performance.md, "Figures moved out of code comments"); anything
            # but a known, unrefused name takes the loop.
            topic = request.topic_data[0]
            tid = getattr(topic, "topic_id", None)
            name = ctx.cached_topic_name(tid) if tid is not None and tid.int else topic.name
            if name is not None and self._refused_name(api_key, name) is None:
                return FORWARD
        codes: dict[TopicKey, int] = {}
        missing: list[UUID] = []
        names: dict[TopicKey, str] = {}
        for key in request_topics(api_key, request):
            if isinstance(key, UUID):
                name = ctx.cached_topic_name(key)
                if name is None:
                    missing.append(key)
                    continue
            else:
                name = key
            names[key] = name
            code = self._refused_name(api_key, name)
            if code is not None:
                codes[key] = code
        if missing:
            return self._check_after_lookup(ctx, request, codes, names, missing)
        if not codes:
            return FORWARD
        return self._refuse(ctx, request, codes, names)

    async def _check_after_lookup(
        self,
        ctx: FilterContext,
        request: Any,
        codes: dict[TopicKey, int],
        names: dict[TopicKey, str],
        missing: list[UUID],
    ) -> Result:
        for topic_id, found in (await ctx.topic_names(missing)).items():
            if isinstance(found, TopicNameError):
                # Fail closed: an id kgate cannot name may be an internal topic's. The broker answers
                # an unknown id the same way, so a client sees nothing new for a deleted topic.
                codes[topic_id] = ErrorCode.UNKNOWN_TOPIC_ID
                continue
            names[topic_id] = found
            code = self._refused_name(ctx.api_key, found)
            if code is not None:
                codes[topic_id] = code
        return self._refuse(ctx, request, codes, names) if codes else FORWARD

    def _refuse(
        self, ctx: FilterContext, request: Any, codes: dict[TopicKey, int], names: dict[TopicKey, str]
    ) -> Result:
        messages: dict[TopicKey, str] = {}
        for key in codes:
            name = names.get(key, "")
            msg = refusal_message(ctx.api_key, self.classifier.kind(name, broker_internal=self.broker_internal), name)
            if msg is not None:
                messages[key] = msg
        result = refuse_topics(ctx, request, codes)
        if ctx.api_key == ApiKey.DELETE_TOPICS:
            if isinstance(result, Respond):
                self._fill_messages(result.message, messages)
            else:
                ctx.state[_STATE + ".messages"] = messages
        return result

    @staticmethod
    def _fill_messages(response: Any, messages: Mapping[TopicKey, str]) -> None:
        """DeleteTopics v5+ carries a message per topic: say why kgate refused it."""
        if response is None or not messages:
            return
        for entry in response.responses:
            tid = getattr(entry, "topic_id", _ZERO)
            msg = messages.get(tid) if tid.int else None
            if msg is None:
                msg = messages.get(entry.name)
            if msg is not None and entry.error_message is None:
                entry.error_message = msg

    def _check_fetch(self, ctx: FilterContext, request: Any) -> Result:
        """Only kgate's own marks topic is refused; no lookup (an unknown id cannot be it: kgate knows its id)."""
        own_id = self.store.topic_id
        codes: dict[TopicKey, int] = {}
        for t in request.topics:
            tid = t.topic_id
            if tid.int:
                if tid == own_id:
                    codes[tid] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif t.topic == self.marks_topic:
                codes[t.topic] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return refuse_topics(ctx, request, codes) if codes else FORWARD

    @on_response(ApiKey.PRODUCE, needs_state=True)
    @on_response(ApiKey.DELETE_RECORDS, needs_state=True)
    @on_response(ApiKey.FETCH, needs_state=True)
    @on_response(ApiKey.LIST_OFFSETS, needs_state=True)
    @on_response(ApiKey.OFFSET_COMMIT, needs_state=True)
    @on_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, needs_state=True)
    @on_response(ApiKey.TXN_OFFSET_COMMIT, needs_state=True)
    @on_response(ApiKey.OFFSET_DELETE, needs_state=True)
    @on_response(ApiKey.DESCRIBE_PRODUCERS, needs_state=True)
    def merge(self, ctx: FilterContext, response: Any) -> Result:
        return merge_refused(ctx, response)

    @on_response(ApiKey.DELETE_TOPICS)
    def deleted(self, ctx: FilterContext, response: Any) -> Result:
        """Merge refusals (with their messages); a deleted topic's mark is removed in the background."""
        state = ctx.state
        result = merge_refused(ctx, response)
        self._fill_messages(response, state.get(_STATE + ".messages") or {})
        gone: list[tuple[UUID, str | None]] = []
        for entry in response.responses:
            if entry.error_code:
                continue
            tid = getattr(entry, "topic_id", _ZERO)
            ids = {tid} if tid.int else self.store.table.ids_of(entry.name or "")
            if entry.name:
                self.current_ids.pop(entry.name, None)
            gone.extend((i, None) for i in ids if self.store.table.marked_id(i))
        if gone:
            self._background(self.store.write(gone), "removing the marks of deleted topics")
        return result

    def _background(self, coro: Any, what: str) -> None:
        async def run() -> None:
            try:
                await coro
            except (MarkWriteError, ConnectionError) as exc:
                log.warning("internal-topics: %s failed: %s", what, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- DescribeConfigs: internal shown for every topic --------------------------------------
    def keep_request(self, ctx: FilterContext, request: Any) -> Result:
        """Nothing to refuse up front; declaring it makes kgate decode the request for the response hook
        (and DescribeTopicPartitions notes the rule for the pages kgate may ask for: ``fill_pages``)."""
        if ctx.api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
            return note_describe_rule(ctx, request, self._not_marks)
        return FORWARD

    def _not_marks(self, name: str) -> bool:
        return name != self.marks_topic

    @on_response(ApiKey.DESCRIBE_CONFIGS)
    def describe_configs(self, ctx: FilterContext, response: Any) -> Result | Any:
        if not any(r.resource_type == TOPIC_RESOURCE for r in response.results):
            return FORWARD
        if self._must_wait():
            return self._describe_configs_when_ready(ctx, response)
        return self._describe_configs(ctx, response)

    async def _describe_configs_when_ready(self, ctx: FilterContext, response: Any) -> Result:
        await self._wait_ready()
        return self._describe_configs(ctx, response)

    def _must_wait(self) -> bool:
        """Whether an answer that depends on marks must wait for this instance's first read of them."""
        return not self._waited_out and not self.store.ready.is_set()

    async def _wait_ready(self) -> None:
        """Wait for the first read of the marks, once at most ``ready_timeout_ms`` per process.

        If the marks topic cannot be read (broker down, no permission to create it), answers go on
        with what is known after the first timeout, rather than every one of them waiting for it.
        """
        if not await self.store.wait_ready(self._ready_timeout_s) and not self._waited_out:
            self._waited_out = True
            log.warning(
                "internal-topics: marks not loaded within %.1fs; answering with what is known until they are",
                self._ready_timeout_s,
            )

    def _describe_configs(self, ctx: FilterContext, response: Any) -> Result:
        request = ctx.request
        asked: dict[str, Any] = {}
        if request is not None:
            asked = {
                r.resource_name: r.configuration_keys for r in request.resources if r.resource_type == TOPIC_RESOURCE
            }
        for r in response.results:
            if r.resource_type != TOPIC_RESOURCE:
                continue
            if r.resource_name == self.marks_topic:
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                r.error_message = AUTHZ_MESSAGE
                r.configs = []
                continue
            keys = asked.get(r.resource_name)
            if r.error_code or (keys is not None and INTERNAL_CONFIG not in keys):
                continue
            kind = self.kind(r.resource_name)
            entry = described_internal(is_internal(kind), marked=kind is Kind.USER)
            r.configs = [c for c in r.configs if c.name != INTERNAL_CONFIG] + [entry]
        return forward(response)

    # -- Metadata, DescribeTopicPartitions: is_internal, and the marks topic hidden ------------
    @on_response(ApiKey.METADATA)
    @on_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
    def described_topics(self, ctx: FilterContext, response: Any) -> Result | Any:
        if not response.topics:
            return FORWARD
        if self._must_wait():
            return self._described_when_ready(ctx, response)
        return self._described(ctx, response)

    async def _described_when_ready(self, ctx: FilterContext, response: Any) -> Result:
        await self._wait_ready()
        return self._described(ctx, response)

    def _described(self, ctx: FilterContext, response: Any) -> Result | Any:
        self._learn(response.topics)
        changed = False
        if ctx.api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
            # pages over the topics shown only: the cursor never names the marks topic (fill_pages)
            hidden = hide_undescribable(ctx, response, self._not_marks)
            if inspect.isawaitable(hidden):
                return self._mark_internal_after_paging(response, hidden)
            changed = hidden is not FORWARD
        elif any(t.name == self.marks_topic for t in response.topics):
            request = ctx.request
            if ctx.api_key == ApiKey.METADATA:
                asked_all = request is None or request.topics is None or (ctx.api_version == 0 and not request.topics)
                asked_ids = (
                    frozenset(t.topic_id for t in (request.topics or ()) if getattr(t, "topic_id", _ZERO).int)
                    if request is not None
                    else frozenset()
                )
            else:
                asked_all, asked_ids = request is None or not request.topics, frozenset()
            kept = hide_described_topics(response.topics, lambda n: n != self.marks_topic, asked_all, asked_ids)
            if kept is not None:
                response.topics, changed = kept, True
        if ctx.api_key == ApiKey.METADATA and ctx.api_version < 1:
            return forward(response) if changed else FORWARD  # v0 has no is_internal
        changed |= self._mark_internal(response)
        return forward(response) if changed else FORWARD

    async def _mark_internal_after_paging(self, response: Any, paging: Awaitable[Result]) -> Result:
        result = await paging
        self._learn(response.topics)
        self._mark_internal(response)
        return result

    def _mark_internal(self, response: Any) -> bool:
        """``is_internal`` set on the topics kgate counts as internal; whether any changed."""
        changed = False
        for t in response.topics:
            if t.error_code or not t.name or t.is_internal:
                continue
            if is_internal(self.kind(t.name, getattr(t, "topic_id", None))):
                t.is_internal = True
                changed = True
        return changed

    # -- the marks topic in every other RPC that names a topic (the authorizer's handlers, with a rule set
    # that denies the marks topic alone: GroupHooks._guard) --------------------------------------------
    def guard(self, ctx: FilterContext, request: Any) -> Result | Any:
        """CreatePartitions, ElectLeaders, AddPartitionsToTxn, DescribeConfigs naming the marks topic: refused
        (29) for it, the rest of the request goes on."""
        return self._guard().check(ctx, request)

    def guard_merge(self, ctx: FilterContext, response: Any) -> Result:
        return self._guard().merge(ctx, response)

    @on_response(ApiKey.DESCRIBE_LOG_DIRS)
    def log_dirs(self, ctx: FilterContext, response: Any) -> Result:
        """The marks topic is left out of every log dir's listing."""
        return self._guard().log_dirs(ctx, response)

    @on_response(ApiKey.DESCRIBE_TRANSACTIONS)
    def transactions(self, ctx: FilterContext, response: Any) -> Result:
        """The marks topic is left out of the partitions a transaction lists."""
        return self._guard().transactions(ctx, response)

    for _key in (ApiKey.CREATE_PARTITIONS, ApiKey.ELECT_LEADERS, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.DESCRIBE_CONFIGS):
        guard = on_request(_key)(guard)
        guard_merge = on_response(_key, needs_state=True)(guard_merge)
    for _key in (ApiKey.METADATA, ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.DESCRIBE_CONFIGS):
        keep_request = on_request(_key)(keep_request)
    del _key
