"""Prometheus metrics of the topic-id -> name resolver.

Hits, misses and cache size are *not* ordinary prometheus Counters/Gauges: ``cached()`` runs once
per partition of every Fetch, and a prometheus ``inc()`` takes a lock, several times the cost of
the lookup itself (docs/performance.md, "Figures moved out of code comments"). The resolver
counts them in plain integers and a collector reads those at scrape time. Lookups, their latency
and evictions happen off the hot path and use ordinary module-level metrics whose labelled
children are resolved once.

Names: a Counter ``x`` is exposed as ``x_total`` (and ``x_created``), so no Gauge here is called
like a Counter's stem (``kgate_topic_names_size`` is a Gauge; there is no ``..._size`` Counter).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from kgate.topic_ids.cache import ResolverStats


class Counted(Protocol):
    """A resolver as these metrics read it (``TopicNameResolver``; a protocol, as the resolver
    imports this module: no import cycle)."""

    cluster: str
    stats: ResolverStats

    def __len__(self) -> int: ...


LOOKUPS = Counter(
    "kgate_topic_names_lookups",
    "Metadata requests kgate made to resolve or re-validate topic ids",
    ["cluster"],
)
LOOKUP_SECONDS = Histogram(
    "kgate_topic_names_lookup_seconds",
    "Latency of kgate's own Metadata requests for topic ids (failures included)",
    ["cluster"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
EVICTIONS = Counter(
    "kgate_topic_names_evictions",
    "Topic-id cache entries removed (lru, deleted, unknown_id, sweep, or a caller's reason)",
    ["cluster", "reason"],
)

# Every live resolver, plus the final counts of closed ones, so that counters never go backwards
# when a virtual cluster's resolver is replaced.
_LIVE: weakref.WeakSet[Counted] = weakref.WeakSet()
_RETIRED: dict[str, list[int]] = {}  # cluster -> [hits, misses]


class _HotPathCollector:
    """Exposes the resolvers' plain-int hit/miss counters and cache sizes at scrape time."""

    def describe(self) -> Iterator[Any]:
        yield CounterMetricFamily("kgate_topic_names_hits", "cached() and resolve() answered from the cache")
        yield CounterMetricFamily("kgate_topic_names_misses", "cached() and resolve() not answered by a name")
        yield GaugeMetricFamily("kgate_topic_names_size", "Topic ids with a known name in the cache")

    def collect(self) -> Iterator[Any]:
        hits = CounterMetricFamily(
            "kgate_topic_names_hits", "cached() and resolve() answered from the cache", labels=["cluster"]
        )
        misses = CounterMetricFamily(
            "kgate_topic_names_misses", "cached() and resolve() not answered by a name", labels=["cluster"]
        )
        size = GaugeMetricFamily(
            "kgate_topic_names_size", "Topic ids with a known name in the cache", labels=["cluster"]
        )
        totals: dict[str, list[int]] = {c: [h, m, 0] for c, (h, m) in _RETIRED.items()}
        for r in list(_LIVE):
            t = totals.setdefault(r.cluster, [0, 0, 0])
            t[0] += r.stats.hits
            t[1] += r.stats.misses
            t[2] += len(r)
        for cluster, (h, m, s) in sorted(totals.items()):
            hits.add_metric([cluster], h)
            misses.add_metric([cluster], m)
            size.add_metric([cluster], s)
        yield hits
        yield misses
        yield size


REGISTRY.register(_HotPathCollector())


def register(resolver: Counted) -> None:
    _LIVE.add(resolver)


def retire(resolver: Counted) -> None:
    """Fold a closed resolver's counts into the cluster's totals (counters stay monotonic)."""
    if resolver in _LIVE:
        _LIVE.discard(resolver)
        t = _RETIRED.setdefault(resolver.cluster, [0, 0])
        t[0] += resolver.stats.hits
        t[1] += resolver.stats.misses


class ResolverMetrics:
    """The metric children of one resolver, resolved once."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.lookups = LOOKUPS.labels(cluster)
        self.lookup_seconds = LOOKUP_SECONDS.labels(cluster)
        self._evictions: dict[str, Any] = {}

    def evicted(self, reason: str, n: int = 1) -> None:
        child = self._evictions.get(reason)
        if child is None:
            child = self._evictions[reason] = EVICTIONS.labels(self.cluster, reason)
        child.inc(n)
