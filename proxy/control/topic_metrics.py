"""Per-topic Prometheus metrics with a cardinality cap: requests and record bytes per topic.

``kgate_topic_requests_total{cluster,topic,api}``: Produce requests per topic they write to, and
Fetch answers per topic they carry (a fetch session's answer names only the partitions that
changed, so this counts the topics data or errors came back for). ``kgate_topic_bytes_total
{cluster,topic,direction}``: record bytes per topic, ``in`` for Produce (what clients wrote),
``out`` for Fetch (what they read). Record bytes, not frame bytes: the per-api frame bytes are
``kgate_request_bytes_total`` / ``kgate_response_bytes_total``.

Bounded: the first ``admin.topic_metrics.max_topics`` topics a cluster sees get their own label;
later ones count under ``topic="<other>"`` and ``kgate_topic_metrics_overflow_total`` counts those
observations (one per topic per exchange), so a dashboard can say the cap is too small. Ids
(Produce and Fetch v13+) are named from the cluster's topic-id cache without waiting: an id the
cache does not know counts under ``topic="<unresolved>"`` while one background lookup per id asks
the cluster (kgate/topic_ids), so the next exchange of that topic has its name.

Cost, on the event loop: the frame is walked over its topic and partition headers only, never
its records (a frame held whole by the inline walkers of filters/builtin/audit/wire.py,
``produce_topic_bytes`` / ``fetch_topic_bytes``; one that streamed through in pieces by the audit
log's own walkers, over the pieces, never joined), then one dict read and two adds per topic:
a small share of a whole round trip through kgate, and the inline walkers cost less than the audit
log's generic one (bench/exchange_metrics_cost.py; docs/performance.md, "The upstream latency
histogram and the per-topic metrics", and "Figures moved out of code comments"). Worth it on by
default (``admin.topic_metrics.enabled``, cap 200): per-topic traffic is the first question about
a Kafka cluster, and batching clients send one Produce per broker per linger, not per record.
Like every per-exchange metric, nothing at all while the admin listener is off.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, Protocol
from uuid import UUID

from prometheus_client.core import REGISTRY, CounterMetricFamily
from prometheus_client.registry import Collector

from kgate.api import TopicNameError
from kgate.codec.generated.api_keys import PRODUCE
from kgate.filters.builtin.audit.wire import (
    Chunks,
    WireError,
    body_offset,
    fetch_response_topics,
    fetch_topic_bytes,
    produce_request_topics,
    produce_topic_bytes,
    request_body_offset,
)
from kgate.filters.exchanges import Answer, FinishedExchange

_PRODUCE_ROW, _FETCH_ROW = 0, 1  # a row's request counter; its bytes are 2 further (in, out)
OTHER = "<other>"  # topics past the cap
UNRESOLVED = "<unresolved>"  # ids the topic-id cache could not name (yet)
#: ids asked of the cluster at most once each; past this many the set starts again (bounded)
MAX_ASKED = 10_000


class TopicCap:
    """The label each topic name is counted under: its name for the first ``max_topics`` names
    seen, ``<other>`` after that. Pure: no I/O, no clock."""

    __slots__ = ("max_topics", "overflowed", "seen")

    def __init__(self, max_topics: int) -> None:
        self.max_topics = max_topics
        self.seen: set[str] = set()
        self.overflowed = 0  # observations counted under <other>

    def label(self, name: str) -> str:
        if name in self.seen:
            return name
        if len(self.seen) < self.max_topics:
            self.seen.add(name)
            return name
        self.overflowed += 1
        return OTHER


class TopicNames(Protocol):
    """What the per-topic metrics need of the topic-id service (kgate.topic_ids.TopicNameResolver)."""

    def cached(self, topic_id: UUID) -> str | None: ...
    async def resolve(self, ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]: ...


class TopicMetrics:
    """One virtual cluster's per-topic counters; ``observe`` is called by ExchangeMetrics."""

    def __init__(self, cluster: str, max_topics: int, names: TopicNames) -> None:
        self.cluster = cluster
        self.cap = TopicCap(max_topics)
        self.names = names
        #: label -> [Produce requests, Fetch answers, bytes in, bytes out]
        self.rows: dict[str, list[int]] = {}
        #: topic name or id -> its row, for keys whose label is final (a name within the cap): one
        #: dict read per topic on the data path; bounded (names within the cap, a few ids each)
        self._by_key: dict[str | UUID, list[int]] = {}
        self._by_id: dict[int, str] = {}  # topic id -> name, once known (bounded like the cap)
        self._asked: set[int] = set()  # ids whose name was asked of the cluster
        self._lookups: set[asyncio.Task[Any]] = set()
        _LIVE.add(self)

    def observe(self, ex: FinishedExchange, answer: Answer | None, answer_bytes: int | None) -> None:
        """Count one Produce (its request) or Fetch (its whole answer); frames kgate cannot
        follow (cut short by a close) count nothing."""
        version = ex.api_version
        try:
            if ex.api_key == PRODUCE:
                req = ex.req
                header_version = 2 if version >= 9 else 1  # flexible from v9
                if isinstance(req, list):  # streamed through in pieces: walked over them, not joined
                    body = request_body_offset(req[0], header_version)
                    facts = produce_request_topics(Chunks(req), body, version, with_records=False)
                    topics = [(f[0], f[2]) for f in facts]
                elif len(req) == ex.req_bytes:
                    topics = produce_topic_bytes(req, request_body_offset(req, header_version), version)
                else:
                    return
                counted = _PRODUCE_ROW
            else:
                if answer is None or answer_bytes is None:
                    return
                header_version = 1 if version >= 12 else 0  # flexible from v12
                if isinstance(answer, list):  # streamed through: its pieces
                    chunks = Chunks(answer)
                    if len(chunks) != answer_bytes:
                        return  # cut short by a close
                    body = body_offset(chunks, header_version)
                    topics = [(f[0], f[2]) for f in fetch_response_topics(chunks, body, version, False)[1]]
                else:
                    topics = fetch_topic_bytes(answer, body_offset(answer, header_version), version)
                counted = _FETCH_ROW
        except (WireError, ValueError, IndexError):
            return
        by_key = self._by_key
        sized = counted + 2
        for key, size in topics:
            row = by_key.get(key)
            if row is None:
                row = self._row(key)
            row[counted] += 1
            row[sized] += size

    def _row(self, key: str | UUID) -> list[int]:
        """The counters ``key`` adds to, remembered for next time once its label is final."""
        label = self._label(key)
        row = self.rows.get(label)
        if row is None:
            row = self.rows[label] = [0, 0, 0, 0]
        if label is not OTHER and label is not UNRESOLVED and len(self._by_key) < 5 * self.cap.max_topics:
            self._by_key[key] = row
        return row

    def _label(self, key: str | UUID) -> str:
        if type(key) is str:
            return self.cap.label(key)
        assert isinstance(key, UUID)
        name = self._by_id.get(key.int)
        if name is None:
            name = self.names.cached(key)
            if name is None:
                self._ask(key)
                return UNRESOLVED
            if len(self._by_id) < 4 * self.cap.max_topics:
                self._by_id[key.int] = name
        return self.cap.label(name)

    def _ask(self, topic_id: UUID) -> None:
        """Look the id up in the background, once: this exchange is not delayed for it."""
        if topic_id.int in self._asked:
            return
        if len(self._asked) >= MAX_ASKED:
            self._asked.clear()
        self._asked.add(topic_id.int)
        try:
            task = asyncio.get_running_loop().create_task(self.names.resolve([topic_id]))
        except RuntimeError:
            return  # no loop (a test driving the core by hand): stays unresolved
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)


