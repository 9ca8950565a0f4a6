"""A client that half-closes (its FIN, ``shutdown(SHUT_WR)``) still gets its answers (proxy/sansio/core.py).

A broker answers every request it read from a client that half-closed; before, kgate took the FIN
for the client leaving and closed at once, so such a client got no answer at all. Now the core
(``client_eof``) forwards everything it read (a request behind a suspended hook, its backlog,
what the in-flight limit kept), writes every answer, and ends the connection (CLIENT_LEFT) once
it owes nothing. A request the FIN cut short never completes: what is held of it is dropped, and
one already streaming upstream does not keep the connection waiting for an answer that cannot
come. Driven without sockets (support/core_driver.py); the same on real sockets and brokers is in
tests/e2e/test_half_close.py.
"""

from __future__ import annotations

from typing import Any

from support.core_driver import RecordingActions, make_core
from support.fake_cluster import FakeCluster

from kgate.api import ApiKey, ConnectionInfo, Filter, FilterContext, on_request
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.data import metadata as mm
from kgate.codec.generated.data import produce as pm
from kgate.codec.headers import request_frame, response_frame
from kgate.config import parse_config
from kgate.filters.chain import Decision, FilterChain, Verdict
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.core import ConnectionCore
from kgate.proxy.sansio.states import State

PRODUCE_V, METADATA_V, API_VERSIONS_V = 9, 12, 3
PRODUCE, METADATA, API_VERSIONS = int(ApiKey.PRODUCE), int(ApiKey.METADATA), int(ApiKey.API_VERSIONS)


def produce(cid: int, acks: int = 1, records: bytes | None = None) -> bytes:
    req = pm.ProduceRequest(acks=acks, timeout_ms=1000, transactional_id=None)
    req.topic_data = [pm.TopicProduceData(name="t", partition_data=[pm.PartitionProduceData(index=0, records=records)])]
    hv = api.request_header_version(PRODUCE, PRODUCE_V)
    return request_frame(PRODUCE, PRODUCE_V, cid, "c", hv, req.encode(PRODUCE_V))


def metadata(cid: int) -> bytes:
    req = mm.MetadataRequest(topics=[mm.MetadataRequestTopic(name="x")])
    hv = api.request_header_version(METADATA, METADATA_V)
    return request_frame(METADATA, METADATA_V, cid, "c", hv, req.encode(METADATA_V))


def api_versions(cid: int) -> bytes:
    body = api.API_INFO[API_VERSIONS].request_class(client_software_name="t", client_software_version="1")
    hv = api.request_header_version(API_VERSIONS, API_VERSIONS_V)
    return request_frame(API_VERSIONS, API_VERSIONS_V, cid, "c", hv, body.encode(API_VERSIONS_V))


def answer(cid: int, key: int, version: int) -> bytes:
    body = api.API_INFO[key].response_class().encode(version)
    return response_frame(cid, api.response_header_version(key, version), body)


def cids(data: bytes | bytearray, at: int) -> list[int]:
    """Correlation ids of the whole frames in ``data`` (requests: ``at``=8, answers: 4)."""
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    return [int.from_bytes(f[at : at + 4], "big", signed=True) for f in frames]


class SeesMetadata(Filter):
    """A request hook that forwards: the connection runs in filtered mode."""

    name = "test-sees-metadata"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> None:
        return None


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


def test_the_answer_to_a_request_sent_with_the_fin_still_goes() -> None:
    """The reviewer's case (a): ApiVersions answered, then Metadata and the FIN at once."""
    core, out = make_core()
    core.receive_client(api_versions(1))
    core.receive_broker(answer(1, API_VERSIONS, API_VERSIONS_V))
    core.receive_client(metadata(2))
    core.client_eof()
    assert not core.closed, "closed on the client's FIN with an answer owed"
    assert core.state is State.HALF_CLOSED
    assert cids(out.upstream.data, 8) == [1, 2]
    core.receive_broker(answer(2, METADATA, METADATA_V))
    assert cids(out.client.data, 4) == [1, 2]
    assert core.closed  # nothing more owed: it ends, as the client leaving
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_a_fin_with_nothing_owed_closes_at_once() -> None:
    core, out = make_core()
    core.receive_client(metadata(1))
    core.receive_broker(answer(1, METADATA, METADATA_V))
    core.client_eof()
    assert core.closed
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_acks0_produce_then_fin_is_forwarded_and_closes_at_once() -> None:
    core, out = make_core()
    read = produce(1, acks=0) + produce(2, acks=0)
    core.receive_client(read)
    core.client_eof()
    assert bytes(out.upstream.data) == read
    assert core.closed  # acks=0 expects no answer: nothing to wait for
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_several_answers_go_in_order_and_it_closes_after_the_last() -> None:
    core, out = make_core()
    core.receive_client(metadata(1) + produce(2, acks=0) + produce(3) + metadata(4))
    core.client_eof()
    for cid, key, version in ((1, METADATA, METADATA_V), (3, PRODUCE, PRODUCE_V)):
        core.receive_broker(answer(cid, key, version))
        assert not core.closed
    core.receive_broker(answer(4, METADATA, METADATA_V))
    assert cids(out.client.data, 4) == [1, 3, 4]
    assert core.closed


