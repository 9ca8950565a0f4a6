"""The marks store against a scripted cluster: reading, retrying writes, giving up.

A fake ``ClusterServices`` answers Metadata, CreateTopics, Produce and Fetch the way a broker
does (one partition, records appended as real magic-2 batches), with errors injected by the test.
The end-to-end tests cover the same paths against Tansu and Kafka; these pin the retry rules.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any
from uuid import UUID

import pytest

from kgate.api import ApiKey, ErrorCode, TopicNameError
from kgate.codec.generated.admin.create_topics import CreatableTopicResult, CreateTopicsResponse
from kgate.codec.generated.data.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from kgate.codec.generated.data.metadata import MetadataResponse, MetadataResponsePartition, MetadataResponseTopic
from kgate.codec.generated.data.produce import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from kgate.codec.records import decode_batches
from kgate.filters.builtin.internal_topics.marks import MarksStore, MarkWriteError, mark_key, mark_value

TOPIC_ID = uuid.uuid4()


class FakeCluster:
    """One broker holding the marks topic's single partition as a list of batches."""

    virtual_cluster = "test"

    def __init__(self, exists: bool = True) -> None:
        self.exists = exists
        self.batches: list[tuple[int, bytes]] = []  # (base offset, batch bytes)
        self.produce_errors: list[int] = []  # the next Produce answers, in order
        self.fetch_errors: list[int] = []
        self.calls: list[int] = []
        self.unknown_ids: set[UUID] = set()

    @property
    def end(self) -> int:
        return sum(len(decode_batches(b)) for _o, b in self.batches)

    def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        from kgate.codec.records import encode_batch

        self.batches.append((self.end, encode_batch(records, timestamp_ms=1, base_offset=self.end)))

    async def send_request(
        self,
        api_key: int,
        message: Any,
        version: int | None = None,
        *,
        max_version: int | None = None,
        node_id: int | None = None,
    ) -> Any:
        self.calls.append(api_key)
        if api_key == ApiKey.METADATA:
            if not self.exists:
                return MetadataResponse(
                    brokers=[],
                    topics=[
                        MetadataResponseTopic(
                            name=message.topics[0].name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, partitions=[]
                        )
                    ],
                )
            part = MetadataResponsePartition(partition_index=0, leader_id=1)
            return MetadataResponse(
                brokers=[],
                topics=[MetadataResponseTopic(name=message.topics[0].name, topic_id=TOPIC_ID, partitions=[part])],
            )
        if api_key == ApiKey.CREATE_TOPICS:
            self.exists = True
            return CreateTopicsResponse(topics=[CreatableTopicResult(name=message.topics[0].name)])
        if api_key == ApiKey.PRODUCE:
            code = self.produce_errors.pop(0) if self.produce_errors else 0
            if code == 0:
                batch = message.topic_data[0].partition_data[0].records
                self.append([(r.key, r.value) for r in decode_batches(batch)])
            answer = PartitionProduceResponse(index=0, error_code=code)
            return ProduceResponse(
                responses=[TopicProduceResponse(name=message.topic_data[0].name, partition_responses=[answer])]
            )
        if api_key == ApiKey.FETCH:
            code = self.fetch_errors.pop(0) if self.fetch_errors else 0
            offset = message.topics[0].partitions[0].fetch_offset
            data = b"".join(b for o, b in self.batches if o >= offset or o + len(decode_batches(b)) > offset)
            part = PartitionData(
                partition_index=0,
                error_code=code,
                high_watermark=self.end,
                log_start_offset=0,
                records=None if code else data,
            )
            return FetchResponse(responses=[FetchableTopicResponse(topic=message.topics[0].topic, partitions=[part])])
        raise AssertionError(f"unexpected api {api_key}")

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        return None

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        return {
            t: TopicNameError(ErrorCode.UNKNOWN_TOPIC_ID, "gone", False) if t in self.unknown_ids else "x"
            for t in topic_ids
        }


