"""Every answer kgate makes itself looks, field by field, like the one Apache Kafka sends (issue 12).

kgate answers some requests (or partitions of them) itself: a policy refusal, an id it cannot
resolve, a filter that timed out. Clients treat those answers exactly as they treat a broker's,
so a field Kafka never sends that way (a null ``records`` where Kafka sends empty ones) breaks
them: librdkafka rejected the whole Fetch response and fetched again at once, ~1,000 times in 5 s.

Each test asks the real Kafka 4.3.1 broker (``kafka`` fixture) for the same condition directly and
compares its decoded answer with what ``filters.errors.error_response`` builds for the same request,
with the error code Kafka used. Fields that legitimately differ are listed with their reason in
``IGNORED``; anything else that differs fails the test, so a new synthesized shape cannot drift.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from typing import Any

import pytest

from kgate.api import error_response
from kgate.codec.generated.api_keys import (
    DELETE_RECORDS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_HEARTBEAT,
)
from kgate.codec.generated.data import delete_records as dr
from kgate.codec.generated.data import fetch as fe
from kgate.codec.generated.data import list_offsets as lo
from kgate.codec.generated.data import metadata as md
from kgate.codec.generated.data import offset_for_leader_epoch as ofle
from kgate.codec.generated.data import produce as pr
from kgate.codec.generated.share import share_acknowledge as sa
from kgate.codec.generated.share import share_fetch as sf
from kgate.codec.schema import Struct
from kgate.proxy.carrier.upstream_client import UpstreamClient

ZERO = uuid.UUID(int=0)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def fetch_request(topic_id: uuid.UUID, partitions: list[int], name: str = "") -> fe.FetchRequest:
    parts = [fe.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in partitions]
    return fe.FetchRequest(
        replica_id=-1,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[fe.FetchTopic(topic=name, topic_id=topic_id, partitions=parts)],
    )


#: (field name) -> why it may differ between Kafka's answer and kgate's
IGNORED = {
    "throttle_time_ms": "quota throttling: the broker's own state",
    "session_id": "a Fetch session is the broker's; kgate's answers open none (0)",
    "topic_authorized_operations": "only filled when the client asks (Metadata v8+); Kafka sends its -2^31 default",
    "cluster_id": "the broker's identity",
    "controller_id": "the broker's identity",
    "brokers": "the broker list is the broker's (and kgate rewrites it)",
    "cluster_authorized_operations": "the broker's state",
}


def diff(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Field paths where two decoded messages differ (memoryviews compared as bytes)."""
    if isinstance(ours, Struct) and isinstance(theirs, Struct):
        out: list[str] = []
        for f in type(ours)._FIELDS:  # type: ignore[attr-defined]
            if f.name in IGNORED:
                continue
            out += diff(getattr(ours, f.name), getattr(theirs, f.name), f"{path}.{f.name}")
        return out
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return [f"{path}: {len(ours)} entries vs Kafka's {len(theirs)}"]
        return [d for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) for d in diff(a, b, f"{path}[{i}]")]
    if isinstance(ours, memoryview | bytes | bytearray) or isinstance(theirs, memoryview | bytes | bytearray):
        a = None if ours is None else bytes(ours)
        b = None if theirs is None else bytes(theirs)
        return [] if a == b else [f"{path}: {a!r} vs Kafka's {b!r}"]
    return [] if ours == theirs else [f"{path}: {ours!r} vs Kafka's {theirs!r}"]


def same_shape(api_key: int, version: int, request: Any, kafkas: Any, code: int) -> list[str]:
    """Re-decode both through the wire (what a client sees) and diff them."""
    from kgate.codec import api

    ours = error_response(api_key, version, request, code)
    assert ours is not None, "kgate knows no error shape for this api"
    ours = api.decode_response(api_key, version, memoryview(ours.encode(version)))
    theirs = api.decode_response(api_key, version, memoryview(kafkas.encode(version)))
    return diff(ours, theirs)


@pytest.fixture
async def kc(kafka):
    c = UpstreamClient(lambda: [("127.0.0.1", kafka.port)], client_id="shape-test")
    yield c
    c.close()


