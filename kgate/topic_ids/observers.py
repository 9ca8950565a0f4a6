"""What a response passing through kgate teaches the cache, by api key (pure).

Passive learning costs no request: Metadata v10+ answers name every topic they list, CreateTopics
v7+ answers give the new ids, DeleteTopics answers kill ids (and every id of a deleted name), and
a Fetch v13+ partition error UNKNOWN_TOPIC_ID (Kafka) or UNKNOWN_TOPIC_OR_PARTITION (Tansu) kills
the id it was asked for. ``OBSERVERS`` is the table the proxy consults for a decoded response;
``request`` is the decoded request where kgate has one (CreateTopics' ``validate_only`` makes a
dry run's id name nothing; a Fetch error may come back with a zero id, so response topics are
matched to the request's by position).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import ApiKey
from kgate.topic_ids.cache import TopicIdCache

_DEAD = (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), int(ErrorCode.UNKNOWN_TOPIC_ID))
_NONE = int(ErrorCode.NONE)

Observer = Callable[[TopicIdCache, int, Any, Any], None]


def observe_unknown_id(cache: TopicIdCache, topic_id: UUID) -> None:
    """The cluster answered "no such topic" for this id somewhere: evict and negative-cache it."""
    key = topic_id.int
    if key:
        cache.kill(key, "unknown_id", _DEAD[0])


def metadata(cache: TopicIdCache, version: int, msg: Any, request: Any = None) -> None:
    """Learn (id, name) of every healthy topic of a v10+ answer; kill ids (or, for a lookup by
    name, every id of that name) the answer says do not exist."""
    if version < 10:
        return  # no ids before v10
    for t in msg.topics:
        code = t.error_code
        key = t.topic_id.int
        if code == _NONE:
            if key and t.name:
                cache.learn(key, t.name)
        elif code in _DEAD:
            if key:
                cache.kill(key, "unknown_id", code)
            elif t.name:
                cache.kill_name(t.name, "unknown_id", code)


def create_topics(cache: TopicIdCache, version: int, msg: Any, request: Any = None) -> None:
    """Learn the ids of created topics (v7+), unless the request only validated."""
    if version < 7 or (request is not None and getattr(request, "validate_only", False)):
        return
    for t in msg.topics:
        if t.error_code == _NONE and t.topic_id.int and t.name:
            cache.learn(t.topic_id.int, t.name)


def delete_topics(cache: TopicIdCache, version: int, msg: Any, request: Any = None) -> None:
    """Kill deleted topics by id (v6+) and by name (all ids that name had)."""
    for r in msg.responses:
        code = r.error_code
        if code == _NONE:
            reason = "deleted"
        elif code in _DEAD:
            reason = "unknown_id"
        else:
            continue
        key = r.topic_id.int if version >= 6 else 0
        if key:
            cache.kill(key, reason, code)
        if r.name:
            cache.kill_name(r.name, reason, code)


def fetch(cache: TopicIdCache, version: int, msg: Any, request: Any = None) -> None:
    """Kill the ids a Fetch v13+ answer says do not exist (by position where it zeroed them)."""
    if version < 13:
        return
    asked = request.topics if request is not None else ()
    for i, topic in enumerate(msg.responses):
        if not any(p.error_code in _DEAD for p in topic.partitions):
            continue
        topic_id = topic.topic_id
        if not topic_id.int and i < len(asked):
            topic_id = asked[i].topic_id
        observe_unknown_id(cache, topic_id)


#: api key -> what its decoded response teaches the cache
OBSERVERS: dict[int, Observer] = {
    ApiKey.METADATA: metadata,
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.FETCH: fetch,
}
