"""kgate running inside the test process, on its own uvloop thread.

Used where a test needs filters defined in the test module (registered by name, no packaging)
or needs to look at kgate's objects (the resolver's exact counters, the task factory). The
real proxy code runs unchanged; only the process boundary is missing. Tests that check
process behaviour (signals, exit codes, logs) use the subprocess fixture in procs.py instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvloop

from kgate.config import KgateConfig, parse_config
from kgate.proxy.runtime.server import Proxy, serve
from support.ports import free_port, free_port_range


def make_config(upstream: str, filters: list[dict[str, Any]] | None = None, **proxy: Any) -> KgateConfig:
    """A one-cluster config on free loopback ports in front of ``upstream``."""
    listen = free_port()
    base = free_port_range(256)
    data = {
        "log_level": "debug",
        "proxy": {"drain_timeout_s": 2, **proxy},
        "virtual_clusters": [
            {
                "name": "default",
                "listen": f"127.0.0.1:{listen}",
                "advertised_host": "127.0.0.1",
                "upstream": [upstream],
                "node_ports": {"base": base, "count": 256},
            }
        ],
        "filters": filters or [],
    }
    return parse_config(data, "test")


class InprocKgate:
    def __init__(self, config: KgateConfig) -> None:
        self.config = config
        self.loop = uvloop.new_event_loop()
        self.proxy: Proxy | None = None
        self.tasks_created = 0
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kgate-inproc", daemon=True)

    @property
    def bootstrap(self) -> str:
        return str(self.config.virtual_clusters[0].listen)

    @property
    def port(self) -> int:
        return self.config.virtual_clusters[0].listen.port

    @property
    def cluster(self) -> Any:
        assert self.proxy is not None
        return self.proxy.clusters[0]

    def _task_factory(self, loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        self.tasks_created += 1
        return asyncio.Task(coro, loop=loop, **kw)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_task_factory(self._task_factory)

        async def main() -> None:
            self._stop = asyncio.Event()

            def started(p: Proxy) -> None:
                self.proxy = p
                self._ready.set()

            await serve(self.config, stop=self._stop, on_started=started)

        try:
            self.loop.run_until_complete(main())
        except BaseException as exc:  # surfaced by start()/stop()
            self._error = exc
            self._ready.set()
        finally:
            self.loop.close()

    def start(self) -> InprocKgate:
        self._thread.start()
        if not self._ready.wait(15) or self._error is not None:
            raise RuntimeError(f"in-process kgate did not start: {self._error!r}")
        return self

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on kgate's loop and return its result (for reading kgate state safely)."""
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            box.append(fn())
            done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(10)
        return box[0]

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(15)
        if self._error is not None:
            raise self._error


@pytest.fixture(name="kgate")
def kgate_in_process(tansu: Any) -> Iterator[InprocKgate]:
    """``kgate`` as an :class:`InprocKgate` in front of the module's Tansu, for a test module that
    looks at kgate's live objects: ``from support.inproc_kgate import kgate_in_process  # noqa: F401``
    (it then replaces the suite's kgate subprocess fixture in that module only)."""
    k = InprocKgate(make_config(tansu.bootstrap)).start()
    try:
        yield k
    finally:
        k.stop()
