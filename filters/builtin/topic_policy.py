"""``topic-policy``: allow or deny topics by name, whether the client names them or sends ids.

Denied topics are also hidden from Metadata (left out of a listing, error 29 when asked for
by name), so Metadata does not reveal their ids.

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

import fnmatch
import re
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from filters.api import (
    FORWARD,
    ApiKey,
    Filter,
    FilterConfigError,
    FilterContext,
    Result,
    forward,
    on_request,
    on_response,
)
from filters.errors import TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID
from filters.topics import TopicKey, merge_refused, refuse_topics, request_topics

_UNRESOLVED = {"UNKNOWN_TOPIC_ID": UNKNOWN_TOPIC_ID, "TOPIC_AUTHORIZATION_FAILED": TOPIC_AUTHORIZATION_FAILED}
_KEYS = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.OFFSET_COMMIT,
    ApiKey.DELETE_TOPICS,
    ApiKey.SHARE_FETCH,
    ApiKey.SHARE_ACKNOWLEDGE,
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
        self._deny = re.compile("|".join(fnmatch.translate(p) for p in config["deny"])) if config["deny"] else None
        allow = config["allow"]
        self._allow = re.compile("|".join(fnmatch.translate(p) for p in allow)) if allow is not None else None
        self._unresolved_code = _UNRESOLVED[config["unresolved_error"]]
        self._verdicts: dict[str, bool] = {}

    def allowed(self, name: str) -> bool:
        verdict = self._verdicts.get(name)
        if verdict is None:
            verdict = not (self._deny is not None and self._deny.match(name)) and (
                self._allow is None or bool(self._allow.match(name))
            )
            if len(self._verdicts) < 100_000:
                self._verdicts[name] = verdict
        return verdict

    def check(self, ctx: FilterContext, request: Any) -> Result | Any:
        names: dict[TopicKey, str] = {}
        missing: list[UUID] = []
        for key in request_topics(ctx.api_key, request):
            if isinstance(key, UUID):
                name = ctx.cached_topic_name(key)
                if name is None:
                    missing.append(key)
                else:
                    names[key] = name
            else:
                names[key] = key
        if missing:
            return self._check_after_lookup(ctx, request, names, missing)
        return self._decide(ctx, request, names, [])

    async def _check_after_lookup(
        self, ctx: FilterContext, request: Any, names: dict[TopicKey, str], missing: list[UUID]
    ) -> Result:
        unresolved = []
        for topic_id, found in (await ctx.topic_names(missing)).items():
            if isinstance(found, str):
                names[topic_id] = found
            else:
                unresolved.append(topic_id)
        return self._decide(ctx, request, names, unresolved)

    def _decide(self, ctx: FilterContext, request: Any, names: dict[TopicKey, str], unresolved: list[UUID]) -> Result:
        codes: dict[TopicKey, int] = {k: TOPIC_AUTHORIZATION_FAILED for k, n in names.items() if not self.allowed(n)}
        for topic_id in unresolved:
            codes[topic_id] = self._unresolved_code
        return refuse_topics(ctx, request, codes)

    def merge(self, ctx: FilterContext, response: Any) -> Result:
        return merge_refused(ctx, response)

    @on_request(ApiKey.METADATA)
    def metadata_request(self, ctx: FilterContext, request: Any) -> Result:
        """Nothing to refuse up front; declaring it makes kgate decode the request for the response hook."""
        return FORWARD

    @on_response(ApiKey.METADATA)
    def metadata_response(self, ctx: FilterContext, response: Any) -> Result:
        """Hide denied topics, as Kafka's authorizer does: listed -> left out; asked for -> error 29."""
        request = ctx.request
        asked_for_all = request is None or request.topics is None or (ctx.api_version == 0 and not request.topics)
        kept, changed = [], False
        for topic in response.topics:
            name = topic.name
            if name is None:  # looked up by id and not found: nothing to hide
                kept.append(topic)
                continue
            if self.allowed(name):
                kept.append(topic)
                continue
            changed = True
            if not asked_for_all:
                topic.error_code = TOPIC_AUTHORIZATION_FAILED
                topic.partitions = []
                if hasattr(topic, "topic_id"):
                    topic.topic_id = UUID(int=0)
                kept.append(topic)
        if not changed:
            return FORWARD
        response.topics = kept
        return forward(response)

    for _key in _KEYS:
        check = on_request(_key, peek=_key == ApiKey.PRODUCE)(check)  # decides from topics alone
        merge = on_response(_key, needs_state=True)(merge)
    del _key
