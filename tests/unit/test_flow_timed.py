"""ReadGate.pause_for: a quota throttle stops reading for a while, on a real event loop."""

from __future__ import annotations

import asyncio

from kgate.proxy.flow import THROTTLED, ReadGate


class Transport:
    """Only what the gate calls (a real socket pair is in tests/unit/test_flow.py)."""

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


async def test_timed_pause_resumes_on_its_own_and_keeps_the_later_end() -> None:
    loop = asyncio.get_running_loop()
    gate, t = ReadGate(), Transport()
    gate.attach(t, loop)  # type: ignore[arg-type]
    gate.pause_for(0.05, loop)
    gate.pause_for(0.01, loop)  # shorter: changes nothing
    assert not t.reading
    await asyncio.sleep(0.03)
    assert not t.reading
    gate.pause_for(0.1, loop)  # longer: moves the end
    await asyncio.sleep(0.05)
    assert not t.reading
    await asyncio.sleep(0.1)
    assert t.reading and t.calls == ["pause", "resume"]


async def test_another_reason_still_holds_after_the_throttle_ends() -> None:
    loop = asyncio.get_running_loop()
    gate, t = ReadGate(), Transport()
    gate.attach(t, loop)  # type: ignore[arg-type]
    gate.pause("upstream-buffer-full")
    gate.pause_for(0.01, loop, THROTTLED)
    await asyncio.sleep(0.03)
    assert not t.reading and gate.paused
    gate.resume("upstream-buffer-full")
    assert t.reading


async def test_cancelled_timer_never_fires() -> None:
    loop = asyncio.get_running_loop()
    gate, t = ReadGate(), Transport()
    gate.attach(t, loop)  # type: ignore[arg-type]
    gate.pause_for(0.01, loop)
    gate.cancel_timer()
    await asyncio.sleep(0.03)
    assert not t.reading  # torn down: nobody resumes it
