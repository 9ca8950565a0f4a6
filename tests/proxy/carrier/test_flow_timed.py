"""ReadGate.pause_for: a quota throttle stops reading for a while (a fake loop clock: no sleeps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgate.proxy.carrier.flow import THROTTLED, ReadGate


class Transport:
    """Only what the gate calls (a real socket pair is in tests/proxy/carrier/test_flow.py)."""

    def __init__(self) -> None:
        self.reading = True
        self.calls: list[str] = []

    def is_closing(self) -> bool:
        return False

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.reading = True
        self.calls.append("resume")


class Handle:
    def __init__(self, when: float, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when, self.fn, self.args, self.cancelled = when, fn, args, False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """``time`` and ``call_at`` (all ``pause_for`` uses), driven by ``advance``."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[Handle] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> Handle:
        h = Handle(when, fn, args)
        self.timers.append(h)
        return h

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> Handle:
        return self.call_at(self.now, fn, *args)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for h in sorted(self.timers, key=lambda h: h.when):
            if h.when <= self.now and not h.cancelled:
                self.timers.remove(h)
                h.fn(*h.args)

    @property
    def pending(self) -> int:
        return sum(not h.cancelled for h in self.timers)


def _gate() -> tuple[ReadGate, Transport, Loop]:
    gate, t, loop = ReadGate(), Transport(), Loop()
    gate.attach(t, loop)  # type: ignore[arg-type]
    return gate, t, loop


def test_timed_pause_resumes_on_its_own_and_keeps_the_later_end() -> None:
    gate, t, loop = _gate()
    gate.pause_for(0.5, loop)  # type: ignore[arg-type]
    gate.pause_for(0.1, loop)  # type: ignore[arg-type]  # shorter: changes nothing
    assert not t.reading
    assert loop.pending == 1
    loop.advance(0.3)
    assert not t.reading
    gate.pause_for(1.0, loop)  # type: ignore[arg-type]  # longer: moves the end (still one timer)
    assert loop.pending == 1
    loop.advance(0.5)
    assert not t.reading
    loop.advance(0.6)
    assert t.reading
    assert t.calls == ["pause", "resume"]
    gate.pause_for(0, loop)  # type: ignore[arg-type]  # nothing to wait for
    assert t.reading
    assert loop.pending == 0


def test_another_reason_still_holds_after_the_throttle_ends() -> None:
    gate, t, loop = _gate()
    gate.pause("upstream-buffer-full")
    gate.pause_for(0.1, loop, THROTTLED)  # type: ignore[arg-type]
    loop.advance(0.2)
    assert not t.reading
    assert gate.paused
    gate.resume("upstream-buffer-full")
    assert t.reading


def test_a_cancelled_timer_never_resumes() -> None:
    gate, t, loop = _gate()
    gate.pause_for(0.1, loop)  # type: ignore[arg-type]
    gate.cancel_timer()
    loop.advance(1.0)
    assert not t.reading
