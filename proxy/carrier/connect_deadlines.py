"""One timer for a cluster's upstream connects under way, not a timer handle per connect.

Each connect to a broker is bounded by ``connect_timeout_s``. A timer per connect
(``loop.call_later``, its cancel once connected, the close of its libuv handle on a later loop
turn) was a visible part of a connection's set-up, paid by every client although a connect to a
live broker takes a millisecond (docs/performance.md, 2026-11-27 "a connection's set-up, its close
line and the sweep"). Here a connect under way is an entry in a dict (who -> its deadline) and one
loop timer stands for the earliest deadline: a connect that ends pops its entry; when the timer
fires, the entries whose deadline has come are told, and the timer is set for the earliest left.
Each connect still times out at its own start plus the timeout, to the loop timer's millisecond.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

#: libuv keeps time in milliseconds: a timer may fire up to this much before the deadline it stands for
_TICK_S = 0.001


class Connecting(Protocol):
    """A connection whose upstream connect is under way (``ClientConnection``)."""

    def connect_timed_out(self) -> None: ...


class ConnectDeadlines:
    __slots__ = ("_at", "_due", "_timer")

    def __init__(self) -> None:
        self._due: dict[Connecting, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._at = 0.0  # the deadline the timer stands for

    def start(self, who: Connecting, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        """``who`` begins a connect that may take ``seconds``; ``who.connect_timed_out()`` if it takes longer."""
        at = loop.time() + seconds
        self._due[who] = at
        timer = self._timer
        if timer is None or at < self._at:
            if timer is not None:
                timer.cancel()  # only when the timeout was shortened (a reload): deadlines come in order
            self._timer = loop.call_at(at, self._fire, loop)
            self._at = at

    def end(self, who: Connecting) -> None:
        """``who``'s connect ended (connected, failed, timed out or cancelled)."""
        self._due.pop(who, None)

    def __len__(self) -> int:
        return len(self._due)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        due = self._due
        if not due:
            return  # every connect ended in time: the timer lapses until the next one starts
        now = loop.time() + _TICK_S
        expired = [who for who, at in due.items() if at <= now]
        for who in expired:
            del due[who]
        if due:
            self._at = at = min(due.values())
            self._timer = loop.call_at(at, self._fire, loop)
        for who in expired:  # last: a timed-out connect's close may start or end others
            who.connect_timed_out()
