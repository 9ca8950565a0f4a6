"""Peeked Produce: a single-topic request a filter allows streams on before it has fully arrived.

The connection core runs with a recorder for its actions (no sockets, tests/support/core_driver.py): these tests are
about which bytes leave when, which a socket test could not observe reliably. End to end the
same path runs under the real-client tests with topic-policy and in the benchmark.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from support.core_driver import Sink, make_core

from kgate.api import FORWARD, ApiKey, Filter, FilterContext, on_request
from kgate.codec import api
from kgate.codec.generated.data import produce as pm
from kgate.codec.headers import HeaderError, parse_request_header, request_frame
from kgate.codec.peek import produce_prefix
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.proxy.sansio.core import ConnectionCore

CHUNK = 65536


class NoPeek(Filter):
    name = "test-no-peek"

    @on_request(ApiKey.PRODUCE)
    def produce(self, ctx: FilterContext, request: Any) -> Any:
        return FORWARD


def _conn(filters: list[Filter]) -> tuple[ConnectionCore, Sink, Sink]:
    # Peeking streams a Produce on before its end has arrived: only without request validation,
    # which checks each request whole first (and these records are random bytes, not batches).
    core, actions = make_core(filters, validate_requests=False)
    return core, actions.client, actions.upstream


def _policy() -> TopicPolicy:
    return TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))


def _produce(topics: list[str], version: int = 9, size: int = 1 << 20, cid: int = 5, acks: int = -1) -> bytes:
    req = pm.ProduceRequest(acks=acks, timeout_ms=30000, transactional_id="tx" if version >= 3 else None)
    req.topic_data = [
        pm.TopicProduceData(
            name=t, partition_data=[pm.PartitionProduceData(index=0, records=os.urandom(size // len(topics)))]
        )
        for t in topics
    ]
    return request_frame(0, version, cid, "client-1", api.request_header_version(0, version), req.encode(version))


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def test_allowed_single_topic_streams_before_it_is_complete() -> None:
    conn, _client, upstream = _conn([_policy()])
    frame = _produce(["orders"])
    chunks = _chunks(frame)
    conn.receive_client(chunks[0])
    assert bytes(upstream.data) == chunks[0]  # forwarded before the rest arrived
    assert conn.reader.buffered == 0
    for c in chunks[1:]:
        conn.receive_client(c)
    assert bytes(upstream.data) == frame  # exactly the client's bytes
    assert [(e.cid, e.api_key) for e in conn.pending] == [(5, 0)]
    assert conn._req_stream_left == 0


def test_denied_topic_is_held_and_refused_not_streamed() -> None:
    conn, client, upstream = _conn([_policy()])
    frame = _produce(["secret-x"])
    for c in _chunks(frame):
        conn.receive_client(c)
        assert bytes(upstream.data) == b""
    resp = api.decode_response(0, 9, memoryview(bytes(client.data))[9:])
    assert [(t.name, [p.error_code for p in t.partition_responses]) for t in resp.responses] == [("secret-x", [29])]


def test_two_topics_wait_for_the_whole_request() -> None:
    conn, _client, upstream = _conn([_policy()])
    frame = _produce(["a", "b"])
    chunks = _chunks(frame)
    for c in chunks[:-1]:
        conn.receive_client(c)
    assert bytes(upstream.data) == b""  # the second topic's name comes after the first's records
    conn.receive_client(chunks[-1])
    assert bytes(upstream.data) == frame


def test_a_hook_that_cannot_peek_keeps_the_request_whole() -> None:
    conn, _client, upstream = _conn([_policy(), NoPeek({})])
    frame = _produce(["orders"])
    chunks = _chunks(frame)
    conn.receive_client(chunks[0])
    assert bytes(upstream.data) == b""
    for c in chunks[1:]:
        conn.receive_client(c)
    assert bytes(upstream.data) == frame


def test_frames_after_a_streamed_one_in_the_same_read() -> None:
    conn, _client, upstream = _conn([_policy()])
    first, second = _produce(["orders"], cid=1), _produce(["orders"], size=1000, cid=2)
    stream = first + second + _produce(["secret-y"], size=1000, cid=3)
    cut = len(first) - 100  # the last read holds the end of the first frame and both others
    conn.receive_client(stream[:CHUNK])
    conn.receive_client(stream[CHUNK:cut])
    conn.receive_client(stream[cut:])
    assert bytes(upstream.data) == first + second  # the third (denied) was answered, not forwarded
    assert [e.cid for e in conn.pending] == [1, 2, 3]
    assert conn.pending[2].response is not None  # kgate's own answer, waiting its turn


def test_acks0_peeked_produce_expects_no_answer() -> None:
    conn, _client, upstream = _conn([_policy()])
    frame = _produce(["orders"], acks=0, cid=9)
    for c in _chunks(frame):
        conn.receive_client(c)
    assert bytes(upstream.data) == frame
    assert not conn.pending
    assert 9 in (conn._acks0 or ())


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_prefix_fields(version: int) -> None:
    tid = uuid.uuid4()
    req = pm.ProduceRequest(acks=1, timeout_ms=1234, transactional_id="txn-1")
    req.topic_data = [
        pm.TopicProduceData(name="orders", topic_id=tid, partition_data=[pm.PartitionProduceData(index=0)])
    ]
    frame = request_frame(0, version, 1, "c", api.request_header_version(0, version), req.encode(version))
    off = parse_request_header(frame, api.request_header_version(0, version)).body_offset
    p = produce_prefix(frame, off, version)
    assert (p.transactional_id, p.acks, p.timeout_ms, p.topic_count) == ("txn-1", 1, 1234, 1)
    assert (p.topic_name, p.topic_id) == (("orders", None) if version < 13 else (None, tid))
    for cut in range(off, off + 12):
        with pytest.raises(HeaderError):
            produce_prefix(frame[:cut], off, version)


@pytest.mark.parametrize("version", [3, 8, 9, 12])
@pytest.mark.parametrize("length", [126, 127, 300])
def test_prefix_of_long_names(version: int, length: int) -> None:
    """Names and transactional ids of 127 bytes or more take a two-byte compact length."""
    txn, topic = "t" * length, "n" * length
    req = pm.ProduceRequest(acks=-1, timeout_ms=5, transactional_id=txn)
    req.topic_data = [pm.TopicProduceData(name=topic, partition_data=[pm.PartitionProduceData(index=0)])]
    frame = request_frame(0, version, 1, "c", api.request_header_version(0, version), req.encode(version))
    off = parse_request_header(frame, api.request_header_version(0, version)).body_offset
    p = produce_prefix(frame, off, version)
    assert (p.transactional_id, p.acks, p.timeout_ms, p.topic_count, p.topic_name) == (txn, -1, 5, 1, topic)
    for cut in range(off, off + 2 * length + 10, 7):  # the prefix is at least 2 * length + 10 bytes
        with pytest.raises(HeaderError):
            produce_prefix(frame[:cut], off, version)


def test_prefix_with_invalid_utf8_is_a_header_error() -> None:
    req = pm.ProduceRequest(acks=1, timeout_ms=5, transactional_id=None)
    req.topic_data = [pm.TopicProduceData(name="abcd", partition_data=[pm.PartitionProduceData(index=0)])]
    frame = bytearray(request_frame(0, 9, 1, "c", 2, req.encode(9)))
    at = bytes(frame).index(b"abcd")
    frame[at : at + 2] = b"\xff\xfe"
    off = parse_request_header(frame, 2).body_offset
    with pytest.raises(HeaderError, match="UTF-8"):
        produce_prefix(bytes(frame), off, 9)


def test_whole_small_frames_are_forwarded_without_a_full_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    conn, _client, upstream = _conn([_policy()])
    frame = _produce(["orders"], size=300, cid=4)
    decoded: list[int] = []
    real = api.decode_request

    def counting(key: int, version: int, buf: Any) -> Any:
        decoded.append(key)
        return real(key, version, buf)

    monkeypatch.setattr(api, "decode_request", counting)
    conn.receive_client(frame)
    assert bytes(upstream.data) == frame
    assert decoded == []  # the topic-only peek decided
    conn.receive_client(_produce(["secret-z"], size=300, cid=6))
    assert decoded == [0]  # refused: decoded whole to build the per-partition answer


# -- one write for the end of a streamed Produce and the start of the next ------------------------
@pytest.mark.parametrize("acks", [-1, 0])
def test_end_of_one_and_start_of_the_next_go_up_in_one_write(acks: int) -> None:
    """A pipelining producer's read often ends one streamed Produce and starts the next: when the
    next one is peeked and allowed, both parts leave in one write, as raw mode sends such a read
    (a second write is a second syscall and a second loopback delivery, docs/performance.md)."""
    conn, _client, upstream = _conn([_policy()])
    first, second = _produce(["orders"], cid=1, acks=acks), _produce(["orders"], cid=2, acks=acks)
    stream = first + second
    cut = len(first) + 1000  # the second read holds the first's end and the second's head
    conn.receive_client(stream[:CHUNK])
    conn.receive_client(stream[CHUNK:cut])
    assert upstream.writes == 2
    assert bytes(upstream.data) == stream[:cut]
    for c in _chunks(stream[cut:]):
        conn.receive_client(c)
    assert bytes(upstream.data) == stream
    assert conn._req_stream_left == 0
    if acks:
        assert [e.cid for e in conn.pending] == [1, 2]
    else:  # acks=0: the broker answers neither, so nothing waits for an answer
        assert not conn.pending
        assert list(conn._acks0 or ()) == [1, 2]


def test_end_of_one_goes_at_once_when_the_next_is_refused() -> None:
    conn, client, upstream = _conn([_policy()])
    first, second = _produce(["orders"], cid=1), _produce(["secret-x"], size=200_000, cid=2)
    stream = first + second
    cut = len(first) + 1000
    conn.receive_client(stream[:CHUNK])
    conn.receive_client(stream[CHUNK:cut])
    assert bytes(upstream.data) == first  # not held back behind the refused one
    for c in _chunks(stream[cut:]):
        conn.receive_client(c)
    assert bytes(upstream.data) == first  # the second was answered by kgate, never forwarded
    assert [e.cid for e in conn.pending] == [1, 2]
    assert conn.pending[1].response is not None
    assert client.data == b""  # its answer waits behind the first's


@pytest.mark.parametrize("head", [0, 5, 11, 30])
def test_end_of_one_then_too_little_of_the_next_to_peek(head: int) -> None:
    """Fewer bytes of the next request than its topic name needs: the end goes now, the head waits."""
    conn, _client, upstream = _conn([_policy()])
    first, second = _produce(["orders"], cid=1), _produce(["orders"], cid=2)
    stream = first + second
    cut = len(first) + head
    conn.receive_client(stream[:CHUNK])
    conn.receive_client(stream[CHUNK:cut])
    assert bytes(upstream.data) == first
    for c in _chunks(stream[cut:]):
        conn.receive_client(c)
    assert bytes(upstream.data) == stream
    assert [e.cid for e in conn.pending] == [1, 2]


def _acl_filters() -> list[Filter]:
    """The yardstick's kgate-acl (bench/ab_yardstick.py): the authorizer, five rules, plus internal-topics."""
    from kgate.filters.builtin.authz.authorizer import Authorizer
    from kgate.filters.builtin.internal_topics.filter import InternalTopics

    acl = {
        "default": "deny",
        "rules": [
            {"allow": "all", "topic": "*"},
            {"allow": "all", "group": "*"},
            {"allow": "all", "transactional_id": "*"},
            {"allow": "all", "cluster": True},
            {"deny": "all", "topic": {"glob": "secret-*"}},
        ],
    }
    return [Authorizer(Authorizer.validate_config(acl)), InternalTopics(InternalTopics.validate_config({}))]


