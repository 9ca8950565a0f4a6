"""Prometheus metrics of the proxy's data path.

Per-request counts are plain integers collected at scrape time: a prometheus ``Counter.inc``
takes a lock and cost about a tenth of kgate's CPU on a Metadata round trip. Rare events
(connections, errors) use ordinary metrics with their children resolved once.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import REGISTRY, CounterMetricFamily
from prometheus_client.registry import Collector

from codec import api

CONNECTIONS = Gauge("kgate_client_connections", "Open client connections", ["cluster"])
CONNECTIONS_TOTAL = Counter("kgate_accepted_connections_total", "Accepted client connections", ["cluster"])
CLOSED_ERRORS = Counter(
    "kgate_connections_closed_on_error_total",
    "Connections kgate closed because of bad input",
    ["cluster", "reason"],
)
NODE_LISTENERS = Gauge("kgate_node_listeners", "Per-node listeners open", ["cluster"])
UPSTREAM_CONNECT_FAILURES = Counter(
    "kgate_upstream_connect_failures_total", "Failed upstream connection attempts", ["cluster"]
)

UNKNOWN = -1  # api keys kgate does not know share one label: garbage must not grow the metric


class ClusterMetrics:
    """The metrics of one virtual cluster."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.connections = CONNECTIONS.labels(cluster)
        self.connections_total = CONNECTIONS_TOTAL.labels(cluster)
        self.node_listeners = NODE_LISTENERS.labels(cluster)
        self.upstream_connect_failures = UPSTREAM_CONNECT_FAILURES.labels(cluster)
        self.requests: defaultdict[int, int] = defaultdict(int)
        self.rewrites: defaultdict[int, int] = defaultdict(int)
        _LIVE.add(self)

    def count_request(self, api_key: int) -> None:
        if api_key not in api.API_INFO:
            api_key = UNKNOWN
        self.requests[api_key] += 1

    def count_rewrite(self, api_key: int) -> None:
        self.rewrites[api_key] += 1

    def closed_on_error(self, reason: str) -> None:
        CLOSED_ERRORS.labels(self.cluster, reason).inc()


_LIVE: weakref.WeakSet[ClusterMetrics] = weakref.WeakSet()


def _label(api_key: int) -> str:
    return "unknown" if api_key == UNKNOWN else str(api_key)


class _DataPathCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily]:
        requests = CounterMetricFamily(
            "kgate_requests", "Requests received from clients", labels=["cluster", "api_key"]
        )
        rewrites = CounterMetricFamily(
            "kgate_address_rewrites", "Responses kgate rewrote (addresses, ApiVersions)", labels=["cluster", "api_key"]
        )
        totals: dict[tuple[str, str, str], int] = defaultdict(int)
        for m in list(_LIVE):
            for key, n in list(m.requests.items()):
                totals[("r", m.cluster, _label(key))] += n
            for key, n in list(m.rewrites.items()):
                totals[("w", m.cluster, _label(key))] += n
        for (kind, cluster, key), n in sorted(totals.items()):
            (requests if kind == "r" else rewrites).add_metric([cluster, key], n)
        yield requests
        yield rewrites


REGISTRY.register(_DataPathCollector())
