"""The in-flight limit holds within a read (proxy/sansio/core.py, ``_replay_kept``).

A client that pipelines 17 requests in one read with ``max_inflight_requests: 10`` gets exactly 10
forwarded; the other 7 are kept (and reported as held) and go, in order, once answers bring the
count under the limit. Raw mode (header-only tracking), filtered mode (a hook on Metadata), and a
Produce whose head reaches the limit while its body is still arriving.
"""

from __future__ import annotations

from typing import Any

from support.core_driver import make_core

from kgate.api import ApiKey, Filter, FilterContext, on_request
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.data import metadata as mm
from kgate.codec.generated.data import produce as pm
from kgate.codec.headers import request_frame, response_frame
from kgate.filters.chain import Decision, Verdict

PRODUCE_V, METADATA_V = 9, 12
LIMIT = 10


class SeesMetadata(Filter):
    """A request hook that forwards: the connection runs in filtered mode."""

    name = "test-sees-metadata"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> None:
        return None


def produce(cid: int, acks: int = 1, records: bytes | None = None) -> bytes:
    req = pm.ProduceRequest(acks=acks, timeout_ms=1000, transactional_id=None)
    req.topic_data = [pm.TopicProduceData(name="t", partition_data=[pm.PartitionProduceData(index=0, records=records)])]
    hv = api.request_header_version(int(ApiKey.PRODUCE), PRODUCE_V)
    return request_frame(int(ApiKey.PRODUCE), PRODUCE_V, cid, "c", hv, req.encode(PRODUCE_V))


def metadata(cid: int) -> bytes:
    req = mm.MetadataRequest(topics=[mm.MetadataRequestTopic(name="x")])
    hv = api.request_header_version(int(ApiKey.METADATA), METADATA_V)
    return request_frame(int(ApiKey.METADATA), METADATA_V, cid, "c", hv, req.encode(METADATA_V))


def answer(cid: int, key: int, version: int) -> bytes:
    body = api.API_INFO[key].response_class().encode(version)
    return response_frame(cid, api.response_header_version(key, version), body)


def request_cids(data: bytes | bytearray) -> list[int]:
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    return [int.from_bytes(f[8:12], "big", signed=True) for f in frames]


def answer_cids(data: bytes | bytearray) -> list[int]:
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    return [int.from_bytes(f[4:8], "big", signed=True) for f in frames]


def _seventeen_in_one_read(filters: list[Filter], make: Any, key: int, version: int) -> None:
    core, out = make_core(filters, max_inflight_requests=LIMIT)
    read = b"".join(make(cid) for cid in range(1, 18))
    core.receive_client(read)
    assert request_cids(out.upstream.data) == list(range(1, 11))  # exactly the limit
    assert "inflight-limit" in out.client_paused
    assert out.held[-1] == len(read) - len(out.upstream.data)  # the 7 kept count as held
    core.receive_broker(answer(1, key, version))
    # one answer frees one place: the next kept request goes, the limit holds again
    assert request_cids(out.upstream.data) == list(range(1, 12))
    assert "inflight-limit" in out.client_paused
    for cid in range(2, 12):
        core.receive_broker(answer(cid, key, version))
    assert request_cids(out.upstream.data) == list(range(1, 18))  # all, in order, nothing twice
    assert bytes(out.upstream.data) == read
    assert len(core.pending) == 6
    assert "inflight-limit" not in out.client_paused
    assert out.held[-1] == 0
    for cid in range(12, 18):
        core.receive_broker(answer(cid, key, version))
    assert answer_cids(out.client.data) == list(range(1, 18))  # every answer, in request order
    assert not core.pending
    assert not core.closed


def test_raw_mode_forwards_exactly_the_limit_from_one_read() -> None:
    core, _out = make_core(max_inflight_requests=LIMIT)
    assert core.raw_requests
    _seventeen_in_one_read([], produce, int(ApiKey.PRODUCE), PRODUCE_V)


