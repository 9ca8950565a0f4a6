"""Error answers built from a request, as a broker would send them.

Filters that refuse (a policy, an unresolvable topic id) and kgate itself (a filter that timed
out) must answer with an error the client understands: per topic and partition where the RPC
reports errors that way, so the client's normal error handling (refresh metadata, retry, fail
the send) runs. ``error_response`` mirrors the request's topics and partitions into a response
object with ``code`` everywhere; ``topic_codes`` lets the code differ per topic.

Error codes are :class:`kgate.api.ErrorCode` members (generated from Kafka's own table).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from kgate.codec import api
from kgate.codec.generated.api_keys import ApiKey

TopicKey = str | UUID  # a topic name or id, whichever the request carries


def _struct(cls: type, field_name: str) -> type:
    for f in cls._FIELDS:  # type: ignore[attr-defined]
        if f.name == field_name:
            return f.struct
    raise KeyError(f"{cls.__name__} has no field {field_name}")


_NAME_FIELDS = ("name", "topic", "topic_name")  # what Kafka's specs call a topic entry's name, by RPC


def topic_key(topic: Any, name_attr: str | None = None) -> TopicKey:
    """A topic entry's id when it carries a non-zero one, else its name.

    Works on any topic-bearing entry without the caller knowing the field: Produce and most RPCs
    call the name ``name``, Fetch and OffsetForLeaderEpoch ``topic``, a few ``topic_name``.
    ``name_attr`` forces one field.
    """
    topic_id = getattr(topic, "topic_id", None)
    if topic_id is not None and topic_id.int:
        return topic_id
    if name_attr is not None:
        return getattr(topic, name_attr)
    for attr in _NAME_FIELDS:
        name = getattr(topic, attr, None)
        if name is not None:
            return name
    raise TypeError(f"{type(topic).__name__} carries no topic id or name ({', '.join(_NAME_FIELDS)})")


def _produce(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    tcls = _struct(type(resp), "responses")
    pcls = _struct(tcls, "partition_responses")
    resp.responses = [
        tcls(
            name=t.name,
            topic_id=t.topic_id,
            partition_responses=[
                pcls(index=p.index, error_code=code(topic_key(t)), base_offset=-1) for p in t.partition_data
            ],
        )
        for t in req.topic_data
    ]


def _fetch(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    tcls = _struct(type(resp), "responses")
    pcls = _struct(tcls, "partitions")
    resp.responses = [
        tcls(
            topic=t.topic,
            topic_id=t.topic_id,
            partitions=[
                pcls(
                    partition_index=p.partition,
                    error_code=code(topic_key(t, "topic")),
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                )
                for p in t.partitions
            ],
        )
        for t in req.topics
    ]


def _list_offsets(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    tcls = _struct(type(resp), "topics")
    pcls = _struct(tcls, "partitions")
    resp.topics = [
        tcls(
            name=t.name,
            partitions=[
                pcls(partition_index=p.partition_index, error_code=code(t.name), offset=-1, timestamp=-1)
                for p in t.partitions
            ],
        )
        for t in req.topics
    ]


def _metadata(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    tcls = _struct(type(resp), "topics")
    resp.topics = [tcls(error_code=code(topic_key(t)), name=t.name, topic_id=t.topic_id) for t in (req.topics or [])]


def _make(cls: type, **fields: Any) -> Any:
    """An instance of a generated struct, ignoring fields this struct does not have."""
    slots = set(getattr(cls, "__slots__", ()))
    return cls(**{k: v for k, v in fields.items() if k in slots})


def _offset_commit(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    tcls = _struct(type(resp), "topics")
    pcls = _struct(tcls, "partitions")
    resp.topics = [
        _make(
            tcls,
            name=t.name,
            topic_id=getattr(t, "topic_id", None),
            partitions=[pcls(partition_index=p.partition_index, error_code=code(topic_key(t))) for p in t.partitions],
        )
        for t in req.topics
    ]


def _delete_topics(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    rcls = _struct(type(resp), "responses")
    if getattr(req, "topics", None):
        resp.responses = [rcls(name=t.name, topic_id=t.topic_id, error_code=code(topic_key(t))) for t in req.topics]
    else:
        resp.responses = [rcls(name=n, error_code=code(n)) for n in req.topic_names]


def _share(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    """ShareFetch / ShareAcknowledge: topics by id only."""
    tcls = _struct(type(resp), "responses")
    pcls = _struct(tcls, "partitions")
    resp.responses = [
        tcls(
            topic_id=t.topic_id,
            partitions=[pcls(partition_index=p.partition_index, error_code=code(t.topic_id)) for p in t.partitions],
        )
        for t in req.topics
    ]


Builder = Callable[[Any, Any, Callable[[TopicKey], int]], None]


def _elect_leaders(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    rcls = _struct(type(resp), "replica_election_results")
    pcls = _struct(rcls, "partition_result")
    resp.replica_election_results = [
        rcls(topic=t.topic, partition_result=[pcls(partition_id=p, error_code=code(t.topic)) for p in t.partitions])
        for t in req.topic_partitions or []
    ]


def _describe_producers(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
    tcls = _struct(type(resp), "topics")
    pcls = _struct(tcls, "partitions")
    resp.topics = [
        tcls(name=t.name, partitions=[pcls(partition_index=i, error_code=code(t.name)) for i in t.partition_indexes])
        for t in req.topics
    ]


def _per_partition(name_attr: str, index_attr: str, **fixed: Any) -> Builder:
    """A builder for name-keyed RPCs whose request and response both list ``topics[partitions]``.

    ``index_attr`` names the partition index in both; ``fixed`` sets the response partitions'
    other fields (offsets -1 and the like) where the struct has them.
    """

    def build(req: Any, resp: Any, code: Callable[[TopicKey], int]) -> None:
        tcls = _struct(type(resp), "topics")
        pcls = _struct(tcls, "partitions")
        resp.topics = [
            tcls(
                **{name_attr: getattr(t, name_attr)},
                partitions=[
                    _make(pcls, **{index_attr: getattr(p, index_attr)}, error_code=code(getattr(t, name_attr)), **fixed)
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]

    return build


_BUILDERS: dict[int, Builder] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _per_partition("name", "partition_index", low_watermark=-1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _per_partition("topic", "partition", leader_epoch=-1, end_offset=-1),
    ApiKey.TXN_OFFSET_COMMIT: _per_partition("name", "partition_index"),
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.OFFSET_DELETE: _per_partition("name", "partition_index"),
    ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
    ApiKey.SHARE_FETCH: _share,
    ApiKey.SHARE_ACKNOWLEDGE: _share,
}


#: RPCs whose top-level error fails the whole request (a share session, a fetch session): Kafka
#: leaves it NONE when it refuses topics, and so must kgate (tests/integration/test_synthesized_vs_kafka.py)
_PER_PARTITION_ONLY = frozenset({ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE})


def error_response(
    api_key: int,
    api_version: int,
    request: Any,
    code: int,
    topic_codes: Mapping[TopicKey, int] | None = None,
) -> Any | None:
    """A response object answering ``request`` with ``code`` (per topic: ``topic_codes`` first).

    Returns None where kgate knows no faithful error shape for the api (then close instead).
    """
    info = api.API_INFO.get(api_key)
    if info is None:
        return None
    resp = info.response_class()
    codes = topic_codes or {}

    def code_for(topic: TopicKey) -> int:
        return codes.get(topic, code)

    builder = _BUILDERS.get(api_key)
    if builder is not None:
        builder(request, resp, code_for)
        if api_key == ApiKey.METADATA and api_version < 12:
            # a topic asked for by id alone has no name; below v12 the answer's name cannot be null,
            # and Kafka sends it empty
            for t in resp.topics:
                if t.name is None:
                    t.name = ""
        if hasattr(resp, "error_code") and api_key not in _PER_PARTITION_ONLY:
            resp.error_code = code
        return resp
    if hasattr(resp, "error_code"):
        resp.error_code = code
        return resp
    return None
