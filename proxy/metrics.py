"""Prometheus metrics of the proxy's data path.

Children of labelled metrics are resolved once and cached, because ``labels()`` takes a lock
and builds a tuple on every call: on the per-request path kgate only calls ``inc()``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from codec import api

CONNECTIONS = Gauge("kgate_client_connections", "Open client connections", ["cluster"])
CONNECTIONS_TOTAL = Counter("kgate_accepted_connections_total", "Accepted client connections", ["cluster"])
REQUESTS = Counter("kgate_requests_total", "Requests forwarded upstream", ["cluster", "api_key"])
CLOSED_ERRORS = Counter(
    "kgate_connections_closed_on_error_total",
    "Connections kgate closed because of bad input",
    ["cluster", "reason"],
)
REWRITES = Counter(
    "kgate_address_rewrites_total", "Responses whose broker addresses were rewritten", ["cluster", "api_key"]
)
NODE_LISTENERS = Gauge("kgate_node_listeners", "Per-node listeners open", ["cluster"])
UPSTREAM_CONNECT_FAILURES = Counter(
    "kgate_upstream_connect_failures_total", "Failed upstream connection attempts", ["cluster"]
)


class ClusterMetrics:
    """The metric children of one virtual cluster, resolved once."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.connections = CONNECTIONS.labels(cluster)
        self.connections_total = CONNECTIONS_TOTAL.labels(cluster)
        self.node_listeners = NODE_LISTENERS.labels(cluster)
        self.upstream_connect_failures = UPSTREAM_CONNECT_FAILURES.labels(cluster)
        self._requests: dict[int, Counter] = {}
        self._rewrites: dict[int, Counter] = {}

    def request(self, api_key: int) -> Counter:
        child = self._requests.get(api_key)
        if child is None:
            # unknown keys share one child: a client's garbage must not grow the metric without bound
            if api_key not in api.API_INFO:
                return self.request(-1) if api_key != -1 else self._unknown()
            child = self._requests[api_key] = REQUESTS.labels(self.cluster, str(api_key))
        return child

    def _unknown(self) -> Counter:
        child = self._requests[-1] = REQUESTS.labels(self.cluster, "unknown")
        return child

    def rewrite(self, api_key: int) -> Counter:
        child = self._rewrites.get(api_key)
        if child is None:
            child = self._rewrites[api_key] = REWRITES.labels(self.cluster, str(api_key))
        return child

    def closed_on_error(self, reason: str) -> None:
        CLOSED_ERRORS.labels(self.cluster, reason).inc()
