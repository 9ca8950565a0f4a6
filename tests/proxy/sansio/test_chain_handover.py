"""A reload's chain switch in the connection core (``ConnectionCore.switch_chain``, proxy/sansio/chain_handover.py).

Driven sans-IO (tests/support/core_driver.py): the point is which chain each exchange runs on
relative to the switch, and when the old chain is let go, which only the core's own bookkeeping
shows exactly. The same path runs on sockets with real clients in tests/e2e/test_reload.py and
tests/e2e/test_reload_join.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from support.core_driver import RecordingActions, make_core

from kgate.api import (
    ApiKey,
    ConnectionInfo,
    ErrorCode,
    Filter,
    FilterContext,
    Respond,
    error_response,
    on_request,
    on_response,
)
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.api_keys import API_VERSIONS as AV
from kgate.codec.generated.api_keys import METADATA as MD
from kgate.codec.generated.api_keys import PRODUCE as PR
from kgate.codec.generated.data import metadata as mm
from kgate.codec.generated.data import produce as pm
from kgate.codec.generated.session.api_versions import ApiVersion
from kgate.codec.headers import request_frame, response_frame
from kgate.config import parse_config
from kgate.filters.chain import Decision, FilterChain, Verdict
from kgate.proxy.runtime.cluster import VirtualCluster
from kgate.proxy.sansio.chain_handover import RetiredChain
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.core import ConnectionCore

MD_V, PR_V = 12, 9


class Refuser(Filter):
    """Answers every Metadata request itself (so the test sees which chain handled a request)."""

    name = "test-refuser"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        return Respond(error_response(ctx.api_key, ctx.api_version, request, ErrorCode.TOPIC_AUTHORIZATION_FAILED))


class Tagger(Filter):
    """Keeps per-exchange state in its request hook; its response hook records (its tag, the state's tag)."""

    name = "test-tagger"

    def __init__(self, tag: str) -> None:
        super().__init__({})
        self.tag = tag
        self.answered: list[tuple[str, str, int]] = []
        self.closes = 0

    @on_request(ApiKey.METADATA)
    def mark(self, ctx: FilterContext, request: Any) -> Any:
        ctx.state["test.tag"] = self.tag
        return None

    @on_response(ApiKey.METADATA, needs_state=True)
    def seen(self, ctx: FilterContext, response: Any) -> Any:
        self.answered.append((self.tag, ctx.state["test.tag"], ctx.correlation_id))
        return None

    async def close(self) -> None:
        self.closes += 1


class ResponseCounter(Filter):
    """Counts the Metadata responses it sees (a response hook without request hooks: raw requests)."""

    name = "test-response-counter"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config or {})
        self.seen: list[int] = []

    @on_response(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, response: Any) -> Any:
        self.seen.append(ctx.correlation_id)
        return None


class SlowGate(Filter):
    """A Metadata request hook that awaits (the test settles it with ``hook_done``)."""

    name = "test-slow-gate"

    @on_request(ApiKey.METADATA)
    async def metadata(self, ctx: FilterContext, request: Any) -> Any:
        await asyncio.sleep(0)
        return None


def metadata_request(cid: int) -> bytes:
    req = mm.MetadataRequest(topics=[mm.MetadataRequestTopic(name="t")])
    return request_frame(MD, MD_V, cid, "c", api.request_header_version(MD, MD_V), req.encode(MD_V))


def metadata_answer(cid: int) -> bytes:
    body = api.API_INFO[MD].response_class().encode(MD_V)
    return response_frame(cid, api.response_header_version(MD, MD_V), body)


def produce_request(cid: int) -> bytes:
    req = pm.ProduceRequest(acks=1, timeout_ms=1000, transactional_id=None)
    req.topic_data = [pm.TopicProduceData(name="t", partition_data=[pm.PartitionProduceData(index=0, records=None)])]
    return request_frame(PR, PR_V, cid, "c", api.request_header_version(PR, PR_V), req.encode(PR_V))


def produce_answer(cid: int) -> bytes:
    body = api.API_INFO[PR].response_class().encode(PR_V)
    return response_frame(cid, api.response_header_version(PR, PR_V), body)


def cids(data: bytes | bytearray, first: int) -> list[int]:
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    return [int.from_bytes(f[first : first + 4], "big", signed=True) for f in frames]


class Reload:
    """What ``VirtualCluster.replace_chain`` does to one core, minus the event loop (no filter starts)."""

    def __init__(self, core: ConnectionCore, *filters: Filter, observer: Any = None) -> None:
        cluster = core.cluster
        self.idle: list[RetiredChain] = []
        self.old = RetiredChain(cluster.chain, cluster.exchange_observer, self.idle.append)
        cluster.use_chain(FilterChain(list(filters)))
        cluster.exchange_observer = observer
        core.switch_chain(self.old)
        self.old.release()

    @property
    def released(self) -> bool:
        return self.idle == [self.old]


