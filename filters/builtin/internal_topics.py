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
import logging
from collections.abc import Iterable, Mapping
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
    respond,
)
from kgate.codec.generated.alter_configs import AlterConfigsResourceResponse, AlterConfigsResponse
from kgate.codec.generated.create_topics import CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse
from kgate.codec.generated.describe_configs import DescribeConfigsResourceResult
from kgate.codec.generated.incremental_alter_configs import (
    AlterConfigsResourceResponse as IncrementalAlterConfigsResourceResponse,
)
from kgate.codec.generated.incremental_alter_configs import IncrementalAlterConfigsResponse
from kgate.codec.generated.metadata import MetadataRequest, MetadataRequestTopic
from kgate.filters.builtin.internal_policy import (
    DEFAULT_SYSTEM_TOPICS,
    INTERNAL_CONFIG,
    Classifier,
    Kind,
    is_internal,
    parse_internal,
    refusal,
    refusal_message,
)
from kgate.filters.builtin.topic_marks import DEFAULT_TOPIC, MarksStore, MarkWriteError
from kgate.filters.builtin.topic_visibility import hide_described_topics

log = logging.getLogger("kgate.filters.internal_topics")

_ZERO = UUID(int=0)
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
_DYNAMIC_TOPIC_CONFIG, _DEFAULT_CONFIG = 1, 5  # DescribeConfigs config_source
_BOOLEAN = 1  # DescribeConfigs config_type
_OP_SET, _OP_DELETE = 0, 1  # IncrementalAlterConfigs config_operation
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


def _bad_value(value: str | None) -> str:
    return f"Invalid value {value} for configuration internal: Expected value to be either true or false"


def _lost_mark(name: str, exc: Exception) -> str:
    return (
        f"Topic {name} was changed, but kgate could not record internal=true for it ({exc}); "
        "set it again with IncrementalAlterConfigs internal=true"
    )


