"""The audit log's straight-line walkers (audit_walk.py) give the very events the decoder path gives.

Each case builds an event twice, with the walkers and with them switched off (the decoder path,
which the walkers replaced for whole Produce, Fetch and Metadata frames), and compares the JSON
lines byte for byte. Frames: every Produce, Fetch and Metadata exchange of the recorded corpus
(confluent-kafka, aiokafka and kafka-python against Tansu: /work/shared/corpus-tansu), frames
encoded by kgate's codec at every version with names, ids, errors and several topics, and
truncated frames (which the walkers must refuse, so that the decoder path decides).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from support.wire import record_batch

from kgate.api import ConnectionInfo
from kgate.codec.generated.data.fetch import (
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from kgate.codec.generated.data.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kgate.codec.generated.data.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from kgate.filters.builtin.audit import event as audit_event
from kgate.filters.builtin.audit.event import Captured, event_line, topic_ids_of
from kgate.proxy.sansio.exchange import Exchange
from kgate.testing.frames import request_bytes, response_bytes

CORPUS = Path("/work/shared/corpus-tansu")
INFO = ConnectionInfo("10.0.0.7:53122", "default", "from-info", "User:alice")
T1 = UUID("01a1ffc8-d3c9-7c02-9b8f-f9952968847d")
T2 = UUID("11111111-2222-3333-4444-555555555555")
NAMES: dict[UUID, Any] = {T1: "orders", T2: "payments"}


def _captured(
    key: int, version: int, req: bytes, answer: Any, answer_bytes: int | None, piece: int = 0, size: int = 0
) -> Captured:
    """An exchange as the core reports it; ``piece``: the request streamed through in pieces of
    that size (as a Produce larger than one read does), ``size``: its size on the wire when the
    connection closed before all of it went."""
    ex = Exchange(int.from_bytes(req[8:12], "big") if len(req) >= 12 else 0, key, version)
    view = memoryview(req)
    ex.t0_ns, ex.req, ex.req_bytes = 1_000_000_000, view, size or len(req)
    if piece:
        ex.req = [view[i : i + piece] for i in range(0, len(req), piece)]
    return Captured(ex, INFO, answer, answer_bytes, 1_000_400_000)


def _line(make: Any, walkers: bool, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setattr(audit_event, "_WALKED", audit_event._WALKED if walkers else frozenset())
    c = make()
    names = {tid: NAMES.get(tid, "resolved-" + str(tid)) for tid in topic_ids_of(c)}
    return event_line(c, instance="i-1", cluster="default", wall_offset_ns=0, names=names)


def _same(make: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Build the event both ways; assert the lines are equal; return the event."""
    walked = _line(make, True, monkeypatch)
    decoded = _line(make, False, monkeypatch)
    assert walked == decoded
    return json.loads(walked)  # type: ignore[no-any-return]


def _corpus_pairs() -> list[tuple[str, int, int, bytes, bytes | None]]:
    rows = list(csv.DictReader((CORPUS / "index.csv").open()))
    answers = {(r["conn"], r["correlation_id"]): r for r in rows if r["direction"] == "resp"}
    out = []
    for r in rows:
        if r["direction"] != "req" or r["api_key"] not in ("0", "1", "3"):
            continue
        resp = answers.get((r["conn"], r["correlation_id"]))
        out.append(
            (
                r["file"],
                int(r["api_key"]),
                int(r["api_version"]),
                (CORPUS / r["file"]).read_bytes(),
                (CORPUS / resp["file"]).read_bytes() if resp is not None else None,
            )
        )
    return out


PAIRS = _corpus_pairs() if (CORPUS / "index.csv").exists() else []