def test_filtered_mode_forwards_exactly_the_limit_from_one_read() -> None:
    _seventeen_in_one_read([SeesMetadata({})], metadata, int(ApiKey.METADATA), METADATA_V)


def test_acks0_produce_does_not_count_and_is_never_lost() -> None:
    core, out = make_core(max_inflight_requests=2)
    read = produce(1, acks=0) + produce(2) + produce(3, acks=0) + produce(4) + produce(5, acks=0) + produce(6)
    core.receive_client(read)
    # acks=0 expects no answer, so it takes no place: stop after the second answered one
    assert request_cids(out.upstream.data) == [1, 2, 3, 4]
    core.receive_broker(answer(2, int(ApiKey.PRODUCE), PRODUCE_V))
    assert request_cids(out.upstream.data) == [1, 2, 3, 4, 5, 6]


def _produce_streamed_mid_frame(filters: list[Filter]) -> None:
    core, out = make_core(filters, max_inflight_requests=2)
    big = produce(2, records=b"\x00" * 5000)
    cut = 200  # the Produce's header and topic, not its records
    read = metadata(1) + big[:cut]
    core.receive_client(read)
    assert len(core.pending) == 2  # the Produce's head went and counts
    assert bytes(out.upstream.data) == read
    # the rest of the Produce goes although the limit is reached; the request after it is kept
    core.receive_client(big[cut:] + metadata(3))
    assert bytes(out.upstream.data) == read + big[cut:]
    assert "inflight-limit" in out.client_paused
    core.receive_broker(answer(1, int(ApiKey.METADATA), METADATA_V))
    assert request_cids(out.upstream.data) == [1, 2, 3]


def test_raw_mode_produce_streamed_mid_frame_counts_and_finishes() -> None:
    _produce_streamed_mid_frame([])


def test_filtered_mode_produce_streamed_mid_frame_counts_and_finishes() -> None:
    class PeeksProduce(Filter):
        name = "test-peeks-produce"

        @on_request(ApiKey.PRODUCE, peek=True)
        def produce(self, ctx: FilterContext, request: Any) -> None:
            return None

    _produce_streamed_mid_frame([SeesMetadata({}), PeeksProduce({})])


def test_kept_requests_go_upstream_when_the_client_leaves() -> None:
    core, out = make_core([SeesMetadata({})], max_inflight_requests=LIMIT)
    read = b"".join(metadata(cid) for cid in range(1, 18))
    core.receive_client(read)
    core.client_closed()
    assert bytes(out.upstream.data) == read  # read from the client: the broker gets it, as a backlog's
    assert core.closed


class _Lookup:
    """An awaitable that never runs here: the test ends the hook run itself (``hook_done``)."""

    def __await__(self) -> Any:
        yield None


class WaitsOnFirst(Filter):
    """Suspends the Metadata request with correlation id 1 (a lookup, say)."""

    name = "test-waits-on-first"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        return _Lookup() if ctx.correlation_id == 1 else None


def test_requests_behind_a_suspended_one_stop_at_the_limit_too() -> None:
    core, out = make_core([WaitsOnFirst({})], max_inflight_requests=3)
    read = b"".join(metadata(cid) for cid in range(1, 7))
    core.receive_client(read)
    assert core.suspended
    assert request_cids(out.upstream.data) == []  # nothing overtakes the suspended request
    (suspension,) = out.spawned
    core.hook_done(suspension, Decision(Verdict.FORWARD, suspension.message))
    assert request_cids(out.upstream.data) == [1, 2, 3]  # the backlog's replay stops at the limit
    assert "inflight-limit" in out.client_paused
    core.receive_broker(answer(1, int(ApiKey.METADATA), METADATA_V))
    assert request_cids(out.upstream.data) == [1, 2, 3, 4]
    for cid in (2, 3, 4):
        core.receive_broker(answer(cid, int(ApiKey.METADATA), METADATA_V))
    assert bytes(out.upstream.data) == read
    assert "inflight-limit" not in out.client_paused
