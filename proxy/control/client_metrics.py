"""Per-client Prometheus metrics with bounded cardinality: who sends what through kgate.

``kgate_client_requests_total{cluster,principal,client_id,direction}`` (``in``: requests read,
``out``: answers handed back) and ``kgate_client_bytes_total{...,direction}`` (frame bytes, the
same directions), per (principal, client id); ``kgate_client_connections{cluster,principal}``,
open connections per principal. ``principal`` is empty for a client that proved no identity.

**Bounded, cheaply and stably.** At most ``max_clients`` (principal, client id) pairs have series
of their own; everything else adds to ``client_id="other"`` (principal ``other`` too), so a client
that makes up a new id per connection cannot grow the scrape. The first ``max_clients`` pairs seen
get a series; after that, the pairs counted under ``other`` are ranked by bytes in a space-saving
sketch (Metwally et al.: ``max_clients`` counters; a new pair takes over the smallest counter and
its count, so a heavy hitter is never missed, and the error is bounded by that smallest count).
Every ``REBALANCE_S`` at scrape time, tracked pairs that moved fewer bytes since the last
rebalance than a sketch entry has are replaced by it, at most a tenth of the series per round. An
evicted pair's totals are folded into ``other``, so every sum over the family only grows. Most
clients keep their series for good: a series goes away only when its client has gone quiet and
a heavier one needs the place, so a dashboard's top clients do not flicker.

**Cost.** Counted from the finished-exchange reports (filters/exchanges.py), as the per-exchange
metrics are: one dict read and four adds per exchange, the client id read from the request
header once per connection (raw mode decodes no header). Nothing at all with the admin listener
off or ``admin.client_metrics.enabled: false`` (the observer is not installed); connections per
principal are counted at scrape time from the open connections, never on the data path.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kgate.api import ConnectionInfo
from kgate.filters.builtin.quotas.rate import frame_client_id
from kgate.filters.exchanges import Answer, FinishedExchange

OTHER = "other"
OTHER_KEY = (OTHER, OTHER)
REBALANCE_S = 60.0
# a row: requests in, answers out, bytes in, bytes out, bytes at the last rebalance
_REQ, _ANS, _IN, _OUT, _MARK = range(5)


class TopClients:
    """Which (principal, client id) pairs get series of their own (see the module doc). Pure: ``now`` is passed in."""

    def __init__(self, max_clients: int) -> None:
        self.max_clients = max_clients
        self.rows: dict[tuple[str, str], list[int]] = {}
        self.other = [0, 0, 0, 0, 0]
        #: space-saving sketch over the pairs counted as other: pair -> estimated bytes
        self.sketch: dict[tuple[str, str], int] = {}
        self.evicted = 0  # pairs that lost their series to a heavier one
        self._rebalanced = 0.0

    def row(self, key: tuple[str, str], weight: int) -> list[int]:
        """The row ``key`` counts in: its own, or ``other`` (noting ``weight`` bytes in the sketch)."""
        row = self.rows.get(key)
        if row is not None:
            return row
        if len(self.rows) < self.max_clients:
            row = self.rows[key] = [0, 0, 0, 0, 0]
            return row
        sketch = self.sketch
        if key in sketch:
            sketch[key] += weight
        elif len(sketch) < self.max_clients:
            sketch[key] = weight
        else:  # take over the smallest counter and its count (space-saving)
            smallest = min(sketch, key=sketch.__getitem__)
            sketch[key] = sketch.pop(smallest) + weight
        return self.other

    def rebalance(self, now: float) -> None:
        """Give the heaviest of ``other``'s pairs the series of tracked pairs that moved less since last time."""
        if now - self._rebalanced < REBALANCE_S:
            return
        self._rebalanced = now
        if self.sketch:
            activity = sorted(self.rows, key=lambda k: self.rows[k][_IN] + self.rows[k][_OUT] - self.rows[k][_MARK])
            heavy = sorted(self.sketch.items(), key=lambda kv: kv[1], reverse=True)
            for (candidate, weight), quiet in zip(heavy[: max(1, self.max_clients // 10)], activity, strict=False):
                old = self.rows[quiet]
                if old[_IN] + old[_OUT] - old[_MARK] >= weight:
                    break
                del self.rows[quiet]
                for i in (_REQ, _ANS, _IN, _OUT):
                    self.other[i] += old[i]
                self.rows[candidate] = [0, 0, 0, 0, 0]
                del self.sketch[candidate]
                self.evicted += 1
        self.sketch.clear()
        for row in self.rows.values():
            row[_MARK] = row[_IN] + row[_OUT]


class ClientMetrics:
    """One virtual cluster's per-client counters; ``observe`` is an exchange observer."""

    def __init__(
        self, cluster: str, max_clients: int, connections: Callable[[], Iterable[ConnectionInfo]] | None = None
    ) -> None:
        self.cluster = cluster
        self.top = TopClients(max_clients)
        self.connections = connections
        _LIVE.add(self)

    def observe(
        self, ex: FinishedExchange, info: ConnectionInfo, answer: Answer | None, answer_bytes: int | None, end_ns: int
    ) -> None:
        client_id = info.client_id
        if client_id is None:
            client_id = info.client_id = frame_client_id(ex.req)  # raw mode reads no client id itself
        key = (info.principal or "", client_id or "")
        row = self.top.rows.get(key)
        if row is None:
            row = self.top.row(key, ex.req_bytes + (answer_bytes or 0))
        row[_REQ] += 1
        row[_IN] += ex.req_bytes
        if answer_bytes is not None:
            row[_ANS] += 1
            row[_OUT] += answer_bytes

    def principals(self) -> Counter[str]:
        """Open connections per principal, now (at most ``max_clients`` principals, the rest as ``other``)."""
        counts: Counter[str] = Counter()
        if self.connections is not None:
            for info in self.connections():
                counts[info.principal or ""] += 1
        if len(counts) <= self.top.max_clients:
            return counts
        kept: Counter[str] = Counter(dict(counts.most_common(self.top.max_clients - 1)))
        kept[OTHER] += sum(counts.values()) - sum(kept.values())
        return kept


_LIVE: weakref.WeakSet[ClientMetrics] = weakref.WeakSet()


class _ClientCollector(Collector):
    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily(
            "kgate_client_requests",
            "Requests read from (in) and answers handed to (out) each client (top admin.client_metrics.max_clients)",
            labels=["cluster", "principal", "client_id", "direction"],
        )
        nbytes = CounterMetricFamily(
            "kgate_client_bytes",
            "Frame bytes from (in) and to (out) each client (top admin.client_metrics.max_clients)",
            labels=["cluster", "principal", "client_id", "direction"],
        )
        evicted = CounterMetricFamily(
            "kgate_client_metrics_evictions",
            'Clients whose series went to a heavier client (their counts moved to client_id="other")',
            labels=["cluster"],
        )
        connections = GaugeMetricFamily(
            "kgate_client_connections_by_principal",
            "Open client connections per principal (empty: none proven)",
            labels=["cluster", "principal"],
        )
        rows: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        per_principal: dict[tuple[str, str], int] = defaultdict(int)
        evictions: dict[str, int] = defaultdict(int)
        now = time.monotonic()
        for m in list(_LIVE):
            m.top.rebalance(now)
            items = list(m.top.rows.items())
            if any(m.top.other[:4]):
                items.append((OTHER_KEY, m.top.other))
            for (principal, client_id), row in items:
                total = rows[(m.cluster, principal, client_id)]
                for i in range(4):
                    total[i] += row[i]
            evictions[m.cluster] += m.top.evicted
            for principal, n in m.principals().items():
                per_principal[(m.cluster, principal)] += n
        for (cluster, principal, client_id), (req, ans, bin_, bout) in sorted(rows.items()):
            requests.add_metric([cluster, principal, client_id, "in"], req)
            requests.add_metric([cluster, principal, client_id, "out"], ans)
            nbytes.add_metric([cluster, principal, client_id, "in"], bin_)
            nbytes.add_metric([cluster, principal, client_id, "out"], bout)
        for cluster, n in sorted(evictions.items()):
            evicted.add_metric([cluster], n)
        for (cluster, principal), n in sorted(per_principal.items()):
            connections.add_metric([cluster, principal], n)
        yield requests
        yield nbytes
        yield evicted
        yield connections


REGISTRY.register(_ClientCollector())
