"""Configuration reload (SIGHUP, ``POST /reload``): read, check, then change what runs.

Order matters, so that a bad new config changes nothing:

1. read and validate the file (config/loader.py: the same checks as start-up, key paths named);
2. plan it against the running config (config/reload_plan.py: what may change at all);
3. build every new filter chain and every added cluster, and check each added cluster's
   bootstrap port can be bound;
4. only then apply: removed clusters stop accepting and drain (as at shutdown, bounded by
   ``drain_timeout_s``), added clusters start, replaced chains take over new requests
   (proxy/sansio/chain_handover.py).

Steps 1-3 fail without side effects: the reload is logged with its error, counted as a failure
and the old config stays fully in force. Step 4 can still fail in one way: a port free at step 3
and taken by another process a moment later. That cluster is then left out (logged, counted as
a failure); the rest of the reload holds, and the next reload tries to add that cluster again.

Reloads run one at a time (a SIGHUP during a ``POST /reload`` waits for it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client import Counter, Gauge

from kgate.config import ConfigError, KgateConfig
from kgate.config.reload_plan import ReloadPlan, plan_reload
from kgate.filters.chain import FilterChain
from kgate.filters.registry import build_filters
from kgate.proxy.control.readiness import UpstreamState
from kgate.proxy.runtime import frozen_heap
from kgate.proxy.runtime.cluster import VirtualCluster, _bind

if TYPE_CHECKING:
    from kgate.proxy.control.admin import AdminServer
    from kgate.proxy.control.readiness import Readiness


class Reloadable(Protocol):
    """What a ``Reloader`` changes (``Proxy``, proxy/runtime/server.py; a protocol, as the server makes the
    reloader: no import cycle)."""

    config: KgateConfig
    clusters: list[VirtualCluster]

    @property
    def readiness(self) -> Readiness: ...
    @property
    def admin(self) -> AdminServer | None: ...


log = logging.getLogger("kgate.reload")

RELOADS = Counter("kgate_config_reloads", "Configuration reloads (SIGHUP, POST /reload) by result", ["result"])
RELOADS.labels("success")
RELOADS.labels("failure")
LAST_SUCCESS = Gauge(
    "kgate_config_last_reload_success_timestamp_seconds",
    "Unix time of the last successful configuration load (start-up counts as one)",
)

#: what re-reads the config a reload applies (the CLI's ``--config`` file, with the CLI's overrides)
ConfigSource = Callable[[], KgateConfig]


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    message: str  # what changed, or the error

    def as_json(self) -> dict[str, str]:
        return {"result": "success" if self.ok else "failure", "message": self.message}


class Reloader:
    """Applies reloads to one ``Proxy``."""

    def __init__(self, proxy: Reloadable, source: ConfigSource | None) -> None:
        self.proxy = proxy
        self.source = source
        self._lock = asyncio.Lock()
        self._drains: set[asyncio.Task[None]] = set()
        LAST_SUCCESS.set_to_current_time()

    async def reload(self, trigger: str) -> ReloadResult:
        async with self._lock:
            if self.proxy.readiness.draining:
                return self._failed(trigger, "kgate is shutting down")
            try:
                new, plan, chains, added = self._prepare()
            except ConfigError as exc:
                return self._failed(trigger, str(exc))
            except Exception as exc:  # a bug must not take kgate down, nor pass for a success
                log.exception("config reload (%s): unexpected error while preparing", trigger)
                return self._failed(trigger, f"internal error: {exc!r}")
            failed = await self._apply(new, plan, chains, added)
            if failed:
                keep = tuple(vc for vc in new.virtual_clusters if vc.name not in failed)
                self.proxy.config = dataclasses.replace(new, virtual_clusters=keep)
                return self._failed(trigger, f"{plan.summary()}; but " + "; ".join(failed.values()))
            self.proxy.config = new
            RELOADS.labels("success").inc()
            LAST_SUCCESS.set_to_current_time()
            log.info("config reloaded (%s): %s", trigger, plan.summary())
            return ReloadResult(True, plan.summary())

    def _failed(self, trigger: str, error: str) -> ReloadResult:
        RELOADS.labels("failure").inc()
        log.error("config reload (%s) failed; the running config stays in force: %s", trigger, error)
        return ReloadResult(False, error)

    # -- steps 1-3: no side effects -------------------------------------------------------------
    def _prepare(self) -> tuple[KgateConfig, ReloadPlan, dict[str, FilterChain], list[VirtualCluster]]:
        running = self.proxy.config
        if self.source is None:
            new = running  # embedded use without a source: a reload that changes nothing
        else:
            new = self.source()
        plan = plan_reload(running, new)
        chains: dict[str, FilterChain] = {}
        for i, vc in enumerate(new.virtual_clusters):
            if vc.name in plan.chains_replaced or vc.name in plan.added:
                where = f"virtual_clusters[{i}].filters" if vc.filters is not None else "filters"
                try:
                    chains[vc.name] = FilterChain(build_filters(new.chain_for(vc)))
                except Exception as exc:  # a filter's constructor: its config passed validation
                    raise ConfigError("", where, f"cluster {vc.name}: a filter failed to build: {exc}") from exc
        freed = {(c.cfg.listen.host, c.cfg.listen.port) for c in self.proxy.clusters if c.name in plan.removed}
        added: list[VirtualCluster] = []
        for i, vc in enumerate(new.virtual_clusters):
            if vc.name not in plan.added:
                continue
            if (vc.listen.host, vc.listen.port) not in freed:
                try:
                    _bind(vc.listen.host, vc.listen.port).close()
                except OSError as exc:
                    raise ConfigError(
                        "",
                        f"virtual_clusters[{i}].listen",
                        f"cluster {vc.name}: cannot listen on {vc.listen}: {exc.strerror or exc}",
                    ) from None
            try:
                added.append(
                    VirtualCluster(
                        vc,
                        new.proxy,
                        chains[vc.name],
                        new.topic_names,
                        exchange_metrics=new.admin.listen is not None,
                        topic_metrics=new.admin.topic_metrics,
                        client_metrics=new.admin.client_metrics,
                    )
                )
            except OSError as exc:  # TLS files unreadable since the loader read them
                raise ConfigError("", f"virtual_clusters[{i}]", str(exc)) from None
        return new, plan, chains, added

    # -- step 4 ---------------------------------------------------------------------------------
    async def _apply(
        self, new: KgateConfig, plan: ReloadPlan, chains: dict[str, FilterChain], added: list[VirtualCluster]
    ) -> dict[str, str]:
        """Change what runs; the clusters that could not start, with why."""
        proxy = self.proxy
        for cluster in [c for c in proxy.clusters if c.name in plan.removed]:
            proxy.clusters.remove(cluster)
            proxy.readiness.upstream.pop(cluster.name, None)
            cluster.stop_accepting()
            cluster.begin_drain()
            task = asyncio.get_running_loop().create_task(self._drain(cluster))
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)
        failed: dict[str, str] = {}
        for cluster in added:
            try:
                await cluster.start()
            except OSError as exc:
                failed[cluster.name] = str(exc)
                cluster.stop_accepting()
                await cluster.wait_closed()
                continue
            proxy.readiness.upstream[cluster.name] = UpstreamState(since=time.monotonic())
            if proxy.admin is not None:  # /readyz right away, rather than "not probed" until the next round
                await proxy.readiness.probe(cluster)
            proxy.clusters.append(cluster)
            names = [f.name for f in new.chain_for(plan.clusters[cluster.name])]
            log.info("cluster %s: filter chain: %s", cluster.name, " -> ".join(names) if names else "(none)")
        by_name = {c.name: c for c in proxy.clusters}
        for name in plan.chains_replaced:
            by_name[name].replace_chain(chains[name])
            names = [f.name for f in new.chain_for(plan.clusters[name])]
            log.info("cluster %s: new filter chain: %s", name, " -> ".join(names) if names else "(none)")
        order = {vc.name: i for i, vc in enumerate(new.virtual_clusters)}
        proxy.clusters.sort(key=lambda c: order.get(c.name, len(order)))
        return failed

    async def _drain(self, cluster: VirtualCluster) -> None:
        """A removed cluster: let owed answers arrive (bounded), then close, as shutdown does."""
        deadline = time.monotonic() + cluster.settings.drain_timeout_s
        while time.monotonic() < deadline:
            cluster.close_drained()
            if not cluster.connections:
                break
            await asyncio.sleep(0.02)
        else:
            log.warning(
                "cluster %s (removed): drain timeout: closing with %d request(s) still in flight",
                cluster.name,
                cluster.inflight(),
            )
        cluster.close_connections()
        await cluster.wait_closed()
        frozen_heap.release_retired()  # the cluster was built before gc.freeze(): let its cycles go
        log.info("cluster %s: removed and drained", cluster.name)

    @property
    def lock(self) -> asyncio.Lock:
        """Held while a reload runs: shutdown takes it, so it never meets a half-applied reload."""
        return self._lock

    async def close(self) -> None:
        """Shutdown: removed clusters still draining finish (their drain is bounded too)."""
        if self._drains:
            await asyncio.wait(set(self._drains))
