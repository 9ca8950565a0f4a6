"""The fast per-topic byte walkers (filters/builtin/audit/wire.py, used by the per-topic metrics on
the event loop) agree with the generic walkers the audit log uses, over every Produce and Fetch
version kgate handles, and refuse a frame cut short instead of reading past it."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest
from support.wire import record_batch

from kgate.codec import api
from kgate.codec.generated.api_keys import FETCH, PRODUCE
from kgate.codec.generated.data.fetch import AbortedTransaction, FetchableTopicResponse, FetchResponse, PartitionData
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.filters.builtin.audit.wire import (
    Chunks,
    WireError,
    body_offset,
    fetch_response_topics,
    fetch_topic_bytes,
    produce_request_topics,
    produce_topic_bytes,
    request_body_offset,
)
from kgate.testing.frames import request_bytes, response_bytes

A, B = record_batch([b"a" * 700]), record_batch([b"b" * 30] * 4)
IDS = [uuid4(), uuid4(), uuid4()]


def _key(version: int, i: int, name: str) -> dict[str, object]:
    return {"topic_id": IDS[i]} if version >= 13 else {"name": name}


def _produce(version: int, client_id: str | None = "c") -> bytes:
    data = [
        TopicProduceData(
            **(_key(version, 0, "orders")),
            partition_data=[PartitionProduceData(index=0, records=A), PartitionProduceData(index=1, records=B)],
        ),
        TopicProduceData(**(_key(version, 1, "ü-topic")), partition_data=[PartitionProduceData(index=0, records=None)]),
        TopicProduceData(**(_key(version, 2, "c")), partition_data=[]),
    ]
    msg = ProduceRequest(transactional_id="tx" if version >= 3 else None, acks=-1, timeout_ms=5, topic_data=data)
    return request_bytes(PRODUCE, version, msg, correlation_id=3, client_id=client_id)


def _fetch(version: int) -> bytes:
    def t(i: int, name: str, parts: list[PartitionData]) -> FetchableTopicResponse:
        key = {"topic_id": IDS[i]} if version >= 13 else {"topic": name}
        return FetchableTopicResponse(**key, partitions=parts)

    aborted = [AbortedTransaction(producer_id=7, first_offset=1)]
    msg = FetchResponse(
        responses=[
            t(
                0,
                "orders",
                [
                    PartitionData(partition_index=0, records=A, aborted_transactions=aborted),
                    PartitionData(partition_index=1, records=B),
                ],
            ),
            t(1, "empty", [PartitionData(partition_index=0, records=None, error_code=6)]),
            t(2, "none", []),
        ]
    )
    return response_bytes(FETCH, version, msg, correlation_id=3)


@pytest.mark.parametrize("version", range(3, api.API_INFO[0].max_version + 1))
@pytest.mark.parametrize("client_id", ["c", None, "x" * 300])
def test_produce_fast_walk_agrees(version: int, client_id: str | None) -> None:
    frame = _produce(version, client_id)
    body = request_body_offset(frame, api.request_header_version(PRODUCE, version))
    assert body == request_body_offset(Chunks([frame[:13], frame[13:]]), api.request_header_version(PRODUCE, version))
    generic = [(f[0], f[2]) for f in produce_request_topics(frame, body, version)]
    fast = produce_topic_bytes(memoryview(frame), body, version)
    assert fast == generic
    keys: list[str | UUID] = IDS if version >= 13 else ["orders", "ü-topic", "c"]  # type: ignore[assignment]
    assert fast == [(keys[0], len(A) + len(B)), (keys[1], 0), (keys[2], 0)]
    with pytest.raises(WireError):
        produce_topic_bytes(frame[: len(frame) - 50], body, version)


@pytest.mark.parametrize("version", range(4, api.API_INFO[1].max_version + 1))
def test_fetch_fast_walk_agrees(version: int) -> None:
    frame = _fetch(version)
    hv = api.response_header_version(FETCH, version)
    body = body_offset(frame, hv)
    assert body == body_offset(Chunks([frame[:5], frame[5:]]), hv)
    generic = [(f[0], f[2]) for f in fetch_response_topics(frame, body, version)[1]]
    fast = fetch_topic_bytes(frame, body, version)
    assert fast == generic
    assert fast[0][1] == len(A) + len(B)
    assert fast[1][1] == 0
    assert len(fast) == 3
    with pytest.raises(WireError):
        fetch_topic_bytes(frame[: len(frame) - 50], body, version)
