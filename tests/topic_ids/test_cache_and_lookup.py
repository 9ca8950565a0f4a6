"""The pure parts of kgate.topic_ids: the cache on a fake clock, lookup building and parsing, the
observer table. No event loop, no broker: the resolver's asyncio behaviour (single flight,
batching, timeouts) is tested in tests/unit/test_topic_names.py, and against Tansu and Kafka in
tests/integration/test_topic_names_broker.py.
"""

from __future__ import annotations

from uuid import UUID

from kgate.api import ApiKey, ErrorCode, TopicNameError
from kgate.codec.generated.admin.create_topics import CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse
from kgate.codec.generated.data.fetch import (
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from kgate.codec.generated.data.metadata import MetadataResponse, MetadataResponseTopic
from kgate.topic_ids import lookup
from kgate.topic_ids.cache import TopicIdCache
from kgate.topic_ids.observers import OBSERVERS

A, B, C = UUID(int=1), UUID(int=2), UUID(int=3)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_negative_entries_expire_on_the_clock() -> None:
    clock = Clock()
    cache = TopicIdCache(negative_ttl_s=5, clock=clock)
    cache.kill(A.int, "unknown_id", 100)
    assert cache.negative_error(A.int, clock()) is not None
    clock.now += 4.9
    err = cache.negative_error(A.int, clock())
    assert isinstance(err, TopicNameError)
    assert err.code == ErrorCode.UNKNOWN_TOPIC_ID
    assert not err.retriable
    clock.now += 0.2
    assert cache.negative_error(A.int, clock()) is None
    assert A.int not in cache.negative


def test_sweep_offers_only_entries_idle_for_the_revalidation_window() -> None:
    clock = Clock()
    cache = TopicIdCache(idle_revalidate_s=300, clock=clock)
    cache.learn(A.int, "a")
    cache.learn(B.int, "b")
    assert cache.begin_sweep() == []  # nothing has been idle for 300 s yet
    clock.now += 200
    assert cache.cached(B) == "b"  # B used; A not
    clock.now += 150
    assert cache.begin_sweep() == [A.int]
    gone = TopicNameError(ErrorCode.UNKNOWN_TOPIC_ID, "gone", False)
    assert cache.finish_sweep([A.int], {A.int: gone}) == 1
    assert cache.cached(A) is None
    assert cache.stats.evictions == {"sweep": 1}
    assert cache.negative_error(A.int, clock()) is gone


def test_lru_bound_and_name_index() -> None:
    evicted: list[str] = []
    cache = TopicIdCache(max_entries=2, on_evict=evicted.append)
    cache.learn(A.int, "t")
    cache.learn(B.int, "t")  # t recreated: a second id of the same name
    cache.learn(C.int, "u")
    assert len(cache) == 2
    assert cache.cached(A) is None
    assert evicted == ["lru"]
    cache.kill_name("t", "deleted", 0)
    assert cache.cached(B) is None
    assert cache.by_name == {"u": {C.int}}


def test_lookup_requests_are_chunked_and_name_only_ids() -> None:
    keys = list(range(1, lookup.MAX_IDS_PER_REQUEST + 3))
    chunks = list(lookup.by_id_requests(keys))
    assert [len(c) for c, _r in chunks] == [lookup.MAX_IDS_PER_REQUEST, 2]
    _chunk, req = chunks[1]
    assert [(t.topic_id.int, t.name) for t in req.topics] == [(keys[-2], None), (keys[-1], None)]
    assert req.allow_auto_topic_creation is False


def test_parse_by_id_matches_zeroed_ids_by_position() -> None:
    resp = MetadataResponse(
        topics=[
            MetadataResponseTopic(name="a", topic_id=A, error_code=0),
            MetadataResponseTopic(name=None, topic_id=UUID(int=0), error_code=3),  # Tansu: unknown, id zeroed
        ]
    )
    out = lookup.parse_by_id([A.int, B.int], 12, resp)
    assert out[A.int] == "a"
    dead = out[B.int]
    assert isinstance(dead, TopicNameError)
    assert dead.code == ErrorCode.UNKNOWN_TOPIC_ID
    assert not dead.retriable


def test_parse_by_id_passes_broker_errors_with_kafkas_retriability() -> None:
    resp = MetadataResponse(
        topics=[
            MetadataResponseTopic(topic_id=A, error_code=ErrorCode.LEADER_NOT_AVAILABLE),
            MetadataResponseTopic(topic_id=B, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ]
    )
    out = lookup.parse_by_id([A.int, B.int], 12, resp)
    assert [(r.code, r.retriable) for r in out.values() if isinstance(r, TopicNameError)] == [
        (ErrorCode.LEADER_NOT_AVAILABLE, True),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, False),
    ]


def test_parse_all_marks_missing_ids_dead() -> None:
    resp = MetadataResponse(
        topics=[
            MetadataResponseTopic(name="a", topic_id=A, error_code=0),
            MetadataResponseTopic(name="c", topic_id=C, error_code=0),
        ]
    )
    out = lookup.parse_all([A.int, B.int], resp)
    assert out[A.int] == "a"
    assert out[C.int] == "c"
    assert isinstance(out[B.int], TopicNameError)


def test_the_observer_table_teaches_and_kills() -> None:
    cache = TopicIdCache()
    assert set(OBSERVERS) == {ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.FETCH}
    OBSERVERS[ApiKey.METADATA](cache, 12, MetadataResponse(topics=[MetadataResponseTopic(name="a", topic_id=A)]), None)
    created = CreateTopicsResponse(topics=[CreatableTopicResult(name="b", topic_id=B)])
    OBSERVERS[ApiKey.CREATE_TOPICS](cache, 7, created, CreateTopicsRequest(validate_only=True))
    assert cache.cached(B) is None  # a dry run's id names nothing
    OBSERVERS[ApiKey.CREATE_TOPICS](cache, 7, created, CreateTopicsRequest())
    assert (cache.cached(A), cache.cached(B)) == ("a", "b")
    # a Fetch v13+ error for a zeroed id kills the id asked for at that position
    req = FetchRequest(topics=[FetchTopic(topic_id=A, partitions=[FetchPartition(partition=0)])])
    resp = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic_id=UUID(int=0),
                partitions=[PartitionData(partition_index=0, error_code=ErrorCode.UNKNOWN_TOPIC_ID)],
            )
        ]
    )
    OBSERVERS[ApiKey.FETCH](cache, 13, resp, req)
    assert cache.cached(A) is None
    assert A.int in cache.negative
