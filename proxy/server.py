"""Process lifecycle: start every virtual cluster, serve until a signal, drain, exit.

SIGTERM/SIGINT: stop accepting, let requests already in flight get their responses for up
to ``drain_timeout_s``, then close every connection and return exit code 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable

from config import ConfigError, KgateConfig
from filters.chain import FilterChain
from filters.registry import build_filters
from proxy.cluster import VirtualCluster

log = logging.getLogger("kgate.server")


class Proxy:
    """All virtual clusters of one kgate process."""

    def __init__(self, config: KgateConfig) -> None:
        self.config = config
        self.clusters = [
            VirtualCluster(vc, config.proxy, FilterChain(build_filters(config.filters)), config.topic_names)
            for vc in config.virtual_clusters
        ]

    async def start(self) -> None:
        started: list[VirtualCluster] = []
        try:
            for cluster in self.clusters:
                await cluster.start()
                started.append(cluster)
        except BaseException:
            for cluster in started:
                cluster.stop_accepting()
            raise

    async def shutdown(self) -> None:
        """Stop accepting and reading, let owed answers arrive (bounded), close everything.

        Reading pauses first, so a connection stops taking new requests (whose answers would be
        lost at close) and closes as soon as it owes nothing; a long-poll Fetch still gets its
        answer. kgate's own upstream connections close last, so lookups in flight can finish.
        """
        for cluster in self.clusters:
            cluster.stop_accepting()
            cluster.begin_drain()
        deadline = time.monotonic() + self.config.proxy.drain_timeout_s
        while time.monotonic() < deadline:
            for cluster in self.clusters:
                cluster.close_drained()
            if not any(cluster.connections for cluster in self.clusters):
                break
            await asyncio.sleep(0.02)
        else:
            log.warning(
                "drain timeout: closing with %d request(s) still in flight",
                sum(c.inflight() for c in self.clusters),
            )
        for cluster in self.clusters:
            cluster.close_connections()
        for cluster in self.clusters:
            await cluster.wait_closed()


def _start_metrics(config: KgateConfig) -> None:
    if config.metrics.listen is None:
        return
    from prometheus_client import start_http_server

    start_http_server(config.metrics.listen.port, addr=config.metrics.listen.host)
    log.info("metrics on http://%s/metrics", config.metrics.listen)


async def serve(
    config: KgateConfig,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    on_started: Callable[[Proxy], None] | None = None,
) -> None:
    """Run until SIGTERM/SIGINT (or ``stop`` is set, for embedding and tests), then drain and return."""
    proxy = Proxy(config)
    await proxy.start()
    _start_metrics(config)
    loop = asyncio.get_running_loop()
    signals = stop is None
    stop = stop or asyncio.Event()
    if signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    log.info("kgate ready")
    if on_started is not None:
        on_started(proxy)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
        log.info("stopping: draining")
    finally:
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        await proxy.shutdown()
    log.info("kgate stopped")


def run(config: KgateConfig) -> int:
    """Entry point used by the CLI: serve on uvloop; the exit code for the process."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        uvloop = None
    try:
        if uvloop is not None:
            uvloop.run(serve(config))
        else:
            asyncio.run(serve(config))
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    except ConfigError as exc:
        log.error("config error: %s", exc)
        return 2
    return 0