@pytest.mark.parametrize("version", [13, 15, 16, 17])
async def test_fetch_by_unknown_topic_id(kc, version: int) -> None:
    req = fetch_request(uuid.uuid4(), [0, 1])
    _v, resp = await kc.request(FETCH, req, version)
    codes = {p.error_code for t in resp.responses for p in t.partitions}
    assert codes == {100}, codes  # UNKNOWN_TOPIC_ID
    assert all(p.records is not None for t in resp.responses for p in t.partitions)
    assert same_shape(FETCH, version, req, resp, 100) == []


def _raw_answer(port: int, api_key: int, version: int, request: Any) -> bytes:
    """Kafka's answer body as it came on the wire (its header cut off), not decoded."""
    from kgate.codec import api
    from kgate.testing.frames import request_bytes

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request_bytes(api_key, version, request, correlation_id=3))
        size = int.from_bytes(_recv(s, 4), "big")
        frame = _recv(s, size)
    return frame[4 + (1 if api.response_header_version(api_key, version) else 0) :]


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "Kafka closed the connection"
        buf += chunk
    return buf


@pytest.mark.parametrize("version", [12, 13, 16, 17, 18])
async def test_fetch_refusal_bytes_are_kafkas(kafka, version: int) -> None:
    """Byte for byte, not only decoded: a decoded answer cannot tell a tagged field that is absent
    from one present with its default, and clients can. librdkafka 2.16 takes a present
    ``node_endpoints`` (tag 0) and a partition's ``current_leader`` (tag 1) as leader hints
    even when they hold defaults, and crashed on such an answer for a topic it could not name
    (docs/compatibility.md). Kafka's answer has neither, and neither has kgate's."""
    by_id = version >= 13
    req = fetch_request(uuid.uuid4() if by_id else ZERO, [0, 1], "" if by_id else unique("no-such"))
    theirs = await asyncio.to_thread(_raw_answer, kafka.port, FETCH, version, req)
    code = 100 if by_id else 3
    ours = error_response(FETCH, version, req, code)
    assert ours is not None
    assert bytes(ours.encode(version)) == theirs


@pytest.mark.parametrize("version", [10, 12, 13])
async def test_produce_refusal_bytes_are_kafkas(kafka, version: int) -> None:
    """Produce v10+ carries leader hints too (a partition's tag 0, the body's tag 0): Kafka's refusal
    has none, byte for byte, and neither has kgate's."""
    by_id = version >= 13
    topic = pr.TopicProduceData(
        name="" if by_id else unique("no-such"),
        topic_id=uuid.uuid4() if by_id else ZERO,
        partition_data=[pr.PartitionProduceData(index=0, records=b"")],
    )
    req = pr.ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=None, topic_data=[topic])
    theirs = await asyncio.to_thread(_raw_answer, kafka.port, PRODUCE, version, req)
    ours = error_response(PRODUCE, version, req, 100 if by_id else 3)
    assert ours is not None
    assert bytes(ours.encode(version)) == theirs


@pytest.mark.parametrize("version", [4, 11, 12])
async def test_fetch_by_unknown_topic_name(kc, version: int) -> None:
    req = fetch_request(ZERO, [0], unique("no-such"))
    _v, resp = await kc.request(FETCH, req, version)
    codes = {p.error_code for t in resp.responses for p in t.partitions}
    assert codes == {3}, codes
    assert same_shape(FETCH, version, req, resp, 3) == []


@pytest.mark.parametrize("version", [3, 9, 12])
async def test_produce_to_unknown_topic(kc, version: int) -> None:
    req = pr.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        transactional_id=None,
        topic_data=[
            pr.TopicProduceData(name=unique("no-such"), partition_data=[pr.PartitionProduceData(index=0, records=b"")])
        ],
    )
    _v, resp = await kc.request(PRODUCE, req, version)
    codes = {p.error_code for t in resp.responses for p in t.partition_responses}
    assert codes == {3}, codes
    assert same_shape(PRODUCE, version, req, resp, 3) == []


