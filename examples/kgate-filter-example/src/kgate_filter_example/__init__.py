"""``client-id-policy``: only clients whose ``client.id`` matches a pattern may produce to guarded topics.

An example kgate filter plugin (see kgate's docs/filters.md, which walks through this file).

Config::

    filters:
      - name: client-id-policy
        config:
          allow: ["billing-*", "orders-service"]   # required: client ids (shell-style patterns) that may produce
          topics: ["orders-*"]                      # optional: the topics this guards (default: every topic)

What it does with each Produce request:

* A client whose id matches ``allow`` passes unchanged (kgate forwards the original bytes).
* Any other client (including one that sends no client id) gets TOPIC_AUTHORIZATION_FAILED for
  each guarded topic in the request; its unguarded topics still go to the broker, and the
  refusals are merged into the broker's answer (``refuse_topics`` / ``merge_refused``).
* Records are counted per topic *name* and outcome in the Prometheus counter
  ``kgate_client_id_policy_records_total{cluster, topic, outcome}`` (outcome: ``written``,
  ``failed`` (the broker answered an error), ``refused``, ``unacknowledged`` (acks=0)), and in
  ``ClientIdPolicy.counts`` for tests.

Topic names: Produce v13+ names topics only by id. Known ids are named synchronously
(``ctx.cached_topic_name``, no task). An unknown id is looked up (``await ctx.topic_names``)
only when a decision needs it: for a client that is not allowed (in the request hook; fail
closed, an id that cannot be named is refused) and for counting (in the response hook, after
the request has already gone to the broker). An allowed client's request never waits.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from kgate.api import (
    ApiKey,
    ErrorCode,
    Filter,
    FilterConfigError,
    FilterContext,
    Result,
    TopicKey,
    merge_refused,
    on_request,
    on_response,
    refuse_topics,
    topic_key,
)
from prometheus_client import Counter as PromCounter

__all__ = ["RECORDS", "ClientIdPolicy", "count_records"]

log = logging.getLogger("kgate_filter_example")

RECORDS = PromCounter(
    "kgate_client_id_policy_records",  # exposed as kgate_client_id_policy_records_total
    "Produced records seen by the client-id-policy filter, by topic name and outcome",
    ["cluster", "topic", "outcome"],
)

_KEYS = {"allow", "topics"}
_STATE = "client-id-policy.sent"  # key in ctx.state: what the request hook let through


def _patterns(config: Mapping[str, Any], key: str) -> list[str]:
    value = config[key]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) and v for v in value):
        raise FilterConfigError(f"{key}: expected a non-empty list of shell-style patterns, got {value!r}")
    return list(value)


def _matcher(patterns: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def count_records(records: bytes | memoryview | None) -> int:
    """How many records a Produce partition carries, read from the record batch headers.

    A v2 record batch (every Produce version kgate decodes, v3+) is: baseOffset int64,
    batchLength int32, partitionLeaderEpoch int32, magic int8, ... recordCount int32 at byte 57.
    """
    if not records:
        return 0
    view = memoryview(records)
    total = offset = 0
    while offset + 17 <= len(view):
        (batch_length,) = struct.unpack_from(">i", view, offset + 8)
        magic = view[offset + 16]
        if magic >= 2 and offset + 61 <= len(view):
            total += struct.unpack_from(">i", view, offset + 57)[0]
        else:
            total += 1  # a legacy (magic 0/1) message is one record
        if batch_length <= 0:
            break
        offset += 12 + batch_length
    return total


class ClientIdPolicy(Filter):
    name = "client-id-policy"

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        # Runs when kgate loads the config (also `kgate check-config`), before anything binds.
        # The message names the key; kgate prefixes it with the file and the filter's path.
        unknown = set(config) - _KEYS
        if unknown:
            raise FilterConfigError(f"unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(_KEYS))})")
        if "allow" not in config:
            raise FilterConfigError("allow: required key is missing (client id patterns that may produce)")
        allow = _patterns(config, "allow")
        topics = _patterns(config, "topics") if config.get("topics") is not None else None
        return {"allow": allow, "topics": topics}

    def __init__(self, config: Mapping[str, Any]) -> None:
        # ``config`` is what validate_config returned, frozen by kgate (lists become tuples).
        super().__init__(config)
        self._allow = _matcher(config["allow"])
        self._topics = _matcher(config["topics"]) if config["topics"] is not None else None
        self._verdicts: dict[str | None, bool] = {}
        #: records seen, by (topic name, outcome); the same numbers as the Prometheus counter
        self.counts: Counter[tuple[str, str]] = Counter()

    # -- decisions -------------------------------------------------------------------------------
    def client_allowed(self, client_id: str | None) -> bool:
        """Whether ``client_id`` may produce to guarded topics (no client id: never)."""
        verdict = self._verdicts.get(client_id)
        if verdict is None:
            verdict = client_id is not None and self._allow.fullmatch(client_id) is not None
            if len(self._verdicts) < 10_000:  # client ids come from clients: bound the cache
                self._verdicts[client_id] = verdict
        return verdict

    def guards(self, topic: str) -> bool:
        return self._topics is None or self._topics.fullmatch(topic) is not None

    def _count(self, ctx: FilterContext, topic: str, outcome: str, n: int) -> None:
        if n:
            self.counts[(topic, outcome)] += n
            RECORDS.labels(ctx.connection.virtual_cluster, topic, outcome).inc(n)

    # -- request hook ----------------------------------------------------------------------------
    @on_request(ApiKey.PRODUCE)
    def check_produce(self, ctx: FilterContext, request: Any) -> Result | Any:
        allowed = self.client_allowed(ctx.connection.client_id)
        names: dict[TopicKey, str] = {}
        missing: list[UUID] = []
        for topic in request.topic_data:
            key = topic_key(topic)
            if isinstance(key, UUID):  # Produce v13+: the topic is named by id only
                name = ctx.cached_topic_name(key)  # sync fast path: never waits
                if name is None:
                    missing.append(key)
                else:
                    names[key] = name
            else:
                names[key] = key
        if missing and not allowed:
            # The decision needs the names: return a coroutine. kgate suspends only this request
            # (later requests of this connection wait behind it; other connections run on).
            return self._check_after_lookup(ctx, request, names, missing)
        return self._decide(ctx, request, allowed, names, [])

    async def _check_after_lookup(
        self, ctx: FilterContext, request: Any, names: dict[TopicKey, str], missing: list[UUID]
    ) -> Result:
        unresolved: list[UUID] = []
        for topic_id, found in (await ctx.topic_names(missing)).items():
            if isinstance(found, str):
                names[topic_id] = found
            else:  # a TopicNameError (does not exist, lookup failed): fail closed
                unresolved.append(topic_id)
        return self._decide(ctx, request, False, names, unresolved)

    def _decide(
        self, ctx: FilterContext, request: Any, allowed: bool, names: dict[TopicKey, str], unresolved: list[UUID]
    ) -> Result:
        codes: dict[TopicKey, int] = {}
        if not allowed:
            codes = {key: ErrorCode.TOPIC_AUTHORIZATION_FAILED for key, name in names.items() if self.guards(name)}
            for topic_id in unresolved:
                codes[topic_id] = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # cannot tell it is unguarded: refuse
        sent: dict[TopicKey, tuple[str | None, dict[int, int]]] = {}
        for topic in request.topic_data:
            key = topic_key(topic)
            per_partition = {p.index: count_records(p.records) for p in topic.partition_data}
            name = names.get(key)
            if key in codes:
                self._count(ctx, name or str(key), "refused", sum(per_partition.values()))
            elif request.acks == 0:  # no response will come: count now
                self._count(ctx, name or str(key), "unacknowledged", sum(per_partition.values()))
            else:
                sent[key] = (name, per_partition)
        if codes:
            log.debug("client-id-policy: refusing %d topic(s) to client id %r", len(codes), ctx.connection.client_id)
        if sent:
            ctx.state[_STATE] = sent  # handed to this exchange's response hook
        # No codes: FORWARD, the original bytes go upstream. Some: the request goes on without
        # them and the refusals wait in ctx.state for merge_refused. All: answered here.
        return refuse_topics(ctx, request, codes)

    # -- response hook ---------------------------------------------------------------------------
    # needs_state: called only for exchanges whose request hook stored something in ctx.state
    # (here: records to count, or refusals to merge); other Produce responses are not even decoded.
    @on_response(ApiKey.PRODUCE, needs_state=True)
    def count_produce(self, ctx: FilterContext, response: Any) -> Result | Any:
        sent = ctx.state.get(_STATE)
        if not sent:
            return merge_refused(ctx, response)
        names: dict[TopicKey, str] = {}
        missing: list[UUID] = []
        for key, (name, _parts) in sent.items():
            if name is None and isinstance(key, UUID):
                name = ctx.cached_topic_name(key)
            if name is None:
                missing.append(key)  # type: ignore[arg-type]
            else:
                names[key] = name
        if missing:
            # Suspending a response hook only delays this answer; the request went long ago.
            return self._count_after_lookup(ctx, response, sent, names, missing)
        return self._count_response(ctx, response, sent, names)

    async def _count_after_lookup(
        self,
        ctx: FilterContext,
        response: Any,
        sent: dict[TopicKey, Any],
        names: dict[TopicKey, str],
        missing: list[UUID],
    ) -> Result:
        for topic_id, found in (await ctx.topic_names(missing)).items():
            names[topic_id] = found if isinstance(found, str) else str(topic_id)
        return self._count_response(ctx, response, sent, names)

    def _count_response(
        self, ctx: FilterContext, response: Any, sent: dict[TopicKey, Any], names: dict[TopicKey, str]
    ) -> Result:
        for topic in response.responses:
            key = topic_key(topic)
            entry = sent.get(key)
            if entry is None:
                continue
            per_partition = entry[1]
            for p in topic.partition_responses:
                outcome = "written" if p.error_code == 0 else "failed"
                self._count(ctx, names[key], outcome, per_partition.get(p.index, 0))
        # Put back the refusals refuse_topics kept for this exchange (FORWARD if there were none).
        return merge_refused(ctx, response)
