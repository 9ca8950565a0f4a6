"""A Produce whose answer failed partitions: the audit event says what the broker did not store.

A retried batch (NOT_LEADER, then stored) or a refused one (a filter's error 29) was billed as
produced by ``kgate report`` (75 records billed for 50 stored, found by a new-user review): the
event now carries ``failed_bytes`` / ``failed_records`` per topic whose partitions failed, exact
per partition, on every path an event is built on (walked, decoded, streamed in pieces).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from support.wire import record_batch

from kgate.api import ConnectionInfo
from kgate.codec.generated.api_keys import PRODUCE
from kgate.codec.generated.data.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from kgate.filters.builtin.audit import event
from kgate.filters.builtin.audit.event import Captured, build_event
from kgate.proxy.sansio.exchange import Exchange
from kgate.testing.frames import request_bytes, response_bytes

pytestmark = pytest.mark.unit

INFO = ConnectionInfo("10.0.0.7:53122", "default", None, "User:alice")
#: topic -> per partition: (record values, the answer's error code)
Plan = dict[str, list[tuple[list[bytes], int]]]


def _frames(version: int, plan: Plan) -> tuple[bytes, bytes, ProduceRequest]:
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name=name,
                partition_data=[
                    PartitionProduceData(index=i, records=record_batch(v)) for i, (v, _c) in enumerate(parts)
                ],
            )
            for name, parts in plan.items()
        ],
    )
    resp = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=name,
                partition_responses=[
                    PartitionProduceResponse(index=i, error_code=code, base_offset=0)
                    for i, (_v, code) in enumerate(parts)
                ],
            )
            for name, parts in plan.items()
        ]
    )
    return (
        request_bytes(PRODUCE, version, req, correlation_id=7),
        response_bytes(PRODUCE, version, resp, correlation_id=7),
        req,
    )


def _event(version: int, plan: Plan, how: str = "walked") -> dict[str, Any]:
    req, resp, decoded = _frames(version, plan)
    ex = Exchange(7, PRODUCE, version)
    ex.t0_ns, ex.req_bytes = 1_000_000_000, len(req)
    ex.req = memoryview(req)
    if how == "decoded":  # a hook decoded the request: the event reads the decoded one
        ex.request = decoded
    elif how == "streamed":  # forwarded in pieces, never joined on the way
        ex.req = [memoryview(req)[:40], memoryview(req)[40:]]
    c = Captured(ex, INFO, memoryview(resp), len(resp), ex.t0_ns + 1000)
    return build_event(c, instance="i-1", cluster="default", wall_offset_ns=0, names={})


def _topic(e: dict[str, Any], name: str) -> dict[str, Any]:
    (t,) = [t for t in e["topics"] if t["name"] == name]
    return t


@pytest.mark.parametrize("how", ["walked", "decoded", "streamed"])
@pytest.mark.parametrize("version", [3, 9, 12])
def test_failed_partitions_are_counted_per_partition(version: int, how: str) -> None:
    plan: Plan = {
        "stored": [([b"a" * 10, b"b"], 0), ([b"c"], 0)],
        "refused": [([b"x" * 7], 29), ([b"y", b"z"], 29)],
        "moved": [([b"p" * 5, b"q", b"r"], 0), ([b"s" * 3, b"t"], 6), ([b"u"], 0)],
    }
    e = _event(version, plan, how)
    stored, refused, moved = _topic(e, "stored"), _topic(e, "refused"), _topic(e, "moved")
    assert "failed_bytes" not in stored
    assert "failed_records" not in stored
    assert refused["error_codes"] == [29]
    assert (refused["failed_bytes"], refused["failed_records"]) == (refused["bytes"], 3)
    # only the second partition of "moved" failed: its one batch of two records
    assert moved["records"] == 6
    assert (moved["failed_bytes"], moved["failed_records"]) == (len(record_batch([b"s" * 3, b"t"])), 2)


def test_an_all_stored_produce_event_is_unchanged() -> None:
    e = _event(9, {"t": [([b"v"], 0), ([b"w"], 0)]})
    assert set(e["topics"][0]) == {"id", "name", "name_status", "partitions", "bytes", "records", "error_codes"}


def test_a_request_kgate_never_read_has_nothing_to_take_out() -> None:
    """A refused request whose bytes kgate did not keep (pieces that do not add up to the frame):
    nothing sent is known, so nothing is billed and no failed fields are written."""
    req, resp, _decoded = _frames(9, {"t": [([b"v"], 0), ([b"w"], 6)]})
    ex = Exchange(7, PRODUCE, 9)
    ex.t0_ns, ex.req_bytes = 1_000_000_000, len(req)
    ex.req = [memoryview(req)[:40]]
    c = Captured(ex, INFO, memoryview(resp), len(resp), ex.t0_ns)
    t = build_event(c, instance="i", cluster="c", wall_offset_ns=0, names={})["topics"][0]
    assert (t["bytes"], t["records"], t["error_codes"]) == (None, None, [0, 6])
    assert "failed_bytes" not in t


def test_partitions_that_cannot_be_matched_keep_the_bytes_and_mark_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mixed answer kgate cannot match partition by partition (the decoder refusing a frame the
    walkers read: not seen, but not guessed either) bills the bytes sent and leaves the records
    unknown: null, which the report marks, never a silent count."""
    monkeypatch.setattr(event, "_failed_partitions", lambda _c: None)
    e = _event(9, {"t": [([b"v"], 0), ([b"w"], 6)]})
    t = e["topics"][0]
    assert (t["failed_bytes"], t["failed_records"]) == (0, None)