@pytest.mark.parametrize("version", [1, 5, 9])
async def test_list_offsets_of_unknown_topic(kc, version: int) -> None:
    part = lo.ListOffsetsPartition(partition_index=0, timestamp=-1)
    req = lo.ListOffsetsRequest(replica_id=-1, topics=[lo.ListOffsetsTopic(name=unique("no-such"), partitions=[part])])
    _v, resp = await kc.request(LIST_OFFSETS, req, version)
    assert {p.error_code for t in resp.topics for p in t.partitions} == {3}
    assert same_shape(LIST_OFFSETS, version, req, resp, 3) == []


@pytest.mark.parametrize("version", [1, 4, 12])
async def test_metadata_of_unknown_topic(kc, version: int) -> None:
    name = unique("no-such")
    topics = [md.MetadataRequestTopic(name=name, topic_id=ZERO)]
    req = md.MetadataRequest(topics=topics, allow_auto_topic_creation=False)
    _v, resp = await kc.request(METADATA, req, version)
    assert [t.error_code for t in resp.topics] == [3]
    assert same_shape(METADATA, version, req, resp, 3) == []


async def test_delete_records_of_unknown_topic(kc) -> None:
    part = dr.DeleteRecordsPartition(partition_index=0, offset=0)
    topic = dr.DeleteRecordsTopic(name=unique("no-such"), partitions=[part])
    req = dr.DeleteRecordsRequest(timeout_ms=5000, topics=[topic])
    _v, resp = await kc.request(DELETE_RECORDS, req, 2)
    assert {p.error_code for t in resp.topics for p in t.partitions} == {3}
    assert same_shape(DELETE_RECORDS, 2, req, resp, 3) == []


async def test_offset_for_leader_epoch_of_unknown_topic(kc) -> None:
    req = ofle.OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            ofle.OffsetForLeaderTopic(
                topic=unique("no-such"),
                partitions=[ofle.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)],
            )
        ],
    )
    _v, resp = await kc.request(OFFSET_FOR_LEADER_EPOCH, req, 4)
    assert {p.error_code for t in resp.topics for p in t.partitions} == {3}
    assert same_shape(OFFSET_FOR_LEADER_EPOCH, 4, req, resp, 3) == []


@pytest.mark.parametrize("name", ["x", None], ids=["named", "id-only"])
@pytest.mark.parametrize("version", [10, 11])
async def test_metadata_v10_v11_by_topic_id(kc, version: int, name: str | None) -> None:
    """Ids are not allowed below v12: Kafka answers INVALID_REQUEST per topic (what topic-policy sends)."""
    topics = [md.MetadataRequestTopic(name=name, topic_id=uuid.uuid4())]
    req = md.MetadataRequest(topics=topics, allow_auto_topic_creation=False)
    _v, resp = await kc.request(METADATA, req, version)
    assert [t.error_code for t in resp.topics] == [42]
    assert same_shape(METADATA, version, req, resp, 42) == []


@pytest.mark.parametrize("version", [12, 13])
async def test_produce_by_unknown_topic_id(kc, version: int) -> None:
    """Produce v13 names topics by id only (Java 4.1+ producers): Kafka's answer to an unknown id
    is UNKNOWN_TOPIC_ID per partition, and kgate's refusal (topic-policy, an id it cannot resolve)
    has the same shape. v12 by name for contrast: UNKNOWN_TOPIC_OR_PARTITION."""
    by_id = version >= 13
    topic = pr.TopicProduceData(
        name="" if by_id else unique("no-such"),
        topic_id=uuid.uuid4() if by_id else ZERO,
        partition_data=[pr.PartitionProduceData(index=i, records=b"") for i in (0, 1, 2)],
    )
    req = pr.ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=None, topic_data=[topic])
    _v, resp = await kc.request(PRODUCE, req, version)
    code = 100 if by_id else 3
    assert {p.error_code for t in resp.responses for p in t.partition_responses} == {code}
    # Kafka lists an unknown topic's partitions in its hash map's order, kgate in the request's;
    # clients match them by index
    for t in resp.responses:
        t.partition_responses.sort(key=lambda p: p.index)
    assert same_shape(PRODUCE, version, req, resp, code) == []


#: ShareFetch / ShareAcknowledge top-level fields kgate cannot know, and why a refusal may differ
SHARE_IGNORED = {
    "acquisition_lock_timeout_ms": "the group's share.record.lock.duration.ms (Kafka: 30000); it bounds records "
    "acquired, and a refusal acquires none",
}


