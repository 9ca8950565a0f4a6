"""Per-exchange Prometheus metrics: latency histogram, bytes and answers per api.

``kgate_request_duration_seconds{cluster,api}`` (histogram), ``kgate_request_bytes_total``,
``kgate_response_bytes_total`` and ``kgate_responses_total{cluster,api,error}``. ``api`` is
Kafka's api name (``Produce``); api keys kgate does not know share ``unknown`` so garbage cannot
grow the series. ``error`` is the answer's top-level error code name (``NONE`` for 0), read at a
fixed offset (filters/answer_errors.py); answers whose codes are only per topic or partition
(Produce, Metadata, ListOffsets, Fetch < v7, ...) count under ``NONE`` here: per-partition codes
are in the audit log.

``kgate_upstream_request_duration_seconds{cluster,api}`` (histogram, same buckets) is the broker's
part: from kgate's last byte of the request to the broker (``sent_ns``: when a request was
forwarded whole, the time its last piece went for one that streamed through) to the answer in
kgate's hands (``up_ns``). "In hand" is the whole frame for answers kgate holds (it cannot act on
less: decode, rewrite, hooks), and the first bytes for one it forwards as they arrive (a large
Fetch): that is also where the client-side clock stops, so upstream <= client-side always and the
difference is kgate's own time (response hooks and their suspensions, rewriting, waiting behind
an earlier answer, a request hook that awaited or a request waiting behind one: ``t0_ns`` is when
kgate read the request), not the transfer of a large answer that both sides see alike.
Answers kgate makes itself (a filter's ``respond``) and acks=0 Produce have no upstream time and
are not observed. Cost: one clock read per exchange in the core (``_response``; a streamed answer
reuses the one already read, a request that streamed in pieces reads one more when its last
piece goes), a bisect and two adds here: a small part of a core-only round trip, and nothing with
the admin listener off (bench/exchange_metrics_cost.py; docs/performance.md, "The upstream latency
histogram and the per-topic metrics").

Same shape as proxy/control/metrics.py: the data path adds to plain ints (one list per api key:
bucket counts, sum, bytes) and the collector builds the families at scrape time: a
``Histogram.observe`` plus three ``Counter.inc`` on resolved children cost several times what
this observer adds per exchange (each takes a lock), and what it adds is small against a whole
round trip through kgate (docs/performance.md, "Figures moved out of code comments", and the
core-only A/B at the end of "The audit log"). Installed only when the metrics endpoint is on
(``metrics.listen``): with it off, the core has no observer and pays nothing.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import REGISTRY, CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from kgate.api import ConnectionInfo
from kgate.codec import api
from kgate.codec.api import api_name
from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import FETCH, PRODUCE
from kgate.filters.answer_errors import top_error_code
from kgate.filters.exchanges import Answer, FinishedExchange
from kgate.proxy.control.topic_metrics import TopicMetrics

#: upper bounds of the latency buckets, seconds (Kafka round trips: sub-ms Metadata to 30 s long polls)
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BOUNDS_NS = tuple(int(b * 1e9) for b in BUCKETS_S)
_N = len(BUCKETS_S)
# row layout: buckets..., +Inf, sum_ns, request bytes, response bytes, then the upstream histogram
# (buckets..., +Inf, sum_ns), then the api key it is labelled with
_SUM, _REQ, _RESP = _N + 1, _N + 2, _N + 3
_UP = _N + 4  # first upstream bucket
_UP_SUM = _UP + _N + 1
_LABEL = _UP_SUM + 1
UNKNOWN_API = -1


_ERROR_NAMES = {int(c): c.name for c in ErrorCode}


def error_name(code: int) -> str:
    """Kafka's name for an error code; codes kgate does not know share ``UNKNOWN`` (bounded labels)."""
    return _ERROR_NAMES.get(code, "UNKNOWN")