def test_a_request_behind_a_suspended_hook_and_its_backlog_still_go() -> None:
    core, out = make_core([WaitsOnFirst({})])
    core.receive_client(metadata(1) + metadata(2) + metadata(3))
    core.client_eof()
    assert core.state is State.HALF_SUSPENDED
    assert cids(out.upstream.data, 8) == []  # nothing overtakes the suspended request
    (suspension,) = out.spawned
    core.hook_done(suspension, Decision(Verdict.FORWARD, suspension.message))
    assert cids(out.upstream.data, 8) == [1, 2, 3]
    assert core.state is State.HALF_CLOSED
    for cid in (1, 2, 3):
        core.receive_broker(answer(cid, METADATA, METADATA_V))
    assert cids(out.client.data, 4) == [1, 2, 3]
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_a_full_close_after_the_fin_while_suspended_still_finishes_the_requests() -> None:
    """The client's socket goes for good (a reset) after its FIN: as a client that left."""
    core, out = make_core([WaitsOnFirst({})])
    core.receive_client(metadata(1) + metadata(2))
    core.client_eof()
    core.client_closed()
    assert core.state is State.GONE_SUSPENDED
    (suspension,) = out.spawned
    core.hook_done(suspension, Decision(Verdict.FORWARD, suspension.message))
    assert cids(out.upstream.data, 8) == [1, 2]
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_a_full_close_after_the_fin_closes_at_once() -> None:
    core, out = make_core()
    core.receive_client(metadata(1))
    core.client_eof()
    core.client_closed()
    assert out.close_reason is CloseReason.CLIENT_LEFT
    core.receive_broker(answer(1, METADATA, METADATA_V))
    assert out.client.data == b""  # closed: nobody to answer


def test_requests_the_inflight_limit_kept_go_at_the_fin() -> None:
    core, out = make_core([SeesMetadata({})], max_inflight_requests=3)
    read = b"".join(metadata(cid) for cid in range(1, 8))
    core.receive_client(read)
    assert cids(out.upstream.data, 8) == [1, 2, 3]
    core.client_eof()
    assert bytes(out.upstream.data) == read  # read from the client: it all goes
    for cid in range(1, 8):
        assert not core.closed
        core.receive_broker(answer(cid, METADATA, METADATA_V))
    assert cids(out.client.data, 4) == list(range(1, 8))
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_a_partial_frame_at_the_fin_is_never_forwarded() -> None:
    """Filtered mode holds a frame until it is whole: cut by the FIN, it is dropped."""
    core, out = make_core([SeesMetadata({})])
    core.receive_client(metadata(1) + metadata(2)[:20])
    core.client_eof()
    assert bytes(out.upstream.data) == metadata(1)
    assert not core.mid_frame  # nothing held: the frame timeout sees no request in progress
    core.receive_broker(answer(1, METADATA, METADATA_V))
    assert cids(out.client.data, 4) == [1]
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_a_header_cut_by_the_fin_is_never_forwarded_in_raw_mode() -> None:
    core, out = make_core()
    assert core.raw_requests
    core.receive_client(metadata(1) + metadata(2)[:9])  # its header not whole: held, not forwarded
    core.client_eof()
    assert bytes(out.upstream.data) == metadata(1)
    core.receive_broker(answer(1, METADATA, METADATA_V))
    assert out.close_reason is CloseReason.CLIENT_LEFT