def test_an_exchange_started_on_a_gets_its_response_hooks_and_state_from_a_after_the_switch() -> None:
    a, b = Tagger("A"), Tagger("B")
    core, actions = make_core([a])
    core.receive_client(metadata_request(1))
    reload = Reload(core, b)
    assert core.chain.filters == [b]
    assert not reload.released
    core.receive_client(metadata_request(2))  # read after the switch: chain B, while 1 is still owed
    assert cids(actions.upstream.data, 8) == [1, 2]
    assert not actions.client_paused

    core.receive_broker(metadata_answer(1))
    assert a.answered == [("A", "A", 1)]
    assert b.answered == []
    assert reload.released, "A's last exchange ended: A is let go"
    core.receive_broker(metadata_answer(2))
    assert b.answered == [("B", "B", 2)]
    assert a.answered == [("A", "A", 1)]
    assert cids(actions.client.data, 4) == [1, 2]
    assert reload.idle == [reload.old], "released exactly once"
    assert actions.close_reason is None


def test_the_next_request_meets_the_new_chain_at_once_and_answers_keep_their_order() -> None:
    core, actions = make_core()  # no filter: raw mode
    core.receive_client(metadata_request(1))
    reload = Reload(core, Refuser({}))
    core.receive_client(metadata_request(2))  # answered by the new chain, never forwarded
    assert cids(actions.upstream.data, 8) == [1]
    assert cids(actions.client.data, 4) == [], "2's answer waits behind 1's"
    assert not actions.client_paused, "a reload pauses nobody"
    core.receive_broker(metadata_answer(1))
    assert cids(actions.client.data, 4) == [1, 2]
    assert reload.released


def test_a_request_half_forwarded_finishes_on_its_chain() -> None:
    core, actions = make_core()
    frame = produce_request(1)
    core.receive_client(frame[:20])  # raw mode: tracked and forwarded, the rest still to come
    reload = Reload(core, Refuser({}))
    core.receive_client(frame[20:])
    assert bytes(actions.upstream.data) == frame
    core.receive_broker(produce_answer(1))
    assert cids(actions.client.data, 4) == [1]
    assert reload.released


def test_old_chain_released_after_the_last_of_several_exchanges() -> None:
    a = Tagger("A")
    core, _actions = make_core([a])
    for cid in (1, 2, 3):
        core.receive_client(metadata_request(cid))
    reload = Reload(core)
    assert reload.old.users == 3
    core.receive_broker(metadata_answer(1))
    core.receive_broker(metadata_answer(2))
    assert not reload.released
    core.receive_broker(metadata_answer(3))
    assert reload.released
    assert [c for _t, _s, c in a.answered] == [1, 2, 3]


def test_a_closing_connection_lets_go_of_the_old_chain_once() -> None:
    a = Tagger("A")
    core, _actions = make_core([a])
    core.receive_client(metadata_request(1))
    core.receive_client(metadata_request(2))
    reload = Reload(core)
    core.receive_broker(metadata_answer(1))
    core.client_closed()
    assert reload.idle == [reload.old]
    core.receive_broker(metadata_answer(2))  # late: the core is closed
    core.detach()
    assert reload.idle == [reload.old]


def test_nothing_in_flight_releases_the_old_chain_at_once() -> None:
    core, _actions = make_core([Tagger("A")])
    reload = Reload(core, Tagger("B"))
    assert reload.released


def test_a_suspended_request_hook_finishes_on_its_chain_and_the_backlog_takes_the_new_one() -> None:
    counter = ResponseCounter({})
    core, actions = make_core([SlowGate({}), counter])
    core.receive_client(metadata_request(1))  # suspended in SlowGate
    assert core.suspended
    assert len(actions.spawned) == 1
    core.receive_client(metadata_request(2))  # behind it, in the backlog
    reload = Reload(core, Refuser({}))
    assert core.chain is not core.cluster.chain, "a hook of the old chain is still running"
    assert reload.old.users == 1
    first = actions.spawned[0]
    core.hook_done(first, Decision(Verdict.FORWARD, first.message))
    assert core.chain is core.cluster.chain
    assert cids(actions.upstream.data, 8) == [1], "2 met the new chain's Refuser, never the broker"
    core.receive_broker(metadata_answer(1))
    assert counter.seen == [1], "the old chain's response hook saw the answer to its request"
    assert cids(actions.client.data, 4) == [1, 2]
    assert reload.released


def test_two_reloads_in_a_row_each_chain_keeps_its_exchanges() -> None:
    a, b, c = Tagger("A"), Tagger("B"), Tagger("C")
    core, _actions = make_core([a])
    core.receive_client(metadata_request(1))
    first = Reload(core, b)
    core.receive_client(metadata_request(2))
    second = Reload(core, c)
    core.receive_client(metadata_request(3))
    for cid in (1, 2, 3):
        core.receive_broker(metadata_answer(cid))
    assert (a.answered, b.answered, c.answered) == ([("A", "A", 1)], [("B", "B", 2)], [("C", "C", 3)])
    assert first.released
    assert second.released