def _store(cluster: FakeCluster, **kw: Any) -> MarksStore:
    store = MarksStore(**kw)
    store._services = cluster  # started without the background task: the test drives it
    return store


async def test_reads_marks_and_tombstones_in_order_and_continues_after_the_last_batch() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    cluster = FakeCluster()
    cluster.append(
        [(mark_key(a), mark_value("connect-a", at_ms=1, by="x")), (mark_key(b), mark_value("b", at_ms=1, by="x"))]
    )
    cluster.append([(mark_key(b), None), (b"\x09junk", b"{}")])  # a tombstone; a record of an unknown format
    store = _store(cluster)
    await store._ensure_topic()
    assert store.topic_id == TOPIC_ID
    assert await store.poll_once() is False  # read something: ask again at once
    assert await store.poll_once() is True  # caught up with the high watermark
    assert store.table.by_id == {a: "connect-a"}
    assert store._position == 4


async def test_a_missing_marks_topic_is_created() -> None:
    cluster = FakeCluster(exists=False)
    store = _store(cluster)
    await store._ensure_topic()
    assert ApiKey.CREATE_TOPICS in cluster.calls
    assert cluster.exists


async def test_a_write_is_retried_through_a_leader_change_and_applied_locally() -> None:
    cluster = FakeCluster()
    cluster.produce_errors = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT]
    store = _store(cluster)
    tid = uuid.uuid4()
    await store.write([(tid, "connect-configs")])
    assert store.table.by_id == {tid: "connect-configs"}  # honoured here at once
    assert cluster.calls.count(ApiKey.PRODUCE) == 3
    assert cluster.calls.count(ApiKey.METADATA) >= 2  # the leader looked up again after the error


async def test_a_write_refused_for_good_fails_at_once() -> None:
    cluster = FakeCluster()
    cluster.produce_errors = [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    store = _store(cluster, write_timeout_s=30)
    with pytest.raises(MarkWriteError, match="error 29"):
        await store.write([(uuid.uuid4(), "x")])
    assert cluster.calls.count(ApiKey.PRODUCE) == 1


async def test_a_write_that_keeps_failing_gives_up_after_the_timeout() -> None:
    cluster = FakeCluster()
    cluster.produce_errors = [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 1000
    store = _store(cluster, write_timeout_s=0.3)
    with pytest.raises(MarkWriteError, match=r"failed for 0\.3s"):
        await store.write([(uuid.uuid4(), "x")])
    assert store.table.by_id == {}


async def test_dead_marks_are_removed_but_fresh_ones_are_kept() -> None:
    dead, fresh = uuid.uuid4(), uuid.uuid4()
    cluster = FakeCluster()
    cluster.append([(mark_key(dead), mark_value("gone", at_ms=1, by="x"))])  # record timestamp 1: old
    cluster.unknown_ids = {dead, fresh}
    store = _store(cluster)
    await store._ensure_topic()
    await store.poll_once()
    await store.write([(fresh, "just-created")])  # written now: its topic may not be visible everywhere yet
    await store.forget_dead()
    assert store.table.by_id == {fresh: "just-created"}
    assert decode_batches(cluster.batches[-1][1])[0].value is None  # the tombstone for the dead one


async def test_close_stops_the_reader_even_when_a_request_swallows_the_cancel() -> None:
    """Python 3.11's ``wait_for`` can swallow a cancellation that meets a completing request; the
    reader must stop anyway, or kgate's shutdown waits for it forever. Here every poll swallows
    the cancel and there is always more to read (the reader never sleeps)."""
    import asyncio

    store = MarksStore(poll_interval_s=0.05)

    async def swallowing_poll(max_wait_ms: int = 0) -> bool:
        try:
            await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            pass  # what wait_for does when the inner request completed first
        return False

    store.poll_once = swallowing_poll  # type: ignore[method-assign]
    store._partition = object()  # type: ignore[assignment]  # located: the reader goes straight to polling
    store.start(FakeCluster())
    await asyncio.sleep(0.05)
    await asyncio.wait_for(store.close(), 5)
