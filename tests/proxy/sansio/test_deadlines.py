"""Per-request upstream deadlines (proxy/sansio/deadlines.py) and the sweep's use of them (proxy/carrier/timeouts.py).

A table of real codec requests against the deadline each gets, then the header-only path's kept
waits read back, then the sweep on a fake clock: a JoinGroup the broker holds for its rebalance
is not cut at ``upstream_timeout_s``, a Metadata still is. The end-to-end version, a real consumer
group through kgate with a margin shorter than the rebalance, is tests/e2e/test_reload_join.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from support.core_driver import make_core

from kgate.api import ApiKey
from kgate.codec import api
from kgate.codec.headers import request_frame
from kgate.config import ProxySettings
from kgate.proxy.carrier.timeouts import Snapshot, first_watch, verdict
from kgate.proxy.sansio.deadlines import WAIT_FIELDS, deadline_for, exchange_deadline, own_wait_ms


def req(key: ApiKey, version: int = 0, **fields: Any) -> Any:
    return api.API_INFO[int(key)].request_class(**fields)


K = ApiKey
TABLE: list[tuple[ApiKey, int, Any, float]] = [
    # (api key, version, request, deadline with a 3 s margin)
    (K.JOIN_GROUP, 9, req(K.JOIN_GROUP, group_id="g", session_timeout_ms=45000, rebalance_timeout_ms=300000), 303.0),
    (K.JOIN_GROUP, 0, req(K.JOIN_GROUP, group_id="g", session_timeout_ms=10000), 13.0),  # v0: session timeout
    (K.JOIN_GROUP, 1, req(K.JOIN_GROUP, group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=-1), 3.0),
    (K.FETCH, 12, req(K.FETCH, max_wait_ms=500), 3.5),
    (K.FETCH, 17, req(K.FETCH, max_wait_ms=30000), 33.0),
    (K.SHARE_FETCH, 1, req(K.SHARE_FETCH, max_wait_ms=5000), 8.0),
    (K.PRODUCE, 9, req(K.PRODUCE, acks=-1, timeout_ms=30000), 33.0),
    (K.CREATE_TOPICS, 7, req(K.CREATE_TOPICS, timeout_ms=60000), 63.0),
    (K.DELETE_TOPICS, 6, req(K.DELETE_TOPICS, timeout_ms=15000), 18.0),
    (K.DELETE_RECORDS, 2, req(K.DELETE_RECORDS, timeout_ms=10000), 13.0),
    (K.CREATE_PARTITIONS, 3, req(K.CREATE_PARTITIONS, timeout_ms=20000), 23.0),
    (K.ELECT_LEADERS, 2, req(K.ELECT_LEADERS, timeout_ms=60000), 63.0),
    (K.ALTER_PARTITION_REASSIGNMENTS, 0, req(K.ALTER_PARTITION_REASSIGNMENTS, timeout_ms=60000), 63.0),
    (K.LIST_OFFSETS, 10, req(K.LIST_OFFSETS, timeout_ms=7000), 10.0),
    # short by nature: the margin alone, whatever a field of theirs says
    (K.CONSUMER_GROUP_HEARTBEAT, 0, req(K.CONSUMER_GROUP_HEARTBEAT, group_id="g", rebalance_timeout_ms=300000), 3.0),
    (K.SHARE_GROUP_HEARTBEAT, 1, req(K.SHARE_GROUP_HEARTBEAT, group_id="g"), 3.0),
    (K.SYNC_GROUP, 5, req(K.SYNC_GROUP, group_id="g"), 3.0),
    (K.HEARTBEAT, 4, req(K.HEARTBEAT, group_id="g"), 3.0),
    (K.METADATA, 12, req(K.METADATA), 3.0),
    (K.FETCH, 12, req(K.FETCH, max_wait_ms=-1), 3.0),  # nonsense: no wait, not a negative deadline
    (K.FETCH, 12, None, 3.0),  # nothing known of the request
]


@pytest.mark.parametrize(
    ("key", "version", "request_", "expected"), TABLE, ids=[f"{k.name}-v{v}" for k, v, _r, _e in TABLE]
)
def test_deadline_for(key: ApiKey, version: int, request_: Any, expected: float) -> None:
    assert deadline_for(int(key), version, request_, 3.0) == pytest.approx(expected)


def test_every_wait_field_exists_on_its_request() -> None:
    for key, name in WAIT_FIELDS.items():
        assert name in api.API_INFO[key].request_class.__slots__, (key, name)


def frame_of(key: ApiKey, version: int, msg: Any, cid: int = 7) -> bytes:
    header_version = api.request_header_version(int(key), version)
    return request_frame(int(key), version, cid, "client", header_version, msg.encode(version))


def test_the_header_only_path_keeps_what_the_sweep_reads_the_wait_from() -> None:
    core, _actions = make_core()  # no filter: raw mode, nothing decoded on the way
    assert core.raw_requests
    join = req(
        K.JOIN_GROUP,
        group_id="g",
        session_timeout_ms=45000,
        rebalance_timeout_ms=12000,
        member_id="",
        protocol_type="consumer",
        protocols=[],
    )
    core.receive_client(frame_of(K.JOIN_GROUP, 7, join, cid=1))
    core.receive_client(frame_of(K.FETCH, 12, req(K.FETCH, max_wait_ms=9000, topics=[]), cid=2))
    produce = req(K.PRODUCE, acks=-1, timeout_ms=25000, transactional_id=None, topic_data=[])
    core.receive_client(frame_of(K.PRODUCE, 9, produce, cid=3))
    core.receive_client(frame_of(K.METADATA, 12, req(K.METADATA, topics=[]), cid=4))
    _join, fetch_ex, produce_ex, metadata_ex = core.upstream_waiting
    assert [ex.request for ex in core.upstream_waiting] == [None] * 4, "nothing was decoded on the data path"
    assert isinstance(produce_ex.wait, int), "a Produce keeps its timeout, never its frame"
    assert isinstance(fetch_ex.wait, bytes), "a Fetch keeps its small frame, read only if the broker is slow"
    assert not hasattr(metadata_ex, "wait"), "a request without a wait costs no store"
    assert [exchange_deadline(ex, 2.0) for ex in core.upstream_waiting] == pytest.approx([14.0, 11.0, 27.0, 2.0])


def test_a_kept_frame_that_cannot_be_read_gets_the_margin() -> None:
    class Head:
        api_key, api_version, request, wait = int(K.JOIN_GROUP), 7, None, b"\x00\x00\x00\x30\x00\x0b"

    assert exchange_deadline(Head(), 5.0) == 5.0
    assert exchange_deadline(object(), 5.0) == 5.0


def test_negative_produce_timeout_is_no_wait() -> None:
    class Head:
        api_key, api_version, request, wait = int(K.PRODUCE), 9, None, -1

    assert exchange_deadline(Head(), 5.0) == 5.0
    assert own_wait_ms(int(K.PRODUCE), 9, None) == 0


S = ProxySettings(idle_timeout_s=600, frame_timeout_s=10, upstream_timeout_s=3)
QUIET = Snapshot(
    rx=1, up_rx=1, frames=1, mid_frame=False, owes=True, reading_paused=False, upstream_paused=False, head=None
)


def sweep(head: Any, times: list[float]) -> list[str | None]:
    snap = replace(QUIET, head=head)
    w = first_watch(snap, 0.0)
    return [verdict(w, snap, t, S) for t in times]


def test_a_join_held_for_its_rebalance_outlives_the_margin() -> None:
    class Join:
        api_key, api_version = int(K.JOIN_GROUP), 9
        request = req(K.JOIN_GROUP, group_id="g", session_timeout_ms=45000, rebalance_timeout_ms=10000)

    out = sweep(Join(), [2.0, 3.0, 6.0, 12.9, 13.0])
    assert out[:4] == [None] * 4, "cut at upstream_timeout_s, as before per-request deadlines"
    assert out[4] == "broker did not answer a request within 13s (its own wait 10s + upstream_timeout_s 3s)"


def test_a_request_without_a_wait_still_closes_at_the_margin() -> None:
    class Md:
        api_key, api_version, request = int(K.METADATA), 12, None

    assert sweep(Md(), [2.0, 3.0]) == [None, "broker did not answer a request within 3s"]


def test_the_wait_is_read_once_per_head_and_only_after_the_margin() -> None:
    asked: list[Any] = []

    def deadline_of(head: Any, margin: float) -> float:
        asked.append(head)
        return margin + 10

    a, b = object(), object()
    w = first_watch(replace(QUIET, head=a), 0.0)
    assert verdict(w, replace(QUIET, head=a), 2.0, S, deadline_of) is None
    assert asked == [], "within the margin nothing is read"
    for t in (3.0, 4.0, 5.0):
        assert verdict(w, replace(QUIET, head=a), t, S, deadline_of) is None
    assert asked == [a]
    assert verdict(w, replace(QUIET, head=b), 6.0, S, deadline_of) is None  # a new head: its own clock
    assert verdict(w, replace(QUIET, head=b), 9.0, S, deadline_of) is None
    assert asked == [a, b]
