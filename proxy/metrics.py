"""Prometheus metrics of the proxy's data path.

Per-request and per-connection counts are plain integers collected at scrape time: a prometheus
``Counter.inc`` takes a lock and cost about a tenth of kgate's CPU on a Metadata round trip, and
the three a connection paid (open gauge up and down, accepted counter) were ~3% of a short-lived
connection's cost. Rare events (errors, timeouts) use ordinary metrics with their children
resolved once.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kgate.codec import api

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


def request_label(api_key: int, api_version: int) -> tuple[int, int]:
    """The (api key, version) a request is counted under: unknown ones share ``UNKNOWN``."""
    info = api.API_INFO.get(api_key)
    if info is None:
        return (UNKNOWN, UNKNOWN)
    if 0 <= api_version <= info.max_version:
        return (api_key, api_version)
    return (api_key, UNKNOWN)


class ClusterMetrics:
    """The metrics of one virtual cluster."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.open_connections = 0  # kgate_client_connections
        self.accepted_connections = 0  # kgate_accepted_connections_total
        self.node_listeners = NODE_LISTENERS.labels(cluster)
        self.upstream_connect_failures = UPSTREAM_CONNECT_FAILURES.labels(cluster)
        self.node_listener_bind_failures = NODE_LISTENER_BIND_FAILURES.labels(cluster)
        self.self_connections_refused = SELF_CONNECTIONS_REFUSED.labels(cluster)
        self.self_address_refused = SELF_ADDRESS_REFUSED.labels(cluster)
        self.requests: defaultdict[tuple[int, int], int] = defaultdict(int)  # (api key, version) -> count
        self.rewrites: defaultdict[int, int] = defaultdict(int)
        _LIVE.add(self)

    def count_request(self, api_key: int, api_version: int) -> None:
        self.requests[request_label(api_key, api_version)] += 1

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
        open_now = GaugeMetricFamily("kgate_client_connections", "Open client connections", labels=["cluster"])
        accepted = CounterMetricFamily("kgate_accepted_connections", "Accepted client connections", labels=["cluster"])
        per_cluster: dict[str, list[int]] = {}
        for m in list(_LIVE):
            both = per_cluster.setdefault(m.cluster, [0, 0])
            both[0] += m.open_connections
            both[1] += m.accepted_connections
        for name, (n_open, n_accepted) in sorted(per_cluster.items()):
            open_now.add_metric([name], n_open)
            accepted.add_metric([name], n_accepted)
        yield open_now
        yield accepted
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
