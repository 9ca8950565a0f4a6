"""Whether this kgate process should receive new clients: what ``/readyz`` answers.

Ready means: every virtual cluster's listeners are bound (the bootstrap listener and the listener
of every node the upstream's last answer named), every cluster's upstream answered kgate
recently, and the process is not draining. A load balancer or Kubernetes then sends new
connections only to instances that can serve them, and stops sending them to one that is
shutting down, before it closes anything.

The upstream is judged by a cheap periodic probe rather than by clients' connection outcomes:
a probe is one Metadata request for no topics over kgate's own connection (the one node
discovery and topic-id lookups use), so it proves the cluster *answers Kafka*, not just that a
port accepts, and it costs the data path nothing (no counter, no timestamp per connection).
Each probe is bounded by ``admin.probe_timeout_s``; ``/readyz`` only reads the last result, so
a scrape never waits on the network. The cost is latency: a broker that stops is noticed within
``probe_interval_s + probe_timeout_s`` (5 + 2 s by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgate.codec import api
from kgate.codec.generated.api_keys import METADATA
from kgate.proxy.carrier.upstream_client import UpstreamError

if TYPE_CHECKING:
    from kgate.proxy.runtime.cluster import VirtualCluster

log = logging.getLogger("kgate.readiness")


@dataclass
class UpstreamState:
    """The last probe's outcome for one cluster."""

    ok: bool | None = None  # None: not probed yet
    detail: str = "not probed yet"
    since: float = 0.0  # monotonic time the state last changed


class Readiness:
    """Probes every cluster's upstream and answers whether the process is ready, and why not."""

    def __init__(self, clusters: list[VirtualCluster], interval_s: float, timeout_s: float) -> None:
        self.clusters = clusters
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.started = False  # every cluster's listeners were opened (Proxy.start returned)
        self.draining = False
        self.upstream: dict[str, UpstreamState] = {c.name: UpstreamState(since=time.monotonic()) for c in clusters}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._probe_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.gather(*(self.probe(c) for c in self.clusters))
            await asyncio.sleep(self.interval_s)

    async def probe(self, cluster: VirtualCluster) -> None:
        request = api.API_INFO[METADATA].request_class(topics=[], allow_auto_topic_creation=False)
        try:
            # asyncio.timeout, not wait_for: wait_for runs the request as a task of its own, and a
            # shutdown that closes kgate's connection mid-probe left that task's UpstreamError
            # unretrieved ("Task exception was never retrieved" in a full test run)
            async with asyncio.timeout(self.timeout_s):
                _version, resp = await cluster.own_client.request(METADATA, request, lo=1, timeout_s=self.timeout_s)
        except (UpstreamError, TimeoutError, OSError) as exc:
            self._record(cluster.name, False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return
        except Exception as exc:  # a bug: logged with its traceback, but probing (and /readyz) go on
            log.exception("cluster %s: readiness probe failed unexpectedly", cluster.name)
            self._record(cluster.name, False, f"internal error: {exc!r}")
            return
        # The answer names every broker: open the listener of any node not served yet, as node
        # discovery does at start. So "ready" implies every node's port is open (an HA fleet's
        # clients may arrive holding addresses another instance gave them), and nodes added to
        # the cluster later get their port within a probe interval, before any client asks.
        for broker in resp.brokers:
            cluster.client_address(broker.node_id, broker.host, broker.port)
        self._record(cluster.name, True, "answered")

    def _record(self, name: str, ok: bool, detail: str) -> None:
        state = self.upstream.get(name)
        if state is None:
            return  # a reload removed the cluster while its probe was out
        if state.ok is not ok:
            if ok:
                again = " again" if state.ok is False else ""
                log.info("cluster %s: upstream reachable%s", name, again, extra={"cluster": name})
            elif state.ok is not None:
                log.warning("cluster %s: upstream unreachable: %s", name, detail, extra={"cluster": name})
            state.since = time.monotonic()
        state.ok = ok
        state.detail = detail

    def report(self) -> tuple[bool, list[str]]:
        """(ready, one line per check): the body of ``/readyz`` says why, for a human at a terminal."""
        now = time.monotonic()
        lines: list[str] = []
        ready = True
        if self.draining:
            ready = False
            lines.append("draining: kgate is shutting down and accepts no new connections")
        elif not self.started:
            ready = False
            lines.append("starting: listeners not open yet")
        for cluster in self.clusters:
            name = cluster.name
            if self.started and not self.draining:
                unbound = cluster.unbound_nodes()
                if cluster.stopping or not cluster.listening():
                    ready = False
                    lines.append(f"cluster {name}: bootstrap listener not open")
                elif unbound:
                    ready = False
                    lines.append(f"cluster {name}: node listener(s) not bound for node id(s) {sorted(unbound)}")
                else:
                    lines.append(f"cluster {name}: listeners bound")
            state = self.upstream[name]
            age = now - state.since
            if state.ok:
                lines.append(f"cluster {name}: upstream reachable (for {age:.1f}s, since its last change of state)")
            else:
                ready = False
                what = "not probed yet" if state.ok is None else f"unreachable for {age:.1f}s: {state.detail}"
                lines.append(f"cluster {name}: upstream {what}")
        return ready, lines
