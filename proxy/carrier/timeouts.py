"""Idle, frame-read and upstream timeouts, decided by a periodic sweep instead of per-request timers.

A timer per request or per read would cost the data path on every message (a ``loop.time()``
call and a timer handle each). Instead each connection only counts its reads and the frames it
started (integer increments), and one sweep per virtual cluster, every ``sweep_interval``,
compares them with what it saw last time:

- **idle**: nothing owed to the client, nothing queued, and no byte from either side since the
  previous sweeps for ``idle_timeout_s`` -> close (what Kafka does after
  ``connections.max.idle.ms``; clients reconnect on their own).
- **frame**: a frame has been in progress (bytes of it arrived, its end did not), or a new
  connection has sent nothing yet, for ``frame_timeout_s`` -> close. Catches slowloris clients
  (one byte per 100 ms) and connections that never speak. Not counted while kgate itself has
  paused reading from the client (backpressure is kgate's doing, not the client's).
- **upstream**: the request at the head of the broker queue has been unanswered for longer than
  its deadline -> close both sides (the client's own request timeout then retries elsewhere).
  The deadline is the request's own wait (a JoinGroup's rebalance timeout, a Fetch's max wait, a
  Produce's timeout: proxy/sansio/deadlines.py) plus ``upstream_timeout_s`` as the margin; the wait is
  read only once a request has been at the head for the margin, so most requests never cost it.
  Not counted while kgate has paused reading from the broker (the answer may be sitting unread
  because the client does not read).

Each limit is enforced within one sweep interval of its value. ``verdict`` is a pure function of
the previous observation, the current one and the clock: tested with a fake clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.deadlines import exchange_deadline

if TYPE_CHECKING:
    from collections.abc import Collection

    from kgate.config import ProxySettings
    from kgate.proxy.control.metrics import ClusterMetrics


class Swept(Protocol):
    """A connection as the sweep sees it (``ClientConnection``)."""

    def timeout_snapshot(self) -> Snapshot | None:
        """None once the connection is closed or its client has left: the sweep skips it."""

    def close(self, reason: CloseReason, detail: str = "") -> None: ...


class SweptCluster(Protocol):
    """What the sweep reads of its cluster (``VirtualCluster``; a protocol, so no import cycle)."""

    @property
    def settings(self) -> ProxySettings: ...
    @property
    def metrics(self) -> ClusterMetrics: ...
    @property
    def connections(self) -> Collection[Swept]: ...


log = logging.getLogger("kgate.timeouts")


@dataclass(slots=True)
class Snapshot:
    """What a sweep reads from one connection (cheap fields only), made once per connection per sweep.

    Not ``frozen``: a frozen dataclass sets each field through ``object.__setattr__``, which made a
    snapshot cost about twice what the rest of a connection's sweep does (docs/performance.md,
    2026-11-27 "a connection's set-up, its close line and the sweep"). Nothing changes one once made.
    """

    rx: int  # reads from the client so far
    up_rx: int  # reads from the broker so far
    frames: int  # request frames started so far
    mid_frame: bool  # bytes of an incomplete frame have arrived (or nothing at all yet)
    owes: bool  # answers pending, requests queued, a response streaming
    reading_paused: bool  # kgate paused reading from the client
    upstream_paused: bool  # kgate paused reading from the broker
    head: object | None  # the exchange at the head of the broker queue


@dataclass(slots=True)
class Watch:
    """What the sweep remembers of a connection between two sweeps."""

    last: Snapshot
    quiet_since: float
    frame_since: float | None
    head_since: float
    head_deadline: float | None = None  # the head's deadline in seconds, once it has waited the margin


def first_watch(snap: Snapshot, now: float) -> Watch:
    return Watch(snap, now, now if snap.mid_frame and not snap.reading_paused else None, now)


def verdict(
    watch: Watch,
    snap: Snapshot,
    now: float,
    settings: ProxySettings,
    deadline_of: Callable[[Any, float], float] = exchange_deadline,
) -> str | None:
    """Update ``watch`` with ``snap``; the reason to close the connection, or None.

    ``deadline_of(head, margin)``: seconds the broker may take to answer the head exchange.
    """
    last = watch.last
    if snap.rx != last.rx or snap.up_rx != last.up_rx or snap.owes:
        watch.quiet_since = now
    if not snap.mid_frame or snap.reading_paused or snap.frames != last.frames:
        # at a frame boundary, paused by kgate, or a new frame began since the last sweep
        watch.frame_since = now if snap.mid_frame and not snap.reading_paused else None
    elif watch.frame_since is None:
        watch.frame_since = now
    if snap.head is None or snap.head is not last.head or snap.upstream_paused:
        watch.head_since = now
        if snap.head is not last.head:
            watch.head_deadline = None
    watch.last = snap
    if now - watch.quiet_since >= settings.idle_timeout_s:
        return f"idle for {settings.idle_timeout_s:g}s"
    if watch.frame_since is not None and now - watch.frame_since >= settings.frame_timeout_s:
        what = "first request" if snap.frames == 0 else "request"
        return f"{what} not received whole within {settings.frame_timeout_s:g}s"
    margin = settings.upstream_timeout_s
    if snap.head is not None and now - watch.head_since >= margin:
        if watch.head_deadline is None:
            watch.head_deadline = deadline_of(snap.head, margin)
        if now - watch.head_since >= watch.head_deadline:
            if watch.head_deadline == margin:
                return f"broker did not answer a request within {margin:g}s"
            return (
                f"broker did not answer a request within {watch.head_deadline:g}s "
                f"(its own wait {watch.head_deadline - margin:g}s + upstream_timeout_s {margin:g}s)"
            )
    return None


def sweep_interval(settings: ProxySettings) -> float:
    """Often enough that each limit holds to within a quarter of its value (and at most 1 s)."""
    return min(1.0, settings.idle_timeout_s / 4, settings.frame_timeout_s / 4, settings.upstream_timeout_s / 4)


async def sweep_forever(cluster: SweptCluster) -> None:
    """The cluster's sweeper task: close connections whose time is up."""
    settings = cluster.settings
    interval = sweep_interval(settings)
    loop = asyncio.get_running_loop()
    watches: dict[Any, Watch] = {}
    while True:
        await asyncio.sleep(interval)
        sweep_once(cluster, watches, loop.time())


def sweep_once(cluster: SweptCluster, watches: dict[Any, Watch], now: float) -> None:
    """One pass over the cluster's connections at ``now``; ``watches`` is what the last pass saw."""
    settings = cluster.settings
    live = cluster.connections
    for conn in list(live):
        snap = conn.timeout_snapshot()
        if snap is None:
            continue
        watch = watches.get(conn)
        if watch is None:
            watches[conn] = first_watch(snap, now)
            continue
        reason = verdict(watch, snap, now, settings)
        if reason is not None:
            cluster.metrics.timed_out(_KINDS[reason.split(" ", 1)[0]])
            conn.close(CloseReason.TIMEOUT, reason)
    for conn in [c for c in watches if c not in live]:
        del watches[conn]


_KINDS = {"idle": "idle", "first": "frame", "request": "frame", "broker": "upstream"}
