"""What a live connection keeps in memory once its broker connection is up.

A connection can stay open for hours, and the cycle collector walks every object it holds each
time a collection reaches its generation: with hundreds of clients connected that walk is a cost
per connection the raw relay does not pay (docs/performance.md, 2026-11-27 "a connection's
set-up, its close line and the sweep"). The task that connected upstream is finished once the
connection is adopted; holding it would keep the task, its coroutine and its context (four
tracked objects) for the connection's whole life. A real kgate in-process in front of Tansu.
"""

from __future__ import annotations

import asyncio
import gc
import time
import types

from support.inproc_kgate import InprocKgate, kgate_in_process  # noqa: F401  (the kgate fixture)
from support.wire import RawClient


def _held_tasks(k: InprocKgate) -> list[str]:
    """The tasks and coroutines the one client connection refers to (read on kgate's loop)."""

    def held() -> list[str] | None:
        conns = list(k.cluster.connections)
        if len(conns) != 1:
            return None
        return [
            type(o).__name__ for o in gc.get_referents(conns[0]) if isinstance(o, asyncio.Task | types.CoroutineType)
        ]

    deadline = time.monotonic() + 5
    while (found := k.call(held)) is None:
        assert time.monotonic() < deadline, "kgate never registered the connection"
        time.sleep(0.01)
    return found


def test_a_connected_connection_keeps_no_finished_connect_task(kgate: InprocKgate) -> None:
    with RawClient(kgate.port) as c:
        c.api_versions()  # its answer came through the broker connection: the connect task has ended
        c.metadata()
        assert _held_tasks(kgate) == []
