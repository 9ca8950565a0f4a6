"""Prometheus metrics of the proxy's data path.

Per-request and per-connection counts are plain integers collected at scrape time: a prometheus
``Counter.inc`` takes a lock and cost about a tenth of kgate's CPU on a Metadata round trip, and
the three a connection paid (open gauge up and down, accepted counter) were ~3% of a short-lived
connection's cost. Rare events (errors, timeouts) use ordinary metrics with their children
resolved once.

Labels name api keys by their Kafka name (``api="Produce"``), turned from numbers at scrape time
so the data path still counts by integer key. Suspension times go into a histogram kept as plain
ints too (``PlainHistogram``): a suspension already costs a task, but the point is that nothing on
the data path takes a lock.
"""

from __future__ import annotations

import bisect
import platform
import weakref
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from kgate.codec import api
from kgate.codec.api import api_name
from kgate.codec.generated.api_keys import ApiKey
from kgate.proxy.control.logs import LineBudget
from kgate.proxy.sansio.counter import Count

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

TLS_HANDSHAKE_FAILURES = Counter(
    "kgate_tls_handshake_failures_total",
    "TLS handshakes that failed: client (a client to kgate's TLS listener: wrong CA, plaintext, expired"
    " certificate, no handshake in time) and upstream (kgate to a broker: a TLS error)",
    ["cluster", "side"],
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


#: filter outcomes counted per filter: (metric, label value) by verdict value (filters/chain.Verdict)
FILTER_OUTCOMES = {
    "respond": ("decisions", "respond"),
    "drop": ("decisions", "drop"),
    "close": ("decisions", "close"),
    "failed": ("errors", ""),
    "timed-out": ("timeouts", ""),
}
SUSPENSION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class PlainHistogram:
    """A Prometheus histogram as plain numbers: ``observe`` is a bisect and two adds, no lock."""

    __slots__ = ("buckets", "count", "counts", "sum")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.count += 1
        self.sum += value


def _cumulative(buckets: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    """Prometheus' cumulative buckets ("le" label, count) from per-bucket counts."""
    out: list[tuple[str, float]] = []
    total = 0
    for bound, n in zip((*buckets, float("inf")), counts, strict=True):
        total += n
        out.append(("+Inf" if bound == float("inf") else repr(bound), total))
    return out


class ClusterMetrics:
    """The metrics of one virtual cluster."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.open_connections = 0  # kgate_client_connections, kgate_open_connections{side="client"}
        self.open_upstream_connections = 0  # kgate_open_connections{side="upstream"}
        self.accepted_connections = 0  # kgate_accepted_connections_total
        self.suspended = {"request": 0, "response": 0}  # kgate_suspended_messages: now
        self.suspensions = {d: PlainHistogram(SUSPENSION_BUCKETS) for d in ("request", "response")}
        #: (filter, direction, verdict value) -> count, for the verdicts that are not a plain forward
        self.filter_outcomes: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self.node_listeners = NODE_LISTENERS.labels(cluster)
        self.upstream_connect_failures = UPSTREAM_CONNECT_FAILURES.labels(cluster)
        self.node_listener_bind_failures = NODE_LISTENER_BIND_FAILURES.labels(cluster)
        self.self_connections_refused = SELF_CONNECTIONS_REFUSED.labels(cluster)
        self.self_address_refused = SELF_ADDRESS_REFUSED.labels(cluster)
        #: kgate_requests: (api key, version) label -> its count, in a one-item list: the data path holds
        #: the list (``Plans.route``) and bumps ``cell[0]``, a list store where ``counts[label] += 1``
        #: hashed a tuple twice on every request (docs/performance.md, "constants, counters, repeated
        #: answers")
        self.requests: dict[tuple[int, int], Count] = {}
        #: kgate_address_rewrites: api key -> its count, in a one-item list (as ``requests``: the core
        #: holds Metadata's and bumps ``cell[0]``)
        self.rewrites: dict[int, Count] = {}
        #: the cells of the two answers every connection's core rewrites, made once here (proxy/sansio/core.py)
        self.metadata_rewrites = self.rewrite_count(int(ApiKey.METADATA))
        self.api_versions_rewrites = self.rewrite_count(int(ApiKey.API_VERSIONS))
        #: "closing client" warnings: 5 per close reason per 10 s in this cluster (the counter counts all)
        self.close_lines = LineBudget(lines=5, window_ns=10_000_000_000)
        _LIVE.add(self)

    def request_count(self, api_key: int, api_version: int) -> Count:
        """The counter cell of the ``kgate_requests`` label a request of this api key and version counts under."""
        label = request_label(api_key, api_version)
        cell = self.requests.get(label)
        if cell is None:
            cell = self.requests[label] = Count()
        return cell

    def count_request(self, api_key: int, api_version: int) -> None:
        self.request_count(api_key, api_version).n += 1

    def rewrite_count(self, api_key: int) -> Count:
        """The counter cell of ``kgate_address_rewrites`` for answers of this api key."""
        cell = self.rewrites.get(api_key)
        if cell is None:
            cell = self.rewrites[api_key] = Count()
        return cell

    def count_rewrite(self, api_key: int) -> None:
        self.rewrite_count(api_key).n += 1

    def count_filter(self, filter_name: str, direction: str, verdict: str) -> None:
        """A filter's decision that was not a plain forward (or its error, or its timeout)."""
        self.filter_outcomes[(filter_name, direction, verdict)] += 1

    def tls_handshake_failed(self, side: str) -> None:
        """A TLS handshake that failed, ``side`` ``client`` or ``upstream`` (rare: a resolved child)."""
        TLS_HANDSHAKE_FAILURES.labels(self.cluster, side).inc()

    def refused_connection(self, reason: str) -> None:
        REFUSED_CONNECTIONS.labels(self.cluster, reason).inc()

    def timed_out(self, kind: str) -> None:
        TIMEOUTS.labels(self.cluster, kind).inc()

    def closed_on_error(self, reason: str) -> None:
        CLOSED_ERRORS.labels(self.cluster, reason).inc()


_LIVE: weakref.WeakSet[ClusterMetrics] = weakref.WeakSet()


def _label(value: int) -> str:
    return "unknown" if value == UNKNOWN else str(value)


def _build_info() -> GaugeMetricFamily:
    from kgate import __version__

    info = GaugeMetricFamily(
        "kgate_build_info", "kgate's version and the Python it runs on (always 1)", labels=["version", "python"]
    )
    info.add_metric([__version__, f"{platform.python_implementation()} {platform.python_version()}"], 1)
    return info


class _DataPathCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield _build_info()
        requests = CounterMetricFamily(
            "kgate_requests",
            "Requests received from clients, by api and version (which clients use topic ids, for one)",
            labels=["cluster", "api", "api_version"],
        )
        rewrites = CounterMetricFamily(
            "kgate_address_rewrites", "Responses kgate rewrote (addresses, ApiVersions)", labels=["cluster", "api"]
        )
        counts: dict[tuple[str, str, str], int] = defaultdict(int)
        for m in list(_LIVE):
            for (key, version), cell in list(m.requests.items()):
                counts[(m.cluster, api_name(key), _label(version))] += cell.n
        for labels, n in sorted(counts.items()):
            requests.add_metric(list(labels), n)
        rewritten: dict[tuple[str, str], int] = defaultdict(int)
        for m in list(_LIVE):
            for key, cell in list(m.rewrites.items()):
                rewritten[(m.cluster, api_name(key))] += cell.n
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
        yield from _connection_and_filter_metrics(list(_LIVE))
        from kgate.proxy.carrier.held_bytes import HELD  # imported here: held_bytes is data path, metrics only reads it

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


def _connection_and_filter_metrics(live: list[ClusterMetrics]) -> Iterator[Metric]:
    sides = GaugeMetricFamily(
        "kgate_open_connections",
        "Open connections by side: client (clients to kgate) and upstream (kgate to brokers, for clients)",
        labels=["cluster", "side"],
    )
    suspended_now = GaugeMetricFamily(
        "kgate_suspended_messages", "Messages waiting on a filter hook that awaits", labels=["cluster", "direction"]
    )
    suspension = HistogramMetricFamily(
        "kgate_suspension_seconds",
        "How long messages waited on a filter hook that awaits (lookups, policy calls)",
        labels=["cluster", "direction"],
    )
    by_cluster: dict[str, list[ClusterMetrics]] = defaultdict(list)
    for m in live:
        by_cluster[m.cluster].append(m)
    for name, ms in sorted(by_cluster.items()):
        sides.add_metric([name, "client"], sum(m.open_connections for m in ms))
        sides.add_metric([name, "upstream"], sum(m.open_upstream_connections for m in ms))
        for direction in ("request", "response"):
            suspended_now.add_metric([name, direction], sum(m.suspended[direction] for m in ms))
            hists = [m.suspensions[direction] for m in ms]
            merged = [sum(col) for col in zip(*(list(h.counts) for h in hists), strict=True)]
            suspension.add_metric(
                [name, direction], _cumulative(SUSPENSION_BUCKETS, merged), sum_value=sum(h.sum for h in hists)
            )
    yield sides
    yield suspended_now
    yield suspension
    families = {
        "decisions": CounterMetricFamily(
            "kgate_filter_decisions",
            "Filter decisions other than a plain forward: respond (answered for the broker), drop, close",
            labels=["cluster", "filter", "direction", "decision"],
        ),
        "errors": CounterMetricFamily(
            "kgate_filter_errors",
            "Filter hooks that raised or returned something that is not a result (the connection closes)",
            labels=["cluster", "filter", "direction"],
        ),
        "timeouts": CounterMetricFamily(
            "kgate_filter_timeouts",
            "Filter hooks that took longer than proxy.filter_timeout_s",
            labels=["cluster", "filter", "direction"],
        ),
    }
    outcomes: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for m in live:
        for (filter_name, direction, verdict), n in list(m.filter_outcomes.items()):
            outcomes[(m.cluster, filter_name, direction, verdict)] += n
    for (cluster, filter_name, direction, verdict), n in sorted(outcomes.items()):
        kind, decision = FILTER_OUTCOMES.get(verdict, ("errors", ""))
        labels = [cluster, filter_name, direction] + ([decision] if decision else [])
        families[kind].add_metric(labels, n)
    yield from families.values()


REGISTRY.register(_DataPathCollector())
