"""The timeout sweep's decisions (proxy/carrier/timeouts.py), on a fake clock: no sockets, no sleeping."""

from __future__ import annotations

from dataclasses import replace

from kgate.config import ProxySettings
from kgate.proxy.carrier.timeouts import Snapshot, first_watch, sweep_interval, verdict

S = ProxySettings(idle_timeout_s=60, frame_timeout_s=10, upstream_timeout_s=30)
QUIET = Snapshot(
    rx=1, up_rx=1, frames=1, mid_frame=False, owes=False, reading_paused=False, upstream_paused=False, head=None
)


def run(snaps: list[tuple[float, Snapshot]]) -> list[str | None]:
    t0, s0 = snaps[0]
    w = first_watch(s0, t0)
    return [verdict(w, s, t, S) for t, s in snaps[1:]]


def test_idle_connection_closes_after_idle_timeout() -> None:
    out = run([(0, QUIET), (30, QUIET), (59, QUIET), (60, QUIET)])
    assert out == [None, None, "idle for 60s"]


def test_traffic_or_owed_answers_are_not_idle() -> None:
    assert run([(0, QUIET), (50, replace(QUIET, rx=2)), (100, replace(QUIET, rx=2))]) == [None, None]
    owing = replace(QUIET, owes=True)
    assert run([(0, owing), (70, owing), (140, owing)]) == [None, None]
    # broker bytes count as traffic too (a long streaming response)
    assert run([(0, QUIET), (59, replace(QUIET, up_rx=5)), (110, replace(QUIET, up_rx=5))]) == [None, None]


def test_slowloris_frame_times_out_although_bytes_keep_coming() -> None:
    snaps = [(float(t), replace(QUIET, rx=10 + t, mid_frame=True)) for t in range(0, 12)]
    out = run(snaps)
    assert out[:9] == [None] * 9
    assert out[9] == "request not received whole within 10s"


def test_connection_that_never_speaks_times_out_as_first_request() -> None:
    silent = Snapshot(
        rx=0, up_rx=0, frames=0, mid_frame=True, owes=False, reading_paused=False, upstream_paused=False, head=None
    )
    assert run([(0, silent), (5, silent), (10, silent)]) == [None, "first request not received whole within 10s"]


def test_new_frames_and_kgate_backpressure_reset_the_frame_clock() -> None:
    mid = replace(QUIET, mid_frame=True)
    # a new frame started between sweeps: a busy pipelining client is always "mid-frame"
    snaps = [(float(t), replace(mid, frames=t, rx=t)) for t in range(0, 30, 5)]
    assert run(snaps) == [None] * 5
    # kgate paused reading (upstream full): the client cannot finish its frame, not its fault
    paused = replace(mid, reading_paused=True)
    assert run([(0, mid), (5, paused), (20, paused), (25, mid), (34, mid)]) == [None] * 4


def test_unanswered_request_times_out_unless_kgate_paused_the_broker() -> None:
    head = object()
    waiting = replace(QUIET, owes=True, head=head)
    assert run([(0, waiting), (29, waiting), (30, waiting)]) == [None, "broker did not answer a request within 30s"]
    # answers are flowing: the head changes between sweeps
    assert run([(float(t), replace(waiting, head=object())) for t in range(0, 100, 10)]) == [None] * 9
    paused = replace(waiting, upstream_paused=True)
    assert run([(0, waiting), (20, paused), (45, paused), (50, waiting), (74, waiting)]) == [None] * 4


def test_sweep_interval_is_a_quarter_of_the_smallest_limit_at_most_one_second() -> None:
    assert sweep_interval(S) == 1.0
    assert sweep_interval(ProxySettings(frame_timeout_s=2)) == 0.5


async def test_one_sweep_skips_closed_connections_forgets_them_and_closes_idle_ones() -> None:
    """``sweep_once`` over real connections (no sockets): a closed one is neither timed nor kept in
    the watches, an idle one closes once its idle time is up, with its reason."""
    import asyncio

    from kgate.config import parse_config
    from kgate.filters.chain import FilterChain
    from kgate.proxy.carrier.connection import ClientConnection
    from kgate.proxy.carrier.timeouts import Watch, sweep_once
    from kgate.proxy.runtime.cluster import VirtualCluster
    from kgate.proxy.sansio.close_reason import CloseReason

    cfg = parse_config(
        {
            "proxy": {"idle_timeout_s": 60},
            "virtual_clusters": [{"name": "t", "listen": "127.0.0.1:19995", "upstream": "127.0.0.1:9"}],
        },
        "test",
    )
    cluster = VirtualCluster(cfg.virtual_clusters[0], cfg.proxy, FilterChain([]), cfg.topic_names)
    loop = asyncio.get_running_loop()
    idle, gone = ClientConnection(cluster, None, loop), ClientConnection(cluster, None, loop)
    for conn in (idle, gone):
        conn.core.rx_chunks = conn.core.frames_in = 1  # one request read whole, nothing owed
        cluster.connections.add(conn)
    watches: dict[object, Watch] = {}
    sweep_once(cluster, watches, 0.0)
    assert set(watches) == {idle, gone}
    gone.close(CloseReason.CLIENT_LEFT)
    cluster.connections.add(gone)  # as if the sweep ran before its teardown let go of it
    sweep_once(cluster, watches, 30.0)
    assert not idle.closed
    assert watches[gone].quiet_since == 0.0  # a closed connection is not timed
    cluster.connections.discard(gone)
    sweep_once(cluster, watches, 45.0)
    assert set(watches) == {idle}  # gone from the cluster: forgotten
    sweep_once(cluster, watches, 60.0)
    assert idle.closed
    assert idle.core.close_detail == "idle for 60s"
    assert not watches  # closed by this pass, its teardown let go of it: forgotten in the same pass
