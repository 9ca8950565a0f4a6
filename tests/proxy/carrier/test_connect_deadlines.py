"""The cluster's one timer for upstream connects (proxy/carrier/connect_deadlines.py), on a real uvloop loop.

Each connect must time out at its own start plus its timeout, as with a timer of its own, whatever
the others do: ended ones never fire, a shorter timeout started later (a reload) fires first.
tests/proxy/carrier/test_connect_timeout.py covers the same against a real black-hole broker.
"""

from __future__ import annotations

import asyncio

import uvloop

from kgate.proxy.carrier.connect_deadlines import ConnectDeadlines


class _Connect:
    def __init__(self, loop: asyncio.AbstractEventLoop, name: str, fired: list[tuple[str, float]]) -> None:
        self.loop, self.name, self.fired = loop, name, fired

    def connect_timed_out(self) -> None:
        self.fired.append((self.name, self.loop.time()))


def _run(scenario: object) -> None:
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(scenario(loop))  # type: ignore[operator]
    finally:
        loop.close()


def test_each_connect_times_out_at_its_own_deadline_and_ended_ones_never() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        fired: list[tuple[str, float]] = []
        d = ConnectDeadlines()
        a, b, c = (_Connect(loop, n, fired) for n in "abc")
        t0 = loop.time()
        d.start(a, loop, 0.10)
        d.start(b, loop, 0.10)
        await asyncio.sleep(0.03)
        d.start(c, loop, 0.10)
        d.end(b)  # connected in time
        await asyncio.sleep(0.25)
        assert [n for n, _ in fired] == ["a", "c"]  # in deadline order, however late a loaded loop runs them
        (_, at_a), (_, at_c) = fired
        assert at_a - t0 >= 0.099  # never early (libuv counts milliseconds)
        assert at_c - t0 >= 0.129
        assert len(d) == 0

    _run(scenario)


def test_a_shorter_timeout_started_later_fires_first() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        fired: list[tuple[str, float]] = []
        d = ConnectDeadlines()
        t0 = loop.time()
        d.start(_Connect(loop, "long", fired), loop, 0.3)
        d.start(_Connect(loop, "short", fired), loop, 0.05)
        await asyncio.sleep(0.4)
        assert [n for n, _ in fired] == ["short", "long"]
        assert fired[0][1] - t0 >= 0.049
        assert fired[1][1] - t0 >= 0.299

    _run(scenario)


def test_nothing_fires_once_every_connect_ended() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        fired: list[tuple[str, float]] = []
        d = ConnectDeadlines()
        for i in range(100):
            who = _Connect(loop, str(i), fired)
            d.start(who, loop, 0.02)
            d.end(who)
        await asyncio.sleep(0.08)
        assert fired == []
        assert len(d) == 0

    _run(scenario)