_LIVE: weakref.WeakSet[TopicMetrics] = weakref.WeakSet()


class _TopicCollector(Collector):
    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily(
            "kgate_topic_requests",
            "Produce requests per topic written, Fetch answers per topic carried (capped: admin.topic_metrics)",
            labels=["cluster", "topic", "api"],
        )
        nbytes = CounterMetricFamily(
            "kgate_topic_bytes",
            "Record bytes per topic: in (Produce), out (Fetch) (capped: admin.topic_metrics)",
            labels=["cluster", "topic", "direction"],
        )
        overflow = CounterMetricFamily(
            "kgate_topic_metrics_overflow",
            'Per-topic observations counted under topic="<other>" because admin.topic_metrics.max_topics was reached',
            labels=["cluster"],
        )
        req_totals: dict[tuple[str, str, str], int] = defaultdict(int)
        byte_totals: dict[tuple[str, str, str], int] = defaultdict(int)
        overflows: dict[str, int] = defaultdict(int)
        for m in list(_LIVE):
            for label, (produced, fetched, bytes_in, bytes_out) in list(m.rows.items()):
                for api_name, n in (("Produce", produced), ("Fetch", fetched)):
                    if n:
                        req_totals[(m.cluster, label, api_name)] += n
                for direction, n in (("in", bytes_in), ("out", bytes_out)):
                    if n:
                        byte_totals[(m.cluster, label, direction)] += n
            overflows[m.cluster] += m.cap.overflowed
        for labels, n in sorted(req_totals.items()):
            requests.add_metric(list(labels), n)
        for labels, n in sorted(byte_totals.items()):
            nbytes.add_metric(list(labels), n)
        for cluster, n in sorted(overflows.items()):
            overflow.add_metric([cluster], n)
        yield requests
        yield nbytes
        yield overflow


REGISTRY.register(_TopicCollector())
