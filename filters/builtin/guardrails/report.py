"""Making the ``guardrails`` refusals observable: a counter per refusal and rate-limited log lines.

As for the authorizer (``filters.builtin.authz_report``), counting is a plain ``dict`` increment,
collected at scrape time into ``kgate_guardrail_refusals_total{cluster, rule, api}``. The counts are
the process's, not a filter instance's, so they survive a configuration reload (which makes new
instances) and never go down. Labels are bounded: cluster (configured), rule (a fixed set,
``guardrail_rules.Refusal.rule``) and api (Kafka's name, ``CreateTopics``, as on every other kgate
metric). One refused entry (a topic, a config resource, a Produce) counts once.

Refusals are logged with who asked and what limit was hit, at most ``LOG_BURST`` lines per
``LOG_WINDOW_S`` per filter instance; the rest of a window is summarised when the next line is
logged, so a client retrying a refused CreateTopics in a loop cannot flood the log.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import REGISTRY, CounterMetricFamily
from prometheus_client.registry import Collector

from kgate.api import FilterContext
from kgate.codec.api import api_name
from kgate.filters.builtin.guardrails.rules import Refusal

log = logging.getLogger("kgate.guardrails")

LOG_WINDOW_S = 10.0
LOG_BURST = 20


class RefusalReport:
    """Counts and logs one filter instance's refusals (one instance per virtual cluster)."""

    def __init__(self) -> None:
        self._window_start = 0.0
        self._logged = 0
        self._suppressed = 0

    def refused(self, ctx: FilterContext, what: str, refusal: Refusal) -> None:
        """Count one refused entry and log it (rate-limited)."""
        conn = ctx.connection
        COUNTS[(conn.virtual_cluster, refusal.rule, ctx.api_key)] += 1
        now = time.monotonic()
        if now - self._window_start >= LOG_WINDOW_S:
            if self._suppressed:
                log.warning("guardrails: %d more refusals in the last window not logged", self._suppressed)
            self._window_start, self._logged, self._suppressed = now, 0, 0
        if self._logged >= LOG_BURST:
            self._suppressed += 1
            return
        self._logged += 1
        log.warning(
            "guardrails: refused cluster=%s principal=%s client_id=%r address=%s api=%s %s rule=%s error=%d: %s",
            conn.virtual_cluster,
            conn.principal,
            conn.client_id,
            conn.client_address,
            api_name(ctx.api_key),
            what,
            refusal.rule,
            refusal.code,
            refusal.message,
        )


#: (cluster, rule, api key) -> refused entries, since the process started
COUNTS: defaultdict[tuple[str, str, int], int] = defaultdict(int)


class _RefusalCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "kgate_guardrail_refusals",
            "Entries (topics, config resources, Produce requests) the guardrails filter refused, by rule and api",
            labels=["cluster", "rule", "api"],
        )
        for (cluster, rule, key), n in sorted(list(COUNTS.items())):
            family.add_metric([cluster, rule, api_name(key)], n)
        yield family


REGISTRY.register(_RefusalCollector())
