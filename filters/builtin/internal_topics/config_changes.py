"""``internal-topics``' hooks on topic creation and config changes: ``internal`` in, marks out.

CreateTopics, IncrementalAlterConfigs and AlterConfigs carry the topic config ``internal``.
Apache Kafka refuses it (INVALID_CONFIG, "Unknown topic config name: internal"), so kgate takes
it out of every request before forwarding it, and once the broker answered that the topic was
created or changed, records the mark (keyed by the topic id the answer or a Metadata lookup
gives) in the marks store (filters.builtin.topic_marks). Why the broker goes first and what a
client is told when the mark cannot be written: docs/internal-topics.md.

A mixin of ``InternalTopics`` (filters.builtin.internal_topics), which provides the attributes
declared below; kgate finds the hooks on the combined class.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from kgate.api import (
    FORWARD,
    ApiKey,
    ClusterServices,
    ErrorCode,
    FilterContext,
    Result,
    forward,
    on_request,
    on_response,
    respond,
)
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.filters.builtin.internal_topics.answers import (
    AUTHZ_MESSAGE,
    OP_DELETE,
    OP_SET,
    TOPIC_RESOURCE,
    add_alter_errors,
    alter_response,
    bad_value,
    create_errors,
    created_internal_config,
    lost_mark,
)
from kgate.filters.builtin.internal_topics.marks import MarksStore, MarkWriteError
from kgate.filters.builtin.internal_topics.policy import INTERNAL_CONFIG, parse_internal

log = logging.getLogger("kgate.filters.internal_topics")

_ZERO = UUID(int=0)
_STATE = "internal-topics"


class ConfigChangeHooks:
    """CreateTopics, IncrementalAlterConfigs, AlterConfigs: strip ``internal``, record the marks."""

    marks_topic: str
    store: MarksStore
    current_ids: dict[str, UUID]
    _services: ClusterServices | None

    async def _wait_ready(self) -> None:
        raise NotImplementedError  # InternalTopics: wait for the first read of the marks

    # -- CreateTopics: strip internal, record the mark once the broker created the topic -----
    @on_request(ApiKey.CREATE_TOPICS)
    def create_topics(self, ctx: FilterContext, request: Any) -> Result:
        errors: dict[str, tuple[int, str]] = {}
        to_mark: list[str] = []
        changed = False
        for t in request.topics:
            if t.name == self.marks_topic:
                errors[t.name] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHZ_MESSAGE)
                continue
            ours = [c for c in t.configs if c.name == INTERNAL_CONFIG]
            if not ours:
                continue
            value = parse_internal(ours[-1].value)
            if value is None:
                errors[t.name] = (
                    ErrorCode.INVALID_CONFIG,
                    bad_value(ours[-1].value),
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
                return respond(create_errors(errors))
            request.topics = kept
        return forward(request)

    @on_response(ApiKey.CREATE_TOPICS, needs_state=True)
    def created(self, ctx: FilterContext, response: Any) -> Result | Any:
        state = ctx.state
        errors = state.get(_STATE + ".errors")
        if errors:
            response.topics = list(response.topics) + list(create_errors(errors).topics)
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
                t.error_message = lost_mark(t.name, reason)
                log.error("internal-topics: %s", t.error_message)
            elif t.configs is not None:
                t.configs = [c for c in t.configs if c.name != INTERNAL_CONFIG] + [created_internal_config()]
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
                errors[res.resource_name] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHZ_MESSAGE)
                continue
            ours = [c for c in res.configs if c.name == INTERNAL_CONFIG]
            if incremental:
                if not ours:
                    continue
                c = ours[-1]
                op = c.config_operation
                value = parse_internal(c.value) if op == OP_SET else False if op == OP_DELETE else None
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
                        bad_value(ours[-1].value),
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
                r for r in request.resources if not (r.resource_type == TOPIC_RESOURCE and r.resource_name in errors)
            ]
            if not kept:
                resp = alter_response(ctx.api_key, [])
                add_alter_errors(resp, errors)
                return respond(resp)
            request.resources = kept
            touched = True
        return forward(request) if touched else FORWARD

    @on_response(ApiKey.INCREMENTAL_ALTER_CONFIGS, needs_state=True)
    @on_response(ApiKey.ALTER_CONFIGS, needs_state=True)
    def altered(self, ctx: FilterContext, response: Any) -> Result | Any:
        state = ctx.state
        errors = state.get(_STATE + ".errors")
        if errors:
            add_alter_errors(response, errors)
        changes: dict[str, bool] = state.get(_STATE + ".alter") or {}
        done = [
            r
            for r in response.responses
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
                r.error_message = lost_mark(r.resource_name, reason)
                log.error("internal-topics: %s", r.error_message)
        return forward(response)