def test_observers_report_each_exchange_to_its_own_chain() -> None:
    seen_a: list[int] = []
    seen_b: list[int] = []
    core, _actions = make_core([Tagger("A")])
    core.cluster.exchange_observer = lambda ex, info, answer, size, end: seen_a.append(ex.cid)
    core._observer = core.cluster.exchange_observer  # as if installed before the connection opened
    core.receive_client(metadata_request(1))
    reload = Reload(core, Tagger("B"), observer=lambda ex, info, answer, size, end: seen_b.append(ex.cid))
    core.receive_client(metadata_request(2))
    core.receive_broker(metadata_answer(1))
    core.receive_broker(metadata_answer(2))
    assert (seen_a, seen_b) == ([1], [2])
    assert reload.released
    assert core._observer is core.cluster.exchange_observer, "the routing observer is gone once A is"


def test_an_observer_only_on_the_old_chain_goes_once_its_exchanges_end() -> None:
    """Back to the unobserved fast path (the common case costs nothing) once A's last exchange reported."""
    seen_a: list[int] = []
    core, actions = make_core()
    core.cluster.exchange_observer = lambda ex, info, answer, size, end: seen_a.append(ex.cid)
    core._observer = core.cluster.exchange_observer
    core.receive_client(metadata_request(1))
    reload = Reload(core)
    core.receive_client(metadata_request(2))
    core.receive_broker(metadata_answer(1))
    assert seen_a == [1]
    assert reload.released
    assert core._observer is None
    core.receive_broker(metadata_answer(2))
    assert seen_a == [1]
    assert cids(actions.client.data, 4) == [1, 2]


async def test_replace_chain_closes_the_old_filters_exactly_once_after_their_last_exchange() -> None:
    a, b = Tagger("A"), Tagger("B")
    # the cluster's own replace_chain is under test here: a real VirtualCluster (no listener opened)
    cfg = parse_config(
        {"virtual_clusters": [{"name": "t", "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]}, "test"
    )
    cluster = VirtualCluster(cfg.virtual_clusters[0], cfg.proxy, FilterChain([a]), cfg.topic_names)
    core = ConnectionCore(cluster, ConnectionInfo("127.0.0.1:1", "t"), RecordingActions())
    cluster.connections.add(core_conn(core))
    core.receive_client(metadata_request(1))
    cluster.replace_chain(FilterChain([b]))
    await asyncio.sleep(0.01)
    assert a.closes == 0, "an exchange of A is still open"
    core.receive_client(metadata_request(2))
    core.receive_broker(metadata_answer(1))
    for _ in range(5):
        await asyncio.sleep(0)
    assert a.closes == 1
    assert cluster.retired_chains == []
    core.receive_broker(metadata_answer(2))
    core.close(CloseReason.SHUTDOWN)
    await cluster.wait_closed()
    assert a.closes == 1, "closed once, not again at shutdown"
    assert b.closes == 1


def core_conn(core: ConnectionCore) -> Any:
    """What ``replace_chain`` reads of a ClientConnection: its core."""

    class Conn:
        pass

    conn = Conn()
    conn.core = core  # type: ignore[attr-defined]
    conn.switch_chain = core.switch_chain  # type: ignore[attr-defined]  # ClientConnection's, minus the clock
    return conn


class ProduceV3To7(Filter):
    """Sees Produce v3-v7 only: kgate must advertise no other Produce version while it is in the chain."""

    name = "test-produce-3-7"

    @on_request(ApiKey.PRODUCE, min_version=3, max_version=7)
    def produce(self, ctx: FilterContext, request: Any) -> Any:
        return None


AV_V = 3


def api_versions_request(cid: int) -> bytes:
    req = api.API_INFO[AV].request_class(client_software_name="t", client_software_version="1")
    return request_frame(AV, AV_V, cid, "c", api.request_header_version(AV, AV_V), req.encode(AV_V))


def api_versions_answer(cid: int) -> bytes:
    """The broker's answer: Produce 0-11."""
    msg = api.API_INFO[AV].response_class(error_code=0)
    msg.api_keys = [ApiVersion(api_key=PR, min_version=0, max_version=11)]
    return response_frame(cid, api.response_header_version(AV, AV_V), msg.encode(AV_V))


def advertised_produce(data: bytes | bytearray) -> list[tuple[int, int]]:
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    out = []
    for f in frames:
        msg = api.decode_response(AV, AV_V, f[8:])  # ApiVersions answers keep header v0
        out += [(k.min_version, k.max_version) for k in msg.api_keys if k.api_key == PR]
    return out


def test_api_versions_after_the_switch_are_capped_by_the_new_chain() -> None:
    """A connection on the reloaded chain advertises what that chain's filters can read:
    a client told the old ranges would send versions the new chain refuses (and be closed)."""
    core, actions = make_core()
    core.receive_client(api_versions_request(1))
    core.receive_broker(api_versions_answer(1))
    Reload(core, ProduceV3To7({}))
    core.receive_client(api_versions_request(2))
    core.receive_broker(api_versions_answer(2))
    first, second = advertised_produce(actions.client.data)
    assert first[0] == 0
    assert second == (3, 7)
