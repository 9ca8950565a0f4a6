"""``guardrails``: bounds on what one request may ask of a broker, in kgate's default chain.

A well-formed CreateTopics asking for 1,111,556,097 partitions makes Tansu try to allocate
106 GB and die; a broker is not protected by syntax checks. This filter refuses requests outside
configured bounds before they reach the broker, answering as Kafka's own ``CreateTopicPolicy`` /
``AlterConfigPolicy`` would (POLICY_VIOLATION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
with a message naming the limit), per entry where the RPC has per-entry errors: the rest of the
request still goes to the broker and the refused entries are merged into its answer.

* CreateTopics: topic name, partitions per topic and per request, replication factor (also of
  explicit assignments), topic configs (allow/deny lists, value ranges).
* CreatePartitions: partitions per topic (the new count) and per request, assignments' replicas.
* AlterConfigs / IncrementalAlterConfigs: the configs of topic resources (allow/deny, ranges).
* Produce, only when configured (``produce.acks``, ``produce.max_batch_bytes``): hooking Produce
  puts it on the filtered path, so a filter instance without Produce rules declares no Produce
  hook at all, and one with only ``acks`` decides from the request's first bytes (``peek``).

The bounds and their defaults are in ``filters.builtin.guardrail_rules`` and docs/guardrails.md;
refusals are counted in ``kgate_guardrail_refusals_total`` and logged, rate-limited
(``filters.builtin.guardrail_report``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from kgate.api import (
    FORWARD,
    ApiKey,
    Filter,
    FilterContext,
    Result,
    close,
    error_response,
    forward,
    on_request,
    on_response,
    respond,
)
from kgate.codec import api
from kgate.filters.builtin.authz.shapes import ENTRY_LISTS, ConfigResource, element_class, make
from kgate.filters.builtin.guardrails.report import RefusalReport
from kgate.filters.builtin.guardrails.rules import Refusal, Rules, validate
from kgate.filters.exchanges import POLICY_STATE_KEY, record_policy_decision

_STATE = "guardrails.refused"  # (response list attribute, error entries) waiting for the broker's answer
_PRODUCE_STATE = "guardrails.produce_refused"  # refused Produce partitions, by topic
_ADMIN_KEYS = (ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
_SET = 0  # IncrementalAlterConfigs config_operation SET (1 DELETE, 2 APPEND, 3 SUBTRACT)


class Guardrails(Filter):
    name = "guardrails"
    uses_topic_names = False  # bounds read names from the request itself; ids need no name

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        return validate(config)

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.rules = Rules(config)
        self.report = RefusalReport()
        # Only the hooks this configuration needs: a Produce hook, even one that forwards at once,
        # takes every Produce off kgate's header-only path, so it is declared only with Produce rules;
        # with acks alone the peeking variant decides from the request's first bytes.
        if not self.rules.checks_produce:
            unwanted = {"produce_peek", "produce_whole", "produce_merge"}
        elif self.rules.max_batch_bytes is None:
            unwanted = {"produce_whole"}
        else:
            unwanted = {"produce_peek"}
        # FilterChain reads the hooks of the instance; the class keeps the full table
        self.__dict__["hooks"] = tuple((attr, spec) for attr, spec in type(self).hooks if attr not in unwanted)

    # -- refusing entries ---------------------------------------------------------------------------
    def _noted(
        self, ctx: FilterContext, what: str, resource: str | UUID, refusal: Refusal, kind: str = "topic"
    ) -> None:
        self.report.refused(ctx, what, refusal)
        record_policy_decision(ctx, self.name, resource, refusal.code, refusal.message, resource_type=kind)

    @staticmethod
    def _others_waiting(ctx: FilterContext) -> bool:
        """Whether another filter kept something for this exchange's answer (the audit notes aside).

        kgate's own answer runs no response hook, so it would lose the other filter's error entries:
        then the narrowed request goes upstream even when nothing of it is left.
        """
        return any(not key.startswith(POLICY_STATE_KEY) for key in ctx.state)

    def _refuse_entries(self, ctx: FilterContext, request: Any, verdicts: Sequence[Refusal | None]) -> Result:
        """Answer the entries with a refusal from kgate; forward the rest, merging the errors into the answer."""
        if not any(verdicts):
            return FORWARD
        spec = ENTRY_LISTS[ctx.api_key]
        others_waiting = self._others_waiting(ctx)
        kept, refused = [], []
        for entry, refusal in zip(list(getattr(request, spec.request_list)), verdicts, strict=True):
            if refusal is None:
                kept.append(entry)
                continue
            error = spec.error_entry(ctx, request, entry, refusal.code)
            if hasattr(error, "error_message"):
                error.error_message = refusal.message
            refused.append(error)
        if not kept and not others_waiting:
            resp = api.API_INFO[ctx.api_key].response_class()
            setattr(resp, spec.response_list, refused)
            return respond(resp)
        setattr(request, spec.request_list, kept)
        ctx.state[_STATE] = (spec.response_list, refused)
        return forward(request)

    def merge(self, ctx: FilterContext, response: Any) -> Result:
        """The error entries the request hook kept back, appended to the broker's answer."""
        pending = ctx.state.get(_STATE)
        if pending is None:
            return FORWARD
        attr, entries = pending
        setattr(response, attr, list(getattr(response, attr) or []) + list(entries))
        return forward(response)

    # -- CreateTopics, CreatePartitions ------------------------------------------------------------
    def _create_topic(self, topic: Any) -> tuple[Refusal | None, int]:
        """One CreateTopics entry's refusal, and how many partitions it asks for (1 for the broker default)."""
        rules = self.rules
        refusal = rules.topic_name(topic.name or "")
        if refusal is not None:
            return refusal, 0
        assignments = topic.assignments or []
        if assignments:
            count = len(assignments)
            refusal = rules.partitions(count)
            for a in assignments:
                refusal = refusal or rules.replication_factor(len(a.broker_ids or []))
        else:
            count = topic.num_partitions if topic.num_partitions != -1 else 1
            if topic.num_partitions != -1:
                refusal = rules.partitions(topic.num_partitions)
            if refusal is None and topic.replication_factor != -1:
                refusal = rules.replication_factor(topic.replication_factor)
        for c in topic.configs or []:
            refusal = refusal or rules.topic_config(c.name, c.value)
        return refusal, count

    def _create_partitions_topic(self, topic: Any) -> tuple[Refusal | None, int]:
        """One CreatePartitions entry: ``count`` is the topic's new total (the current one is not known here)."""
        refusal = self.rules.partitions(topic.count)
        for a in topic.assignments or []:
            refusal = refusal or self.rules.replication_factor(len(a.broker_ids or []))
        return refusal, topic.count

    def _partition_verdicts(self, ctx: FilterContext, request: Any) -> list[Refusal | None]:
        check = self._create_topic if ctx.api_key == ApiKey.CREATE_TOPICS else self._create_partitions_topic
        limit = self.rules.max_partitions_per_request
        total = 0
        verdicts: list[Refusal | None] = []
        for topic in request.topics or []:
            refusal, count = check(topic)
            if refusal is None and total + count > limit:
                refusal = self.rules.request_partitions(total + count)
            if refusal is None:
                total += count
            else:
                self._noted(ctx, f"topic={str(topic.name)[:100]!r}", topic.name or "", refusal)
            verdicts.append(refusal)
        return verdicts

    def partitions(self, ctx: FilterContext, request: Any) -> Result:
        return self._refuse_entries(ctx, request, self._partition_verdicts(ctx, request))

    # -- AlterConfigs, IncrementalAlterConfigs ------------------------------------------------------
    def configs(self, ctx: FilterContext, request: Any) -> Result:
        incremental = ctx.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        verdicts: list[Refusal | None] = []
        for res in request.resources or []:
            refusal = None
            if res.resource_type == ConfigResource.TOPIC:
                for c in res.configs or []:
                    sets = not incremental or c.config_operation == _SET
                    refusal = refusal or self.rules.topic_config(c.name, c.value, sets_value=sets)
            if refusal is not None:
                self._noted(ctx, f"topic={str(res.resource_name)[:100]!r}", res.resource_name, refusal)
            verdicts.append(refusal)
        return self._refuse_entries(ctx, request, verdicts)

    # -- Produce (only with produce rules configured; see __init__) ---------------------------------
    def produce_peek(self, ctx: FilterContext, request: Any) -> Result:
        """acks only: decided from the header fields, so an allowed Produce streams through."""
        return self._produce(ctx, request)

    def produce_whole(self, ctx: FilterContext, request: Any) -> Result:
        """Batch sizes need the partitions' records: every Produce is read whole."""
        return self._produce(ctx, request)

    def _produce(self, ctx: FilterContext, request: Any) -> Result:
        whole = any(t.partition_data for t in request.topic_data)  # a peek carries no partition data
        refusal = self.rules.acks_allowed(request.acks)
        if refusal is not None:
            if not whole:
                # at a peek any result but FORWARD means "not decided": kgate decodes the whole
                # request and asks again, and the refusal is counted and answered then
                return forward(request)
            self._noted(ctx, f"acks={request.acks}", "produce", refusal, kind="request")
            if request.acks == 0:
                return close(refusal.message)  # acks=0 expects no answer: a closed connection is what it sees
            resp = error_response(ctx.api_key, ctx.api_version, request, refusal.code)
            assert resp is not None  # Produce has a per-partition error shape
            for t in resp.responses:
                for p in t.partition_responses:
                    if hasattr(p, "error_message"):
                        p.error_message = refusal.message
            return respond(resp)
        if self.rules.max_batch_bytes is None:
            return FORWARD
        return self._batch_sizes(ctx, request)

    def _batch_sizes(self, ctx: FilterContext, request: Any) -> Result:
        """Refuse the partitions whose records exceed the limit (MESSAGE_TOO_LARGE); the rest goes on."""
        refused: list[tuple[Any, list[Any]]] = []  # (topic entry, refused partitions with their refusal)
        for t in request.topic_data:
            bad = []
            for p in t.partition_data:
                refusal = self.rules.batch_bytes(len(p.records) if p.records is not None else 0)
                if refusal is not None:
                    bad.append((p, refusal))
            if bad:
                refused.append((t, bad))
        if not refused:
            return FORWARD
        others_waiting = self._others_waiting(ctx)
        tcls = element_class(api.API_INFO[ApiKey.PRODUCE].response_class, "responses")
        pcls = element_class(tcls, "partition_responses")
        answers = []
        for t, bad in refused:
            what = f"topic={t.name if not t.topic_id.int else t.topic_id}"
            for _p, refusal in bad:
                self._noted(ctx, what, t.name if not t.topic_id.int else t.topic_id, refusal)
            answers.append(
                make(
                    tcls,
                    name=t.name,
                    topic_id=t.topic_id,
                    partition_responses=[
                        make(
                            pcls,
                            index=p.index,
                            error_code=r.code,
                            base_offset=-1,
                            log_append_time_ms=-1,
                            log_start_offset=-1,
                            error_message=r.message,
                        )
                        for p, r in bad
                    ],
                )
            )
            dropped = {id(p) for p, _r in bad}
            t.partition_data = [p for p in t.partition_data if id(p) not in dropped]
        if request.acks == 0:
            return close(refused[0][1][0][1].message)
        request.topic_data = [t for t in request.topic_data if t.partition_data]
        if not request.topic_data and not others_waiting:
            resp = api.API_INFO[ApiKey.PRODUCE].response_class()
            resp.responses = answers
            return respond(resp)
        ctx.state[_PRODUCE_STATE] = answers
        return forward(request)

    def produce_merge(self, ctx: FilterContext, response: Any) -> Result:
        """Refused partitions go back into their topic's entry of the broker's answer (or a new entry)."""
        answers = ctx.state.get(_PRODUCE_STATE)
        if answers is None:
            return FORWARD
        by_topic = {(r.name, r.topic_id): r for r in response.responses}
        for a in answers:
            entry = by_topic.get((a.name, a.topic_id))
            if entry is None:
                response.responses = [*response.responses, a]
            else:
                entry.partition_responses = [*entry.partition_responses, *a.partition_responses]
        return forward(response)

    # -- hook registration ---------------------------------------------------------------------------
    for _key in (ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS):
        partitions = on_request(_key)(partitions)
    for _key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        configs = on_request(_key)(configs)
    for _key in _ADMIN_KEYS:
        merge = on_response(_key, needs_state=True)(merge)
    del _key
    produce_peek = on_request(ApiKey.PRODUCE, peek=True)(produce_peek)
    produce_whole = on_request(ApiKey.PRODUCE)(produce_whole)
    produce_merge = on_response(ApiKey.PRODUCE, needs_state=True)(produce_merge)
