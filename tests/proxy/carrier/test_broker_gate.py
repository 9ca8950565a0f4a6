"""The broker side's read gate is made at its first pause (``ClientConnection._broker_gate``).

Most connections never pause reading from their broker, so none builds the gate up front. What must
still hold: a pause that comes before the broker connection exists (the client stopped reading
while kgate was connecting) holds once it is adopted, a pause after it stops the broker's transport,
and a resume with nothing paused is harmless. A real upstream connect on the test's loop (a local
TCP server stands in for the broker: only the socket matters here).
"""

from __future__ import annotations

import asyncio

from kgate.config import parse_config
from kgate.filters.chain import FilterChain
from kgate.proxy.carrier.connection import ClientConnection
from kgate.proxy.runtime.cluster import VirtualCluster


async def _connected(pause_first: bool) -> tuple[ClientConnection, asyncio.Server]:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cfg = parse_config(
        {"virtual_clusters": [{"name": "t", "listen": "127.0.0.1:19997", "upstream": f"127.0.0.1:{port}"}]}, "test"
    )
    cluster = VirtualCluster(cfg.virtual_clusters[0], cfg.proxy, FilterChain([]), cfg.topic_names)
    conn = ClientConnection(cluster, None, asyncio.get_running_loop())
    assert conn.upstream_gate is None  # nothing built before a pause
    if pause_first:
        conn.pause_writing()  # the client's write buffer filled before the broker was there
    conn._first_write(b"\x00\x00\x00\x00")  # the first bytes for the broker: the connect starts
    task = conn._connect_task
    assert task is not None
    await task
    assert conn.upstream is not None
    await asyncio.sleep(0.05)  # a gate attached with reasons pauses again on the next loop turn
    return conn, server


async def test_a_pause_before_the_broker_connects_holds_once_it_is_adopted() -> None:
    conn, server = await _connected(pause_first=True)
    try:
        assert conn.upstream is not None
        assert not conn.upstream.is_reading()
        conn.resume_writing()
        assert conn.upstream.is_reading()
    finally:
        conn.close_sockets(conn._close_reason)
        server.close()


async def test_a_pause_after_it_connects_stops_the_broker_and_a_resume_restarts_it() -> None:
    conn, server = await _connected(pause_first=False)
    try:
        assert conn.upstream is not None
        assert conn.upstream_gate is None
        conn.resume_broker("answers-blocked")  # nothing paused: no gate made, nothing changes
        assert conn.upstream_gate is None
        assert conn.upstream.is_reading()
        conn.pause_broker("answers-blocked")
        assert not conn.upstream.is_reading()
        snap = conn.timeout_snapshot()
        assert snap is not None
        assert snap.upstream_paused
        conn.resume_broker("answers-blocked")
        assert conn.upstream.is_reading()
    finally:
        conn.close_sockets(conn._close_reason)
        server.close()