class InternalTopics(Filter):
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
    def check(self, ctx: FilterContext, request: Any) -> Result | Any:
        """Decides from names synchronously (the Produce fast path); unknown ids suspend only this request."""
        api_key = ctx.api_key
        if api_key == ApiKey.FETCH:
            return self._check_fetch(ctx, request)
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

    # -- CreateTopics: strip internal, record the mark once the broker created the topic -----
    @on_request(ApiKey.CREATE_TOPICS)
    def create_topics(self, ctx: FilterContext, request: Any) -> Result:
        errors: dict[str, tuple[int, str]] = {}
        to_mark: list[str] = []
        changed = False
        for t in request.topics:
            if t.name == self.marks_topic:
                errors[t.name] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
                continue
            ours = [c for c in t.configs if c.name == INTERNAL_CONFIG]
            if not ours:
                continue
            value = parse_internal(ours[-1].value)
            if value is None:
                errors[t.name] = (
                    ErrorCode.INVALID_CONFIG,
                    _bad_value(ours[-1].value),
                )
                continue
            t.configs = [c for c in t.configs if c.name != INTERNAL_CONFIG]
            changed = True
            if value:
                to_mark.append(t.name)
        if not errors and not changed:
            return FORWARD
        if not request.validate_only and to_mark:
            ctx.state[_STATE + ".mark"] = to_mark
        if errors:
            ctx.state[_STATE + ".errors"] = errors
            kept = [t for t in request.topics if t.name not in errors]
            if not kept:
                return respond(self._create_errors(errors))
            request.topics = kept
        return forward(request)

    @staticmethod
    def _create_errors(errors: Mapping[str, tuple[int, str]]) -> Any:
        return CreateTopicsResponse(
            throttle_time_ms=0,
            topics=[
                CreatableTopicResult(name=name, topic_id=_ZERO, error_code=code, error_message=msg, configs=None)
                for name, (code, msg) in errors.items()
            ],
        )

    @on_response(ApiKey.CREATE_TOPICS, needs_state=True)
    def created(self, ctx: FilterContext, response: Any) -> Result | Any:
        state = ctx.state
        errors = state.get(_STATE + ".errors")
        if errors:
            response.topics = list(response.topics) + list(self._create_errors(errors).topics)
        to_mark = set(state.get(_STATE + ".mark") or ())
        made = [t for t in response.topics if t.name in to_mark and t.error_code == ErrorCode.NONE]
        if not made:
            return forward(response)
        return self._mark_created(response, made)

    async def _mark_created(self, response: Any, made: list[Any]) -> Result:
        ids = {t.name: t.topic_id for t in made if getattr(t, "topic_id", _ZERO).int}
        missing = [t.name for t in made if t.name not in ids]
        if missing:  # CreateTopics below v7 carries no id: ask the broker
            ids.update(await self._ids_by_name(missing))
        try:
            await self.store.write([(ids[t.name], t.name) for t in made if t.name in ids])
            failed = [t for t in made if t.name not in ids]
            reason: Exception = MarkWriteError("its topic id could not be looked up")
        except MarkWriteError as exc:
            failed, reason = made, exc
        for t in made:
            if t.name in ids:
                self.current_ids[t.name] = ids[t.name]
            if t in failed:
                # The broker created the topic; kgate could not record the mark. Saying so is better
                # than a success that silently leaves the topic listed (see docs/internal-topics.md).
                t.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                t.error_message = _lost_mark(t.name, reason)
                log.error("internal-topics: %s", t.error_message)
            elif t.configs is not None:
                t.configs = [c for c in t.configs if c.name != INTERNAL_CONFIG] + [
                    CreatableTopicConfigs(
                        name=INTERNAL_CONFIG, value="true", read_only=False,
                        config_source=_DYNAMIC_TOPIC_CONFIG, is_sensitive=False,
                    )
                ]
        return forward(response)

    async def _ids_by_name(self, names: list[str]) -> dict[str, UUID]:
        """Topic ids by name from the broker (Metadata), retried until ``write_timeout_ms``.

        Right after a CreateTopics (below v7, which carries no id) the broker's metadata may not
        list the new topic yet (Kafka propagates it from the controller), or list it without a
        leader (LEADER_NOT_AVAILABLE, id already set): both are waited out.
        """
        found: dict[str, UUID] = {}
        if self._services is None:
            return found
        deadline = asyncio.get_running_loop().time() + self.store.write_timeout_s
        delay = 0.02
        while True:
            missing = [n for n in names if n not in found]
            req = MetadataRequest(
                topics=[MetadataRequestTopic(name=n, topic_id=_ZERO) for n in missing], allow_auto_topic_creation=False
            )
            try:
                resp = await self._services.send_request(ApiKey.METADATA, req)
                for t in resp.topics:
                    tid = getattr(t, "topic_id", _ZERO)
                    if t.error_code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE) and tid.int:
                        found[t.name] = tid
            except ConnectionError as exc:
                log.debug("internal-topics: looking up topic ids failed: %s", exc)
            if len(found) == len(names) or asyncio.get_running_loop().time() + delay > deadline:
                return found
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # -- AlterConfigs, IncrementalAlterConfigs ----------------------------------------------
    @on_request(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    @on_request(ApiKey.ALTER_CONFIGS)
    def alter_configs(self, ctx: FilterContext, request: Any) -> Result:
        """``internal`` is taken out of topic resources; the change is recorded after the broker's answer.

        AlterConfigs replaces a resource's whole config, as Kafka defines it: a topic altered
        without ``internal`` is no longer marked (the same happens on a broker that keeps the
        config itself). IncrementalAlterConfigs: SET true/false, DELETE (= false); APPEND and
        SUBTRACT are INVALID_CONFIG, as for any non-list config.
        """
        incremental = ctx.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        errors: dict[str, tuple[int, str]] = {}
        changes: dict[str, bool] = {}
        touched = False
        for res in request.resources:
            if res.resource_type != TOPIC_RESOURCE:
                continue
            if res.resource_name == self.marks_topic:
                errors[res.resource_name] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
                continue
            ours = [c for c in res.configs if c.name == INTERNAL_CONFIG]
            if incremental:
                if not ours:
                    continue
                c = ours[-1]
                op = c.config_operation
                value = parse_internal(c.value) if op == _OP_SET else False if op == _OP_DELETE else None
                if value is None:
                    errors[res.resource_name] = (
                        ErrorCode.INVALID_CONFIG,
                        f"Invalid value {c.value} (operation {op}) for configuration internal: "
                        "Expected SET to true or false, or DELETE",
                    )
                    continue
            else:
                value = parse_internal(ours[-1].value) if ours else False
                if value is None:
                    errors[res.resource_name] = (
                        ErrorCode.INVALID_CONFIG,
                        _bad_value(ours[-1].value),
                    )
                    continue
            changes[res.resource_name] = value
            if ours:
                res.configs = [c for c in res.configs if c.name != INTERNAL_CONFIG]
                touched = True
        if not errors and not changes:
            return FORWARD
        if changes and not request.validate_only:
            ctx.state[_STATE + ".alter"] = changes
        if errors:
            ctx.state[_STATE + ".errors"] = errors
            kept = [
                r for r in request.resources
                if not (r.resource_type == TOPIC_RESOURCE and r.resource_name in errors)
            ]
            if not kept:
                resp = self._alter_response(ctx, [])
                self._add_alter_errors(resp, errors)
                return respond(resp)
            request.resources = kept
            touched = True
        return forward(request) if touched else FORWARD

    @staticmethod
    def _alter_response(ctx: FilterContext, entries: list[Any]) -> Any:
        if ctx.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=entries)
        return AlterConfigsResponse(throttle_time_ms=0, responses=entries)

    @staticmethod
    def _add_alter_errors(response: Any, errors: Mapping[str, tuple[int, str]]) -> None:
        entry_cls = (
            IncrementalAlterConfigsResourceResponse
            if isinstance(response, IncrementalAlterConfigsResponse)
            else AlterConfigsResourceResponse
        )
        response.responses = list(response.responses) + [
            entry_cls(error_code=code, error_message=msg, resource_type=TOPIC_RESOURCE, resource_name=name)
            for name, (code, msg) in errors.items()
        ]

    @on_response(ApiKey.INCREMENTAL_ALTER_CONFIGS, needs_state=True)
    @on_response(ApiKey.ALTER_CONFIGS, needs_state=True)
    def altered(self, ctx: FilterContext, response: Any) -> Result | Any:
        state = ctx.state
        errors = state.get(_STATE + ".errors")
        if errors:
            self._add_alter_errors(response, errors)
        changes: dict[str, bool] = state.get(_STATE + ".alter") or {}
        done = [
            r for r in response.responses
            if r.resource_type == TOPIC_RESOURCE and r.error_code == ErrorCode.NONE and r.resource_name in changes
        ]
        if not done:
            return forward(response)
        return self._record_alter(response, done, changes)

    async def _record_alter(self, response: Any, done: list[Any], changes: Mapping[str, bool]) -> Result:
        await self._wait_ready()
        names = [r.resource_name for r in done]
        ids = await self._ids_by_name(names)
        entries: list[tuple[UUID, str | None]] = []
        for name in names:
            if name not in ids:
                continue
            self.current_ids[name] = ids[name]
            want = changes[name]
            if want != self.store.table.marked_id(ids[name]):
                entries.append((ids[name], name if want else None))
        reason: Exception = MarkWriteError("its topic id could not be looked up")
        failed = {n for n in names if n not in ids}
        try:
            await self.store.write(entries)
        except MarkWriteError as exc:
            failed, reason = set(names), exc
        for r in done:
            if r.resource_name in failed:
                r.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                r.error_message = _lost_mark(r.resource_name, reason)
                log.error("internal-topics: %s", r.error_message)
        return forward(response)

    # -- DescribeConfigs: internal shown for every topic --------------------------------------
    def keep_request(self, ctx: FilterContext, request: Any) -> Result:
        """Nothing to refuse up front; declaring it makes kgate decode the request for the response hook."""
        return FORWARD

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
                r.error_message = "Topic authorization failed."
                r.configs = []
                continue
            keys = asked.get(r.resource_name)
            if r.error_code or (keys is not None and INTERNAL_CONFIG not in keys):
                continue
            internal = is_internal(self.kind(r.resource_name))
            marked = internal and self.kind(r.resource_name) is Kind.USER
            r.configs = [c for c in r.configs if c.name != INTERNAL_CONFIG] + [
                DescribeConfigsResourceResult(
                    name=INTERNAL_CONFIG,
                    value="true" if internal else "false",
                    read_only=False,
                    config_source=_DYNAMIC_TOPIC_CONFIG if marked else _DEFAULT_CONFIG,
                    is_default=not marked,
                    is_sensitive=False,
                    synonyms=[],
                    config_type=_BOOLEAN,
                    documentation="KIP-619: internal topics are left out of default topic listings (kept by kgate)",
                )
            ]
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

    def _described(self, ctx: FilterContext, response: Any) -> Result:
        self._learn(response.topics)
        changed = False
        if any(t.name == self.marks_topic for t in response.topics):
            request = ctx.request
            if ctx.api_key == ApiKey.METADATA:
                asked_all = request is None or request.topics is None or (ctx.api_version == 0 and not request.topics)
                asked_ids = frozenset(
                    t.topic_id for t in (request.topics or ()) if getattr(t, "topic_id", _ZERO).int
                ) if request is not None else frozenset()
            else:
                asked_all, asked_ids = request is None or not request.topics, frozenset()
            kept = hide_described_topics(response.topics, lambda n: n != self.marks_topic, asked_all, asked_ids)
            if kept is not None:
                response.topics, changed = kept, True
        if ctx.api_key == ApiKey.METADATA and ctx.api_version < 1:
            return forward(response) if changed else FORWARD  # v0 has no is_internal
        for t in response.topics:
            if t.error_code or not t.name or t.is_internal:
                continue
            if is_internal(self.kind(t.name, getattr(t, "topic_id", None))):
                t.is_internal = True
                changed = True
        return forward(response) if changed else FORWARD

    for _key in (ApiKey.METADATA, ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.DESCRIBE_CONFIGS):
        keep_request = on_request(_key)(keep_request)
    del _key
