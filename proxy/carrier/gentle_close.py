"""Closing broker connections whose client left: FIN first, the full close after a grace period."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final

UPSTREAM_CLOSE_GRACE_S: Final = 2.0


class GentleCloser:
    """Half-closes broker connections whose client left, and closes them fully after a grace period.

    A broker may still be working through requests the client sent just before leaving (acks=0
    Produce especially); some brokers (Tansu) drop those once the peer has closed fully. Sending
    FIN first and reading on briefly lets them finish; the answers have nowhere to go and are
    discarded. Every connection gets the same grace, so the deadlines queue up in order and one
    timer serves them all: a timer per connection was a heap push and a handle per client, on the
    path that 200 connecting producers pay 400 times.

    One per virtual cluster (``VirtualCluster.gentle``), so its timer always belongs to the loop
    that owns the transports: a module-wide one was shared by every loop of a test process, and a
    timer left on a finished loop kept every later connection of another loop half-closed for good.
    """

    __slots__ = ("_timer", "_waiting", "grace_s")

    def __init__(self, grace_s: float = UPSTREAM_CLOSE_GRACE_S) -> None:
        self.grace_s = grace_s
        self._waiting: deque[tuple[float, asyncio.Transport]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def close(self, upstream: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        if upstream.is_closing():
            return
        try:
            if upstream.can_write_eof():
                upstream.write_eof()
                self._waiting.append((loop.time() + self.grace_s, upstream))
                if self._timer is None:
                    self._timer = loop.call_later(self.grace_s, self._expire, loop)
                return
        except (OSError, RuntimeError):
            pass
        upstream.close()

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        waiting = self._waiting
        now = loop.time()
        while waiting and waiting[0][0] <= now:
            waiting.popleft()[1].close()  # closing twice is harmless: a broker may have closed it already
        if waiting:
            self._timer = loop.call_at(waiting[0][0], self._expire, loop)
