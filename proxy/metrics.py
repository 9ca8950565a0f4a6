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
from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kgate.codec import api

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
NODE_LISTENER_BIND_FAILURES = Counter(
    "kgate_node_listener_bind_failures_total",
    "Failed attempts to bind a node's listener port (retried with backoff)",
    ["cluster"],
)
REFUSED_CONNECTIONS = Counter(
    "kgate_connections_refused_total",
    "Client connections closed as they arrived, by reason (max_connections)",
    ["cluster", "reason"],
)
TIMEOUTS = Counter(
    "kgate_connection_timeouts_total",
    "Connections closed by a timeout: idle, frame (a request not received whole in time), upstream",
    ["cluster", "kind"],
)
SELF_CONNECTIONS_REFUSED = Counter(
    "kgate_self_connections_refused_total",
    "Upstream connections that reached one of kgate's own listeners and were closed (a forwarding loop)",
    ["cluster"],
)
SELF_ADDRESS_REFUSED = Counter(
    "kgate_self_address_refused_total",
    "Broker addresses in responses that named one of kgate's own addresses and were not learned",
    ["cluster"],
)

UNKNOWN = -1  # api keys (and versions) kgate does not know share one label: garbage must not grow the metric


class ClusterMetrics:
    """The metrics of one virtual cluster."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.connections = CONNECTIONS.labels(cluster)
        self.connections_total = CONNECTIONS_TOTAL.labels(cluster)
        self.node_listeners = NODE_LISTENERS.labels(cluster)
        self.upstream_connect_failures = UPSTREAM_CONNECT_FAILURES.labels(cluster)
        self.node_listener_bind_failures = NODE_LISTENER_BIND_FAILURES.labels(cluster)
        self.self_connections_refused = SELF_CONNECTIONS_REFUSED.labels(cluster)
        self.self_address_refused = SELF_ADDRESS_REFUSED.labels(cluster)
        self.requests: defaultdict[tuple[int, int], int] = defaultdict(int)  # (api key, version) -> count
        self.rewrites: defaultdict[int, int] = defaultdict(int)
        _LIVE.add(self)

    def count_request(self, api_key: int, api_version: int) -> None:
        info = api.API_INFO.get(api_key)
        if info is None:
            self.requests[(UNKNOWN, UNKNOWN)] += 1
        elif 0 <= api_version <= info.max_version:
            self.requests[(api_key, api_version)] += 1
        else:
            self.requests[(api_key, UNKNOWN)] += 1

    def count_rewrite(self, api_key: int) -> None:
        self.rewrites[api_key] += 1

    def refused_connection(self, reason: str) -> None:
        REFUSED_CONNECTIONS.labels(self.cluster, reason).inc()

    def timed_out(self, kind: str) -> None:
        TIMEOUTS.labels(self.cluster, kind).inc()

    def closed_on_error(self, reason: str) -> None:
        CLOSED_ERRORS.labels(self.cluster, reason).inc()


_LIVE: weakref.WeakSet[ClusterMetrics] = weakref.WeakSet()


def _label(value: int) -> str:
    return "unknown" if value == UNKNOWN else str(value)


class _DataPathCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        requests = CounterMetricFamily(
            "kgate_requests",
            "Requests received from clients, by api key and version (which clients use topic ids, for one)",
            labels=["cluster", "api_key", "api_version"],
        )
        rewrites = CounterMetricFamily(
            "kgate_address_rewrites", "Responses kgate rewrote (addresses, ApiVersions)", labels=["cluster", "api_key"]
        )
        counts: dict[tuple[str, str, str], int] = defaultdict(int)
        for m in list(_LIVE):
            for (key, version), n in list(m.requests.items()):
                counts[(m.cluster, _label(key), _label(version))] += n
        for labels, n in sorted(counts.items()):
            requests.add_metric(list(labels), n)
        rewritten: dict[tuple[str, str], int] = defaultdict(int)
        for m in list(_LIVE):
            for key, n in list(m.rewrites.items()):
                rewritten[(m.cluster, _label(key))] += n
        for key_labels, n in sorted(rewritten.items()):
            rewrites.add_metric(list(key_labels), n)
        yield requests
        yield rewrites
        from kgate.proxy.held_bytes import HELD  # imported here: held_bytes is data path, metrics only reads it

        yield GaugeMetricFamily(
            "kgate_held_request_bytes", "Request bytes held whole across all connections", value=HELD.total
        )
        yield GaugeMetricFamily(
            "kgate_held_request_bytes_peak", "Highest kgate_held_request_bytes since start", value=HELD.peak
        )
        yield GaugeMetricFamily(
            "kgate_held_cap_paused_connections",
            "Connections whose reading is paused because held request bytes are over proxy.max_held_bytes",
            value=HELD.paused,
        )


REGISTRY.register(_DataPathCollector())
