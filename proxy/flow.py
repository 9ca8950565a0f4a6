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
"""

from __future__ import annotations

import asyncio


class ReadGate:
    __slots__ = ("_reasons", "_transport")

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._reasons: set[str] = set()

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

    @property
    def paused(self) -> bool:
        return bool(self._reasons)

    def pause(self, reason: str) -> None:
        if reason in self._reasons:
            return
        self._reasons.add(reason)
        t = self._transport
        if t is not None and not t.is_closing() and t.is_reading():
            t.pause_reading()

    def resume(self, reason: str) -> None:
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        if not self._reasons and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