def _share_member() -> str:
    """A member id as a share consumer makes one: a random uuid in Kafka's base64 form."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


async def _share_member_of(kc: UpstreamClient, group: str) -> tuple[str, uuid.UUID]:
    """A member that joined ``group`` (ShareGroupHeartbeat) subscribed to a new one-partition topic,
    and the topic's id: Kafka 4.3.1 answers a ShareFetch naming an id it does not know with a
    top-level UNKNOWN_SERVER_ERROR (it logs "No share partition found"), so the per-partition
    refusal Kafka makes is for a partition the topic does not have."""
    from kgate.codec.generated.share import share_group_heartbeat as sh

    name = unique("share")
    topics = [md.MetadataRequestTopic(name=name, topic_id=ZERO)]
    for _ in range(50):  # auto-created on the first ask; the id is there once the topic is
        _v, meta = await kc.request(METADATA, md.MetadataRequest(topics=topics, allow_auto_topic_creation=True), 12)
        if meta.topics[0].error_code == 0 and meta.topics[0].topic_id.int:
            break
        await asyncio.sleep(0.1)
    member = _share_member()
    _v, hb = await kc.request(
        SHARE_GROUP_HEARTBEAT,
        sh.ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[name]),
        1,
    )
    assert hb.error_code == 0, hb
    return member, meta.topics[0].topic_id


@pytest.mark.parametrize("version", [1, 2])
async def test_share_fetch_refused_partition(kc, version: int) -> None:
    """ShareFetch (KIP-932) is by topic id only; a refusal kgate makes (topic-policy, authorizer)
    must look like Kafka's own per-partition refusal."""
    group = unique("share-g")
    member, topic_id = await _share_member_of(kc, group)
    topics = [sf.FetchTopic(topic_id=topic_id, partitions=[sf.FetchPartition(partition_index=p) for p in (7, 8)])]
    req = sf.ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=0,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=topics,
    )
    _v, resp = await kc.request(SHARE_FETCH, req, version)
    assert resp.error_code == 0, resp
    assert {p.error_code for t in resp.responses for p in t.partitions} == {3}, resp
    assert all(p.records is not None for t in resp.responses for p in t.partitions)
    for t in resp.responses:
        t.partitions.sort(key=lambda p: p.partition_index)
    problems = same_shape(SHARE_FETCH, version, req, resp, 3)
    assert [d for d in problems if d.split(":")[0].lstrip(".") not in SHARE_IGNORED] == []


@pytest.mark.parametrize("version", [1, 2])
async def test_share_acknowledge_of_unknown_topic_id(kc, version: int) -> None:
    """ShareAcknowledge in an open share session naming an id Kafka does not know: UNKNOWN_TOPIC_ID
    per partition, the shape of kgate's refusals."""
    group = unique("share-g")
    member, topic_id = await _share_member_of(kc, group)
    part0 = [sf.FetchTopic(topic_id=topic_id, partitions=[sf.FetchPartition(partition_index=0)])]
    fetch = sf.ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=0,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=part0,
    )
    _v, opened = await kc.request(SHARE_FETCH, fetch, version)  # opens the share session (epoch 0)
    assert opened.error_code == 0, opened
    batch = sa.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])
    topics = [
        sa.AcknowledgeTopic(
            topic_id=uuid.uuid4(),
            partitions=[sa.AcknowledgePartition(partition_index=i, acknowledgement_batches=[batch]) for i in (0, 1)],
        )
    ]
    req = sa.ShareAcknowledgeRequest(group_id=group, member_id=member, share_session_epoch=1, topics=topics)
    _v, resp = await kc.request(SHARE_ACKNOWLEDGE, req, version)
    assert resp.error_code == 0, resp
    assert {p.error_code for t in resp.responses for p in t.partitions} == {100}, resp
    for t in resp.responses:
        t.partitions.sort(key=lambda p: p.partition_index)
    problems = same_shape(SHARE_ACKNOWLEDGE, version, req, resp, 100)
    assert [d for d in problems if d.split(":")[0].lstrip(".") not in SHARE_IGNORED] == []
