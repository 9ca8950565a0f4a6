"""Moving a virtual cluster's open connections to the filter chain a reload installed.

A connection changes chain only *between* exchanges (``ConnectionCore.adopt_chain``): nothing
owed to the client, no request half forwarded. A request/response client gets there before its
next request; a pipelining one (a producer with five requests in flight) may never be there by
chance, so a connection still on the old chain has its reading paused ("reload") at the next
point where no request is half through, its in-flight answers arrive, it adopts the new chain and
reading resumes. The pause lasts one round trip of what was already in flight (a long-poll Fetch:
up to its max wait). No connection is closed and no request is refused: the client only sees one
slower answer.

A connection still on the old chain after ``drain_timeout_s`` (a request streaming in for that
long, a filter hook that never answers) is closed with reason ``reload`` once it owes nothing
(or at the deadline twice over), like shutdown's drain: the old chain's filters must be closed
eventually, and its clients reconnect to the new chain.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from kgate.proxy.close_reason import CloseReason

if TYPE_CHECKING:
    from kgate.filters.chain import FilterChain
    from kgate.proxy.cluster import VirtualCluster
    from kgate.proxy.connection import ClientConnection

log = logging.getLogger("kgate.reload")

PAUSE_REASON = "reload"
POLL_S = 0.005  # how often connections still on the old chain are looked at


def step(conn: ClientConnection, old: FilterChain) -> bool:
    """Move ``conn`` on if it can now; whether it is done with ``old`` (moved, or closed)."""
    core = conn.core
    if core.closed or core.chain is not old:
        conn.resume_client(PAUSE_REASON)
        return True
    if core.adopt_chain():
        conn.resume_client(PAUSE_REASON)
        return True
    if not core.mid_request:
        conn.pause_client(PAUSE_REASON)  # no new request until what is in flight has been answered
    return False


async def hand_over(cluster: VirtualCluster, old: FilterChain, timeout_s: float) -> None:
    """Return once no open connection of ``cluster`` uses ``old`` (the caller then closes it).

    Only the connections still waiting are looked at every ``POLL_S``: a cluster with 10,000
    connections and one slow one would otherwise cost 2 million checks a second. Connections that
    open from now on take the new chain themselves (``ClientConnection.start``).
    """
    started = time.monotonic()
    deadline = started + timeout_s
    warned = False
    waiting = [conn for conn in list(cluster.connections) if not step(conn, old)]
    while True:
        waiting = [conn for conn in waiting if not step(conn, old)]
        if not waiting:
            break
        now = time.monotonic()
        if now >= deadline:
            if not warned:
                warned = True
                log.warning(
                    "cluster %s: %d connection(s) still busy on the replaced filter chain after %gs; "
                    "closing each once it owes nothing",
                    cluster.name, len(waiting), timeout_s,
                )
            for conn in waiting:
                conn.begin_drain()
                if conn.drained or now >= deadline + timeout_s:
                    conn.close(CloseReason.RELOAD, "still on the replaced filter chain at the reload deadline")
        await asyncio.sleep(POLL_S)
    log.info(
        "cluster %s: every connection moved to the new filter chain in %.0f ms",
        cluster.name, (time.monotonic() - started) * 1000,
    )
