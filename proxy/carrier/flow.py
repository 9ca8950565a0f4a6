"""Idempotent read pausing with named reasons.

A transport's reading can be paused for several independent reasons at once (the other side's
write buffer is full, the upstream is not connected yet, a filter suspended a message and the
queue behind it is long). Each reason is added and removed on its own; the transport is paused
while any reason holds and resumed when the last one goes, so no caller can resume reading that
another still needs paused, and calling pause or resume twice is harmless (uvicorn's lesson).

The gate asks the transport whether it is reading rather than trusting its own bookkeeping:
uvloop starts reading an accepted connection *after* ``connection_made`` returns, undoing a
``pause_reading()`` made there. kgate pauses every new client connection until its upstream is
connected, so a client that sent at once was read without limit while kgate still believed it
paused, and every later pause reason then found the gate "already paused" and did nothing: one
pipelining client grew kgate by 2.3 GiB in 30 s (bench/hostile.py). ``attach`` therefore pauses
again on the loop's next turn, and ``pause`` pauses whenever the transport is still reading.

A pause may also be timed (``pause_for``): a quota throttle (filters/builtin/quotas/filter.py) stops
reading a connection for the throttle time, as a Kafka broker mutes a throttled client's channel
(KIP-219). One timer per gate at most: a longer throttle moves the resume later, a shorter one
while paused changes nothing.
"""

from __future__ import annotations

import asyncio

#: the reason a timed pause holds (``pause_for``): a quota throttle
THROTTLED = "quota-throttle"


class ReadGate:
    __slots__ = ("_reasons", "_timer", "_transport", "_until", "paused")

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._reasons: tuple[str, ...] = ()  # a few at most; the empty tuple is shared (no set per gate)
        #: whether any reason holds: a plain attribute kept with ``_reasons``, since the timeout sweep
        #: reads it for every connection every interval, where a property is a Python call each
        self.paused = False
        self._timer: asyncio.TimerHandle | None = None  # resumes a timed pause (``pause_for``)
        self._until = 0.0  # loop time the timed pause ends

    def pause_for(self, seconds: float, loop: asyncio.AbstractEventLoop, reason: str = THROTTLED) -> None:
        """Pause for ``reason`` until ``seconds`` from now (``loop.time()``), then resume it.

        Calls while paused keep the later end: one timer, never one per call.
        """
        if seconds <= 0:
            return
        until = loop.time() + seconds
        if self._timer is not None:
            if until <= self._until:
                return
            self._timer.cancel()
        self._until = until
        self._timer = loop.call_at(until, self._timed_out, reason)
        self.pause(reason)

    def _timed_out(self, reason: str) -> None:
        self._timer = None
        self.resume(reason)

    def cancel_timer(self) -> None:
        """Drop a pending timed resume (the connection is torn down: the timer must not hold it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def attach(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._transport = transport
        if self._reasons:
            transport.pause_reading()
            # uvloop (re)starts reading an accepted transport after connection_made: pause again then
            (loop or asyncio.get_running_loop()).call_soon(self._enforce)

    def _enforce(self) -> None:
        """Make the transport's reading state agree with the reasons (called on the next loop turn)."""
        t = self._transport
        if self._reasons and t is not None and not t.is_closing() and t.is_reading():
            t.pause_reading()

    def pause(self, reason: str) -> None:
        if reason in self._reasons:
            return
        self._reasons = (*self._reasons, reason)
        self.paused = True
        t = self._transport
        if t is not None and not t.is_closing() and t.is_reading():
            t.pause_reading()

    def detach(self) -> None:
        """The transport reads no more (its peer half-closed): pauses and resumes leave it alone, as
        a resume would make it read the end of the stream again."""
        self._transport = None

    def resume(self, reason: str) -> None:
        if reason not in self._reasons:
            return
        self._reasons = tuple(r for r in self._reasons if r != reason)
        self.paused = bool(self._reasons)
        if not self._reasons and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
