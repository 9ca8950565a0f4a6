"""A process-wide cap on request bytes kgate holds in memory, with backpressure before refusal.

Where a filter must see a whole request, kgate holds its bytes until the frame is complete (up to
``max_frame_bytes``, 100 MiB by default), and requests queued behind a suspended one wait whole
in the backlog. Per connection that is bounded; across connections it was not: 6 connections each
sending 60 MiB of a 100 MiB frame took +362 MiB (issue 7, item 11).

The account: each connection reports what it holds (partial frame + backlog) whenever it changes.
While the total is over ``max_held_bytes``, every connection that holds something, except the
one that has held the longest, is paused (reads stop; TCP pushes back on its client). The oldest
holder always keeps reading, so at least one frame always completes and memory is freed: no
deadlock, and the total stays below the cap plus one frame. A client stuck mid-frame while not
paused is closed by the frame timeout (proxy/carrier/timeouts.py), which frees its bytes for the rest.
When the total drops back under the cap, paused connections resume in the order they paused.
"""

from __future__ import annotations

from typing import Protocol


class Holder(Protocol):
    def held_cap_pause(self) -> None: ...

    def held_cap_resume(self) -> None: ...


class HeldBytes:
    """Bytes held per connection, in the order connections started holding."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.peak = 0
        self._held: dict[Holder, int] = {}  # insertion order: who has held the longest first
        self._paused: dict[Holder, None] = {}  # ordered set

    def update(self, conn: Holder, held: int) -> None:
        """``conn`` now holds ``held`` bytes; pause or resume whoever the cap says."""
        old = self._held.get(conn, 0)
        if held == old:
            return
        if held <= 0:
            self._held.pop(conn, None)
            self._paused.pop(conn, None)
            conn.held_cap_resume()
        else:
            self._held[conn] = held
        self.total += max(held, 0) - old
        self.peak = max(self.peak, self.total)
        if self.total > self.cap:
            if held > old and conn is not next(iter(self._held), None) and conn not in self._paused:
                self._paused[conn] = None
                conn.held_cap_pause()
            self._oldest_runs()
            return
        self._wake()

    def release(self, conn: Holder) -> None:
        """``conn`` closed: its bytes are gone."""
        self.update(conn, 0)

    def _wake(self) -> None:
        while self._paused and self.total <= self.cap:
            conn = next(iter(self._paused))
            del self._paused[conn]
            conn.held_cap_resume()
        self._oldest_runs()

    def _oldest_runs(self) -> None:
        oldest = next(iter(self._held), None)
        if oldest is not None and oldest in self._paused:  # the oldest holder must always progress
            del self._paused[oldest]
            oldest.held_cap_resume()

    @property
    def paused(self) -> int:
        return len(self._paused)


#: the process-wide account; the cap is set from ``proxy.max_held_bytes`` when kgate starts
HELD = HeldBytes(512 * 1024 * 1024)