def test_acks0_has_no_failed_fields() -> None:
    req, _resp, _d = _frames(9, {"t": [([b"v"], 0)]})
    ex = Exchange(7, PRODUCE, 9)
    ex.t0_ns, ex.req, ex.req_bytes = 1_000_000_000, memoryview(req), len(req)
    e = build_event(Captured(ex, INFO, None, None, ex.t0_ns), instance="i", cluster="c", wall_offset_ns=0, names={})
    assert "failed_bytes" not in e["topics"][0]


@pytest.mark.parametrize("how", ["walked", "decoded"])
def test_produce_v13_by_id_counts_failed_partitions(how: str) -> None:
    """Kafka 4.1+ clients produce by topic id (Produce v13): matched by id."""
    tid = UUID("0f0e0d0c-0b0a-0908-0706-050403020100")
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                topic_id=tid,
                partition_data=[
                    PartitionProduceData(index=0, records=record_batch([b"a", b"b"])),
                    PartitionProduceData(index=1, records=record_batch([b"c"])),
                ],
            )
        ],
    )
    resp = ProduceResponse(
        responses=[
            TopicProduceResponse(
                topic_id=tid,
                partition_responses=[
                    PartitionProduceResponse(index=0, error_code=6, base_offset=-1),
                    PartitionProduceResponse(index=1, error_code=0, base_offset=0),
                ],
            )
        ]
    )
    raw, answer = request_bytes(PRODUCE, 13, req, correlation_id=7), response_bytes(PRODUCE, 13, resp, correlation_id=7)
    ex = Exchange(7, PRODUCE, 13)
    ex.t0_ns, ex.req, ex.req_bytes = 1_000_000_000, memoryview(raw), len(raw)
    if how == "decoded":
        ex.request = req
    c = Captured(ex, INFO, memoryview(answer), len(answer), ex.t0_ns)
    e = build_event(c, instance="i", cluster="c", wall_offset_ns=0, names={tid: "orders"})
    t = e["topics"][0]
    assert (t["name"], t["records"]) == ("orders", 3)
    assert (t["failed_bytes"], t["failed_records"]) == (len(record_batch([b"a", b"b"])), 2)