class ExchangeMetrics:
    """One virtual cluster's per-exchange counters; ``observe`` is its ``ExchangeObserver``."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.rows: dict[int, list[int]] = {}
        self.answers: defaultdict[tuple[int, int], int] = defaultdict(int)  # (api key, error code) -> count
        #: per-topic counters (proxy/control/topic_metrics.py); None: admin.topic_metrics.enabled is false
        self.topics: TopicMetrics | None = None
        _LIVE.add(self)

    def _row(self, api_key: int) -> list[int]:
        """The counters of an api key; every key kgate does not know shares one row (bounded)."""
        if api_key not in api.API_INFO:
            shared = self.rows.get(UNKNOWN_API)
            if shared is None:
                shared = self.rows[UNKNOWN_API] = [0] * _LABEL + [UNKNOWN_API]
            if len(self.rows) < 1024:  # remember the garbage key only while few: bounded either way
                self.rows[api_key] = shared
            return shared
        row = self.rows[api_key] = [0] * _LABEL + [api_key]
        return row

    def observe(
        self,
        ex: FinishedExchange,
        info: ConnectionInfo,
        answer: Answer | None,
        answer_bytes: int | None,
        end_ns: int,
    ) -> None:
        row = self.rows.get(ex.api_key)
        if row is None:
            row = self._row(ex.api_key)
        row[_REQ] += ex.req_bytes
        up = ex.up_ns
        if up:  # the broker answered (not kgate itself): its part of the latency
            up -= ex.sent_ns
            if up < 0:
                up = 0
            row[_UP + bisect_left(_BOUNDS_NS, up)] += 1
            row[_UP_SUM] += up
        if self.topics is not None and (ex.api_key == PRODUCE or ex.api_key == FETCH):
            self.topics.observe(ex, answer, answer_bytes)
        if answer is None or answer_bytes is None:
            return  # no answer: no latency, no response bytes (acks=0, the connection closed first)
        took = end_ns - ex.t0_ns
        row[bisect_left(_BOUNDS_NS, took)] += 1
        row[_SUM] += took
        row[_RESP] += answer_bytes
        head = answer[0] if type(answer) is list else answer
        code = top_error_code(ex.api_key, ex.api_version, head)  # type: ignore[arg-type]
        self.answers[(row[_LABEL], code or 0)] += 1


_LIVE: weakref.WeakSet[ExchangeMetrics] = weakref.WeakSet()


def _cumulative(counts: list[int]) -> list[tuple[str, int]]:
    """Prometheus' cumulative ("le", count) pairs from per-bucket counts (+Inf last)."""
    cumulative, buckets = 0, []
    for bound, n in zip((*(str(b) for b in BUCKETS_S), "+Inf"), counts, strict=True):
        cumulative += n
        buckets.append((bound, cumulative))
    return buckets


class _ExchangeCollector(Collector):
    def collect(self) -> Iterator[Any]:
        duration = HistogramMetricFamily(
            "kgate_request_duration_seconds",
            "From reading a request to handing its answer to the client, per api",
            labels=["cluster", "api"],
        )
        upstream = HistogramMetricFamily(
            "kgate_upstream_request_duration_seconds",
            "From kgate's last byte of a request to the broker to the broker's answer in kgate's hands, per api",
            labels=["cluster", "api"],
        )
        req_bytes = CounterMetricFamily(
            "kgate_request_bytes", "Request frame bytes from clients, per api", labels=["cluster", "api"]
        )
        resp_bytes = CounterMetricFamily(
            "kgate_response_bytes", "Answer frame bytes handed to clients, per api", labels=["cluster", "api"]
        )
        responses = CounterMetricFamily(
            "kgate_responses",
            "Answers handed to clients, per api and top-level error code",
            labels=["cluster", "api", "error"],
        )
        rows: dict[tuple[str, str], list[int]] = {}
        answers: dict[tuple[str, str, str], int] = defaultdict(int)
        for m in list(_LIVE):
            seen: set[int] = set()
            for row in list(m.rows.values()):
                if id(row) in seen:
                    continue  # the row unknown keys share
                seen.add(id(row))
                total = rows.setdefault((m.cluster, api_name(row[_LABEL])), [0] * _LABEL)
                for i, n in enumerate(row[:_LABEL]):
                    total[i] += n
            for (key, code), n in list(m.answers.items()):
                answers[(m.cluster, api_name(key), error_name(code))] += n
        for labels, row in sorted(rows.items()):
            duration.add_metric(list(labels), _cumulative(row[: _N + 1]), row[_SUM] / 1e9)
            if any(row[_UP:_UP_SUM]):  # only apis the broker answered (not those kgate answers itself)
                upstream.add_metric(list(labels), _cumulative(row[_UP:_UP_SUM]), row[_UP_SUM] / 1e9)
            req_bytes.add_metric(list(labels), row[_REQ])
            resp_bytes.add_metric(list(labels), row[_RESP])
        for answer_labels, n in sorted(answers.items()):
            responses.add_metric(list(answer_labels), n)
        yield duration
        yield upstream
        yield req_bytes
        yield resp_bytes
        yield responses


REGISTRY.register(_ExchangeCollector())