def _streamed_produce_cut(filters: list[Filter], acks: int) -> None:
    """A large Produce forwarded as it arrives, cut by the FIN: the answers before it still go,
    and the connection does not wait for an answer to a request the broker never had whole."""
    core, out = make_core(filters)
    big = produce(3, acks=acks, records=b"\x00" * 5000)
    core.receive_client(metadata(1) + produce(2) + big[:200])
    assert bytes(out.upstream.data).endswith(big[:200])  # its start went on as it arrived
    core.client_eof()
    assert not core.mid_frame
    core.receive_broker(answer(1, METADATA, METADATA_V))
    assert not core.closed  # the Produce before the cut one is still owed
    core.receive_broker(answer(2, PRODUCE, PRODUCE_V))
    assert cids(out.client.data, 4) == [1, 2]
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_raw_mode_a_streamed_produce_cut_by_the_fin_is_not_waited_for() -> None:
    _streamed_produce_cut([], acks=1)


def test_raw_mode_a_streamed_acks0_produce_cut_by_the_fin_keeps_the_answer_before_it() -> None:
    _streamed_produce_cut([], acks=0)


class PeeksProduce(Filter):
    name = "test-peeks-produce"

    @on_request(ApiKey.PRODUCE, peek=True)
    def produce(self, ctx: FilterContext, request: Any) -> None:
        return None


def test_filtered_mode_a_peeked_produce_cut_by_the_fin_is_not_waited_for() -> None:
    _streamed_produce_cut([SeesMetadata({}), PeeksProduce({})], acks=1)


def test_filtered_mode_a_peeked_acks0_produce_cut_by_the_fin_keeps_the_answer_before_it() -> None:
    _streamed_produce_cut([SeesMetadata({}), PeeksProduce({})], acks=0)


def test_an_answer_streaming_through_ends_before_the_connection_does() -> None:
    """The last answer is cut through (its first bytes before the rest): the close waits for its end."""
    core, out = make_core()
    core.receive_client(produce(1, records=b"\x00" * 10))
    core.client_eof()
    whole = answer(1, PRODUCE, PRODUCE_V)
    core.receive_broker(whole[:9])
    assert not core.closed
    core.receive_broker(whole[9:])
    assert bytes(out.client.data) == whole
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_a_second_eof_changes_nothing() -> None:
    """A transport that reads again after a resume reports the end of the stream once more."""
    core, out = make_core()
    core.receive_client(metadata(1))
    core.client_eof()
    core.client_eof()
    assert core.state is State.HALF_CLOSED
    core.receive_broker(answer(1, METADATA, METADATA_V))
    assert out.close_reason is CloseReason.CLIENT_LEFT


def test_a_kgate_close_while_half_closed_keeps_its_reason() -> None:
    """A timeout (or shutdown) ends a half-closed connection with its own reason, not as finished."""
    core, out = make_core()
    core.receive_client(metadata(1))
    core.client_eof()
    core.close(CloseReason.TIMEOUT, "broker did not answer a request within 30s")
    assert out.close_reason is CloseReason.TIMEOUT


class Reports:
    """An exchange observer (filters/exchanges.py): what it was told, per exchange."""

    def __init__(self) -> None:
        self.got: list[tuple[int, bool]] = []  # (correlation id, answered)

    def __call__(self, ex: Any, info: Any, answer: Any, size: int | None, end_ns: int) -> None:
        self.got.append((ex.cid, answer is not None))


def _observed_core(observer: Reports) -> tuple[Any, Any]:
    cfg = parse_config(
        {"virtual_clusters": [{"name": "t", "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]}, "test"
    )
    cluster = FakeCluster(cfg.proxy, FilterChain([]), cfg.virtual_clusters[0].name)
    cluster.exchange_observer = observer
    out = RecordingActions(cluster)
    return ConnectionCore(cluster, ConnectionInfo("127.0.0.1:1", "t"), out), out


def test_observed_a_cut_request_is_reported_once_unanswered() -> None:
    """Each exchange is reported exactly once: the one the FIN cut short at the FIN, unanswered."""
    for acks in (1, 0):
        reports = Reports()
        core, out = _observed_core(reports)
        big = produce(2, acks=acks, records=b"\x00" * 5000)
        core.receive_client(metadata(1) + big[:200])
        core.client_eof()
        assert reports.got == [(2, False)]
        core.receive_broker(answer(1, METADATA, METADATA_V))
        assert reports.got == [(2, False), (1, True)]
        assert out.close_reason is CloseReason.CLIENT_LEFT