@pytest.mark.parametrize("read", [CHUNK, 100_000, 262_144, 333_333])
def test_pipelined_stream_through_authorizer_and_internal_topics(read: int) -> None:
    """Allowed, denied by a rule, and a system topic, pipelined and read in pieces of any size: the
    allowed ones go up byte for byte in at most one write per read; the others are answered."""
    conn, _client, upstream = _conn(_acl_filters())
    frames = [
        _produce(["orders"], cid=1),
        _produce(["orders"], size=500_000, cid=2),
        _produce(["secret-a"], size=300_000, cid=3),
        _produce(["orders"], size=700_000, cid=4),
        _produce(["__consumer_offsets"], size=1000, cid=5),
        _produce(["orders"], size=2000, cid=6),
    ]
    stream = b"".join(frames)
    reads = [stream[i : i + read] for i in range(0, len(stream), read)]
    for r in reads:
        conn.receive_client(r)
    assert bytes(upstream.data) == frames[0] + frames[1] + frames[3] + frames[5]
    assert upstream.writes <= len(reads)
    assert [e.cid for e in conn.pending] == [1, 2, 3, 4, 5, 6]
    assert [e.response is not None for e in conn.pending] == [False, False, True, False, True, False]
    errors = {}
    for e in conn.pending:
        if e.response is not None:
            resp = api.decode_response(0, 9, memoryview(bytes(e.response))[9:])
            errors[e.cid] = [p.error_code for t in resp.responses for p in t.partition_responses]
    assert errors == {3: [29], 5: [17]}  # TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION
