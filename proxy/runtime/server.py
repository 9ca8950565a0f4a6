"""Process lifecycle: start every virtual cluster, serve until a signal, drain, exit.

SIGTERM/SIGINT: stop accepting, let requests already in flight get their responses for up
to ``drain_timeout_s``, then close every connection and return exit code 0. A second
SIGTERM/SIGINT during the drain cuts it short: every connection closes at once and the exit code
is 1, so a supervisor can tell that answers may have been lost. SIGHUP reloads the configuration
(proxy/runtime/reload.py; also ``POST /reload`` on the admin listener): new filter chains for new
requests, virtual clusters added and removed, a bad file rejected with the old config kept.

The admin listener (proxy/control/admin.py) opens first and closes last: ``/livez`` answers while the
clusters start, and ``/readyz`` says "draining" for the whole drain, so a load balancer stops
sending new clients before any connection is closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable

from kgate.config import ConfigError, KgateConfig
from kgate.filters.chain import FilterChain
from kgate.filters.registry import build_filters
from kgate.proxy.carrier.fd_limit import raise_open_files_limit
from kgate.proxy.control.admin import AdminServer, MetricsSource, registry_metrics
from kgate.proxy.control.readiness import Readiness
from kgate.proxy.runtime import frozen_heap
from kgate.proxy.runtime.cluster import VirtualCluster
from kgate.proxy.runtime.config_view import config_json
from kgate.proxy.runtime.reload import ConfigSource, Reloader, ReloadResult
from kgate.proxy.runtime.worker_env import worker_index
from kgate.proxy.runtime.workers import report_admin_port, watch_parent
from kgate.proxy.sansio.response_tail import LEADER_HINTS_DEPRECATED

log = logging.getLogger("kgate.server")


class Proxy:
    """All virtual clusters of one kgate process."""

    def __init__(
        self, config: KgateConfig, metrics: MetricsSource = registry_metrics, source: ConfigSource | None = None
    ) -> None:
        self.config = config
        self.forced = asyncio.Event()  # a second stop signal: drain no longer
        self.clusters = [
            VirtualCluster(
                vc,
                config.proxy,
                FilterChain(build_filters(config.chain_for(vc))),
                config.topic_names,
                exchange_metrics=config.admin.listen is not None,
                topic_metrics=config.admin.topic_metrics,
                client_metrics=config.admin.client_metrics,
            )
            for vc in config.virtual_clusters
        ]
        admin = config.admin
        self.readiness = Readiness(self.clusters, admin.probe_interval_s, admin.probe_timeout_s)
        self.reloader = Reloader(self, source)
        self.admin = (
            AdminServer(admin.listen, self.readiness, metrics, reload=self.reload, config=self.config_json)
            if admin.listen is not None
            else None
        )

    async def config_json(self) -> bytes:
        """``GET /config``: the configuration in force now (after any reload), secrets redacted."""
        return config_json(self.config)

    async def reload(self, trigger: str = "POST /reload") -> ReloadResult:
        """Re-read the config and apply what may change while running (proxy/runtime/reload.py)."""
        return await self.reloader.reload(trigger)

    async def start(self) -> None:
        async with self.reloader.lock:  # a SIGHUP during start-up waits for every listener to open
            await self._start()

    async def _start(self) -> None:
        raise_open_files_limit()
        if self.config.admin.from_metrics_listen:
            log.warning("metrics.listen is deprecated: it now serves the admin listener; rename it to admin.listen")
        if self.config.proxy.leader_hints_written:
            log.warning(LEADER_HINTS_DEPRECATED)
        if self.admin is not None:
            await self.admin.start()
        for cluster in self.clusters:
            names = [f.name for f in self.config.chain_for(cluster.cfg)]
            log.info("cluster %s: filter chain: %s", cluster.name, " -> ".join(names) if names else "(none)")
        started: list[VirtualCluster] = []
        try:
            for cluster in self.clusters:
                await cluster.start()
                started.append(cluster)
        except BaseException:
            for cluster in started:
                cluster.stop_accepting()
            if self.admin is not None:
                await self.admin.close()
            raise
        self.readiness.started = True
        if self.admin is not None:  # /readyz is the probe's only reader: no admin listener, no probe traffic
            self.readiness.start()

    async def shutdown(self) -> None:
        """Stop accepting and reading, let owed answers arrive (bounded), close everything.

        Reading pauses first, so a connection stops taking new requests (whose answers would be
        lost at close) and closes as soon as it owes nothing; a long-poll Fetch still gets its
        answer. kgate's own upstream connections close last, so lookups in flight can finish.
        """
        self.readiness.draining = True
        async with self.reloader.lock:  # a reload under way finishes first (it is bounded)
            pass
        for cluster in self.clusters:
            cluster.stop_accepting()
            cluster.begin_drain()
        deadline = time.monotonic() + self.config.proxy.drain_timeout_s
        while time.monotonic() < deadline and not self.forced.is_set():
            for cluster in self.clusters:
                cluster.close_drained()
            if not any(cluster.connections for cluster in self.clusters):
                break
            await asyncio.sleep(0.02)
        else:
            if self.forced.is_set():
                log.warning(
                    "second stop signal: closing with %d request(s) still in flight",
                    sum(c.inflight() for c in self.clusters),
                )
            else:
                log.warning(
                    "drain timeout: closing with %d request(s) still in flight",
                    sum(c.inflight() for c in self.clusters),
                )
        for cluster in self.clusters:
            cluster.close_connections()
        for cluster in self.clusters:
            await cluster.wait_closed()
        await self.reloader.close()
        await self.readiness.stop()
        if self.admin is not None:
            await self.admin.close()


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _add_signal_handlers(loop: asyncio.AbstractEventLoop, proxy: Proxy, stop: asyncio.Event) -> None:
    """SIGTERM drains (a second one cuts the drain short), SIGHUP reloads; a ``--workers`` worker
    ignores SIGINT (a terminal's Ctrl-C reaches the whole group; the parent forwards SIGTERM)."""

    def on_stop_signal() -> None:
        if stop.is_set():
            proxy.forced.set()  # the second one: stop waiting for the drain
        else:
            stop.set()

    reloads: set[asyncio.Task[ReloadResult]] = set()

    def on_hup() -> None:
        task = loop.create_task(proxy.reload("SIGHUP"))
        reloads.add(task)  # held: a task only the loop references may be collected mid-reload
        task.add_done_callback(reloads.discard)

    def on_worker_int() -> None:
        log.debug("SIGINT ignored: a --workers worker stops on the SIGTERM its parent forwards")

    worker = worker_index() is not None
    loop.add_signal_handler(signal.SIGTERM, on_stop_signal)
    loop.add_signal_handler(signal.SIGINT, on_worker_int if worker else on_stop_signal)
    loop.add_signal_handler(signal.SIGHUP, on_hup)


def _remove_signal_handlers(loop: asyncio.AbstractEventLoop) -> None:
    for sig in _SIGNALS:
        loop.remove_signal_handler(sig)


def _ignore_late_signals(loop: asyncio.AbstractEventLoop) -> None:
    """The drain is over and the process is on its way out: a late stop signal (a terminal's
    SIGINT beside a supervisor's SIGTERM) is ignored. With the default action restored it killed
    the exiting process, turning a clean stop into status 143. A hung exit still yields to SIGKILL."""
    _remove_signal_handlers(loop)
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


async def serve(
    config: KgateConfig,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    on_started: Callable[[Proxy], None] | None = None,
    source: ConfigSource | None = None,
    freeze_heap: bool = False,
) -> bool:
    """Run until SIGTERM/SIGINT (or ``stop`` is set, for embedding and tests), then drain and return.

    ``source`` re-reads the config for a reload (SIGHUP, ``POST /reload``); None: a reload
    re-applies ``config`` (nothing changes, still counted). Returns whether a second stop signal
    cut the drain short. ``freeze_heap`` (the CLI's ``run``) moves everything alive once kgate is
    ready out of the garbage collector's sight (``proxy/runtime/frozen_heap.py``).
    """
    proxy = Proxy(config, source=source)
    loop = asyncio.get_running_loop()
    signals = stop is None
    stop = stop or asyncio.Event()
    if signals:  # before the listeners open: a signal that finds them open finds its handler too
        _add_signal_handlers(loop, proxy, stop)
    try:
        await proxy.start()
    except BaseException:
        if signals:
            _remove_signal_handlers(loop)
        raise
    # "listening", not "ready": the upstream may still be unreachable, which /readyz reports
    log.info("kgate listening (upstream readiness: /readyz)")
    if freeze_heap:
        frozen_heap.freeze()
    watcher = None
    if worker_index() is not None:  # --workers: tell the parent where this worker's admin listener is
        if proxy.admin is not None:
            report_admin_port(proxy.admin.port)
        watcher = loop.create_task(watch_parent(stop))
    if on_started is not None:
        on_started(proxy)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
        log.info("stopping: draining (a second SIGTERM/SIGINT closes everything at once)")
        await proxy.shutdown()
    finally:
        if watcher is not None:
            watcher.cancel()
        if signals:
            _ignore_late_signals(loop)
        if not stop.is_set():
            await proxy.shutdown()  # an exception before the signal: still close what was opened
    log.info("kgate stopped")
    return proxy.forced.is_set()


def run(config: KgateConfig, source: ConfigSource | None = None) -> int:
    """Entry point used by the CLI: serve on uvloop; the exit code for the process."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        uvloop = None  # type: ignore[assignment]
    try:
        if uvloop is not None:
            forced = uvloop.run(serve(config, source=source, freeze_heap=True))
        else:
            forced = asyncio.run(serve(config, source=source, freeze_heap=True))
    except OSError as exc:
        log.error("cannot start: %s", exc.strerror if exc.errno is not None and exc.strerror else exc)
        return 1
    except ConfigError as exc:
        log.error("config error: %s", exc)
        return 2
    return 1 if forced else 0