@pytest.mark.skipif(not PAIRS, reason=f"the recorded frame corpus is not at {CORPUS}")
def test_corpus_exchanges_give_the_same_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every recorded Produce/Fetch/Metadata exchange: whole, streamed in pieces, unanswered."""
    seen: set[int] = set()
    walked_any = 0
    for _name, key, version, req, resp in PAIRS:
        seen.add(key)
        answers: list[tuple[Any, int | None]] = [(None, None)]
        if resp is not None:
            answers += [
                (memoryview(resp), len(resp)),
                ([memoryview(resp)[i : i + 4096] for i in range(0, len(resp), 4096)], len(resp)),
            ]
        for answer, size in answers:

            def make(
                key: int = key, version: int = version, req: bytes = req, answer: Any = answer, size: int | None = size
            ) -> Captured:
                return _captured(key, version, req, list(answer) if isinstance(answer, list) else answer, size)

            event = _same(make, monkeypatch)
            assert event["api"]["key"] == key
            if isinstance(answer, memoryview):  # whole: walked, unless a Metadata asking for every topic
                c = make()
                walked = audit_event._walked(c, True) is not None
                assert walked != (key == 3 and audit_event._asks_no_topic(c))
                walked_any += walked
        if key == 0 and resp is not None:  # the request streamed through kgate in pieces
            for piece in (64, 100, 4096):  # the core gives the header whole in the first piece

                def cut(version: int = version, req: bytes = req, resp: bytes = resp, piece: int = piece) -> Captured:
                    return _captured(0, version, req, memoryview(resp), len(resp), piece)

                assert _same(cut, monkeypatch)["topics"] == event["topics"]
    assert seen == {0, 1, 3}
    assert walked_any >= 30  # the walkers built these events themselves, not the decoder path


def _produce(version: int) -> tuple[bytes, bytes]:
    by_id = version >= 13

    def topic(name: str, tid: UUID, parts: dict[int, list[bytes] | None]) -> TopicProduceData:
        return TopicProduceData(
            name="" if by_id else name,
            topic_id=tid if by_id else UUID(int=0),
            partition_data=[
                PartitionProduceData(index=i, records=record_batch(v) if v is not None else None)
                for i, v in parts.items()
            ],
        )

    req = ProduceRequest(
        transactional_id="tx-1" if version >= 3 else None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            topic("orders", T1, {0: [b"a", b"bb"], 1: [b"c"], 2: None}),
            topic("payments", T2, {0: [b"x" * 300]}),
        ],
    )
    answer = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="" if by_id else n,
                topic_id=t if by_id else UUID(int=0),
                partition_responses=[PartitionProduceResponse(index=i, error_code=code) for i, code in codes],
            )
            for n, t, codes in (("payments", T2, [(0, 0)]), ("orders", T1, [(0, 0), (1, 6), (2, 6)]))
        ]
    )
    return request_bytes(0, version, req, correlation_id=7), response_bytes(0, version, answer, correlation_id=7)


def _fetch(version: int) -> tuple[bytes, bytes]:
    by_id = version >= 13
    req = FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic="" if by_id else n,
                topic_id=t if by_id else UUID(int=0),
                partitions=[FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in range(k)],
            )
            for n, t, k in (("orders", T1, 2), ("payments", T2, 1))
        ],
        rack_id="r1",
    )
    answer = FetchResponse(
        error_code=0,
        responses=[
            FetchableTopicResponse(
                topic="" if by_id else "orders",
                topic_id=T1 if by_id else UUID(int=0),
                partitions=[
                    PartitionData(partition_index=0, error_code=0, records=record_batch([b"a", b"b", b"c"])),
                    PartitionData(partition_index=1, error_code=75, records=None),
                ],
            ),
            FetchableTopicResponse(
                topic="" if by_id else "payments",
                topic_id=T2 if by_id else UUID(int=0),
                partitions=[PartitionData(partition_index=0, error_code=0, records=record_batch([b"y" * 50]))],
            ),
        ],
    )
    return request_bytes(1, version, req, correlation_id=9), response_bytes(1, version, answer, correlation_id=9)


def _metadata(version: int) -> tuple[bytes, bytes]:
    ids = version >= 10
    req = MetadataRequest(
        topics=[
            MetadataRequestTopic(name="orders", topic_id=UUID(int=0)),
            MetadataRequestTopic(name=None if ids else "payments", topic_id=T2 if ids else UUID(int=0)),
            MetadataRequestTopic(name="gone", topic_id=UUID(int=0)),
        ]
    )
    answer = MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=1, host="kgate", port=9092, rack="r1")],
        cluster_id="c-1",
        controller_id=1,
        topics=[
            MetadataResponseTopic(
                error_code=0,
                name="orders",
                topic_id=T1 if ids else UUID(int=0),
                partitions=[
                    MetadataResponsePartition(
                        error_code=0, partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1]
                    ),
                    MetadataResponsePartition(
                        error_code=9, partition_index=1, leader_id=1, replica_nodes=[1], isr_nodes=[]
                    ),
                ],
            ),
            MetadataResponseTopic(error_code=0, name="payments", topic_id=T2 if ids else UUID(int=0), partitions=[]),
            MetadataResponseTopic(error_code=3, name="gone", topic_id=UUID(int=0), partitions=[]),
        ],
    )
    return request_bytes(3, version, req, correlation_id=11), response_bytes(3, version, answer, correlation_id=11)


CASES = [("produce", 0, v, _produce) for v in range(3, 14)]
CASES += [("fetch", 1, v, _fetch) for v in range(4, 19)]
CASES += [("metadata", 3, v, _metadata) for v in range(1, 14)]


@pytest.mark.parametrize(("what", "key", "version", "frames"), CASES, ids=[f"{c[0]}-v{c[2]}" for c in CASES])
def test_every_version_gives_the_same_event(
    what: str, key: int, version: int, frames: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    req, answer = frames(version)
    assert audit_event._walked(_captured(key, version, req, memoryview(answer), len(answer)), True) is not None
    event = _same(lambda: _captured(key, version, req, memoryview(answer), len(answer)), monkeypatch)
    # the facts themselves, so that two equally wrong paths could not pass
    by_name = {t["name"]: t for t in event["topics"]}
    if what == "produce":
        assert by_name["orders"]["partitions"] == 3
        assert by_name["orders"]["records"] == 3
        assert by_name["orders"]["error_codes"] == [0, 6]
        assert event["error_code"] == 6
        assert by_name["payments"]["bytes"] == len(record_batch([b"x" * 300]))
    elif what == "fetch":
        assert by_name["orders"]["partitions"] == 2
        assert by_name["orders"]["records"] == 3
        assert by_name["orders"]["error_codes"] == [0, 75]
        assert by_name["payments"]["records"] == 1
    else:
        assert by_name["orders"]["error_codes"] == [0, 9]
        assert by_name["gone"]["error_codes"] == [3]
        assert by_name["payments"]["name_status"] == ("resolved" if version >= 10 else "given")
    assert event["client"]["id"] == "test-client"  # parsed from the request header, not the connection's
    if what == "produce":  # the same request streamed through kgate in pieces, whole or cut short
        for piece in (40, 100):

            def pieces(piece: int = piece) -> Captured:
                return _captured(key, version, req, memoryview(answer), len(answer), piece)

            def short(piece: int = piece) -> Captured:  # the connection closed 30 bytes before its end
                return _captured(key, version, req[:-30], None, None, piece, len(req))

            assert _same(pieces, monkeypatch)["topics"] == event["topics"]
            assert (audit_event._walked(pieces(), True) is not None) == (version >= 9)  # walked in place from v9
            _same(short, monkeypatch)


@pytest.mark.parametrize(("what", "key", "version", "frames"), CASES[::3], ids=[f"{c[0]}-v{c[2]}" for c in CASES[::3]])
def test_truncated_frames_are_left_to_the_decoder_path(
    what: str, key: int, version: int, frames: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame cut anywhere (its size still claiming it whole) gives the decoder path's event."""
    req, answer = frames(version)
    for cut in range(12, len(req), max(1, len(req) // 40)):
        short = req[:cut]
        _same(lambda short=short: _captured(key, version, short, memoryview(answer), len(answer)), monkeypatch)
    for cut in range(4, len(answer), max(1, len(answer) // 40)):
        short = answer[:cut]
        _same(lambda short=short: _captured(key, version, req, memoryview(short), len(short)), monkeypatch)


@pytest.mark.parametrize("batches", [1, 256, 257, 2200])
def test_every_batch_counted_in_place_and_whole(batches: int) -> None:
    """Any number of batches is counted exactly (the count once stopped at 256 and became null), whether
    the record set is whole or in pieces; a trailing partial batch (a trimmed Fetch answer) is not counted."""
    from kgate.filters.builtin.audit.wire import Chunks, count_records

    data = b"".join(record_batch([b"r", b"s"]) for _ in range(batches))
    assert count_records(data, 0, len(data)) == 2 * batches
    view = memoryview(data)
    assert count_records(Chunks([view[i : i + 1000] for i in range(0, len(data), 1000)]), 0, len(data)) == 2 * batches
    partial = data + record_batch([b"t"] * 5)[:70]  # header whole, records cut off
    assert count_records(partial, 0, len(partial)) == 2 * batches
    pv = memoryview(partial)
    assert count_records(Chunks([pv[i : i + 333] for i in range(0, len(partial), 333)]), 0, len(partial)) == 2 * batches


def test_control_batches_and_legacy_messages() -> None:
    """Control batches (transaction markers) are not records an application gets: not counted. An
    uncompressed legacy message counts one; a compressed legacy wrapper cannot be counted from its
    header (-1, written as null)."""
    import struct
    import zlib

    from kgate.filters.builtin.audit.wire import CONTROL, count_records

    marker = bytearray(record_batch([b"m"]))
    marker[22] |= CONTROL  # attributes (int16 at 21), low byte
    data = record_batch([b"a", b"b", b"c"]) + bytes(marker) + record_batch([b"d"])
    assert count_records(data, 0, len(data)) == 4

    def legacy(value: bytes, attributes: int = 0) -> bytes:
        body = bytes([0, attributes]) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
        return struct.pack(">qi", 0, 4 + len(body)) + struct.pack(">I", zlib.crc32(body)) + body

    plain = legacy(b"x") + legacy(b"yy")
    assert count_records(plain, 0, len(plain)) == 2
    gz = legacy(b"compressed", attributes=1)
    assert count_records(gz, 0, len(gz)) == -1
