"""Idempotent read pausing with named reasons.

A transport's reading can be paused for several independent reasons at once (the other side's
write buffer is full, the upstream is not connected yet, a filter suspended a message and the
queue behind it is long). Each reason is added and removed on its own; the transport is paused
while any reason holds and resumed when the last one goes, so no caller can resume reading that
another still needs paused, and calling pause or resume twice is harmless (uvicorn's lesson).
"""

from __future__ import annotations

import asyncio


class ReadGate:
    __slots__ = ("_reasons", "_transport")

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._reasons: set[str] = set()

    def attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        if self._reasons:
            transport.pause_reading()

    @property
    def paused(self) -> bool:
        return bool(self._reasons)

    def pause(self, reason: str) -> None:
        if reason in self._reasons:
            return
        self._reasons.add(reason)
        if len(self._reasons) == 1 and self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume(self, reason: str) -> None:
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        if not self._reasons and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
