"""proxy/chain_handover.py and ``ConnectionCore.adopt_chain``: when a connection takes a reloaded chain.

Driven sans-IO (tests/support/core_driver.py): the point is *when* the switch happens relative
to the exchanges in flight, which only the core's own bookkeeping shows exactly. The same path
runs on sockets in tests/e2e/test_reload.py.
"""

from __future__ import annotations

from typing import Any

from support.core_driver import RecordingActions, make_core

from kgate.api import ApiKey, ErrorCode, Filter, FilterContext, Respond, error_response, on_request, on_response
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated import metadata as mm
from kgate.codec.generated import produce as pm
from kgate.codec.generated.api_versions import ApiVersion
from kgate.codec.headers import request_frame, response_frame
from kgate.filters.chain import FilterChain
from kgate.proxy.chain_handover import PAUSE_REASON, step
from kgate.proxy.core import ConnectionCore

MD, PR = int(ApiKey.METADATA), int(ApiKey.PRODUCE)
MD_V, PR_V = 12, 9


class Refuser(Filter):
    """Answers every Metadata request itself (so the test sees which chain handled a request)."""

    name = "test-refuser"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        return Respond(error_response(ctx.api_key, ctx.api_version, request, ErrorCode.TOPIC_AUTHORIZATION_FAILED))


class ResponseCounter(Filter):
    """Counts the Metadata responses it sees (a response hook of the old chain)."""

    name = "test-response-counter"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config or {})
        self.seen = 0

    @on_response(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, response: Any) -> Any:
        self.seen += 1
        return None


class Conn:
    """What ``step`` needs of a ClientConnection: its core and its read pausing."""

    def __init__(self, core: ConnectionCore, actions: RecordingActions) -> None:
        self.core = core
        self.actions = actions

    def pause_client(self, reason: str) -> None:
        self.actions.pause_client(reason)

    def resume_client(self, reason: str) -> None:
        self.actions.resume_client(reason)


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


def reload_chain(core: ConnectionCore, *filters: Filter) -> FilterChain:
    """What ``VirtualCluster.replace_chain`` does to the cluster, minus starting filters (no loop here)."""
    old = core.cluster.chain
    core.cluster._use_chain(FilterChain(list(filters)))
    return old


def test_a_connection_takes_the_new_chain_only_once_its_answers_are_in() -> None:
    core, actions = make_core()  # no filter: raw mode
    conn = Conn(core, actions)
    assert core.raw_requests
    core.receive_client(metadata_request(1))
    old = reload_chain(core, Refuser({}))

    assert not step(conn, old), "an answer is owed under the old chain: no switch yet"
    assert PAUSE_REASON in actions.client_paused, "no new request until the owed answer is in"
    assert core.chain is old and core.raw_requests

    core.receive_broker(metadata_answer(1))
    assert cids(actions.client.data, 4) == [1]
    assert step(conn, old)
    assert PAUSE_REASON not in actions.client_paused
    assert core.chain is core.cluster.chain and core.raw_requests  # raw until a request a hook wants

    core.receive_client(metadata_request(2))  # answered by the new chain, never forwarded
    assert not core.raw_requests  # the new chain hooks Metadata: filtered from this request on
    assert cids(actions.upstream.data, 8) == [1]
    assert cids(actions.client.data, 4) == [1, 2]


def test_a_request_half_forwarded_is_never_cut_by_a_pause() -> None:
    core, actions = make_core()
    conn = Conn(core, actions)
    frame = produce_request(1)
    core.receive_client(frame[:20])  # raw mode: tracked and forwarded, the rest still to come
    old = reload_chain(core, Refuser({}))
    assert core.mid_request
    assert not step(conn, old)
    assert PAUSE_REASON not in actions.client_paused, "paused mid-request, the broker would wait forever"
    core.receive_client(frame[20:])
    assert not step(conn, old)  # whole now, its answer still owed: pause until it comes
    assert PAUSE_REASON in actions.client_paused
    core.receive_broker(produce_answer(1))
    assert step(conn, old) and core.chain is core.cluster.chain
    assert bytes(actions.upstream.data) == frame


def test_an_exchange_in_flight_finishes_with_the_response_hooks_it_started_with() -> None:
    counter = ResponseCounter({})
    core, actions = make_core([counter])
    conn = Conn(core, actions)
    core.receive_client(metadata_request(1))
    old = reload_chain(core)  # the new chain has no filter at all
    core.receive_broker(metadata_answer(1))
    assert counter.seen == 1, "the old chain's response hook must see the answer to its request"
    assert step(conn, old)
    core.receive_client(metadata_request(2))
    core.receive_broker(metadata_answer(2))
    assert counter.seen == 1, "a request after the switch is the new chain's alone"
    assert cids(actions.client.data, 4) == [1, 2]


def test_a_closed_connection_is_done_with_the_old_chain() -> None:
    core, actions = make_core()
    conn = Conn(core, actions)
    core.receive_client(metadata_request(1))
    old = reload_chain(core, Refuser({}))
    assert not step(conn, old)
    core.client_closed()
    assert step(conn, old)
    assert PAUSE_REASON not in actions.client_paused


class ProduceV3To7(Filter):
    """Sees Produce v3-v7 only: kgate must advertise no other Produce version while it is in the chain."""

    name = "test-produce-3-7"

    @on_request(ApiKey.PRODUCE, min_version=3, max_version=7)
    def produce(self, ctx: FilterContext, request: Any) -> Any:
        return None


AV, AV_V = int(ApiKey.API_VERSIONS), 3


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
    """A connection that took the reloaded chain advertises what that chain's filters can read:
    a client told the old ranges would send versions the new chain refuses (and be closed)."""
    core, actions = make_core()
    core.receive_client(api_versions_request(1))
    core.receive_broker(api_versions_answer(1))
    reload_chain(core, ProduceV3To7({}))
    assert core.adopt_chain()
    core.receive_client(api_versions_request(2))
    core.receive_broker(api_versions_answer(2))
    first, second = advertised_produce(actions.client.data)
    assert first[0] == 0 and second == (3, 7)
