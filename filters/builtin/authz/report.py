"""Making the authorizer's decisions observable: a counter per decision and rate-limited log lines.

Counting is a plain ``dict`` increment per request, collected at scrape time, for the reason
``proxy/control/metrics.py`` gives: a prometheus ``Counter.inc`` takes a lock and costs a noticeable
share of a small request's CPU. Labels are bounded: cluster (configured), filter (its name: the
authorizer, topic-policy or internal-topics, which all decide through the authorizer's handlers), api
(the api's name as Kafka and the codec spell it, ``Metadata``, as every other kgate metric; at most
the codec's 88) and decision (``allow`` / ``deny``). A request of which any part was refused counts
as ``deny``.

Denied requests are logged with who asked (principal, client id, address) and what they were
refused (api, resource, operation), at most ``LOG_BURST`` lines per ``LOG_WINDOW_S`` per filter
instance; the rest of a window is summarised in one line when the next one is logged, so a client
retrying a forbidden write in a loop cannot flood the log.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import REGISTRY, CounterMetricFamily
from prometheus_client.registry import Collector

from kgate.codec.api import api_name
from kgate.filters.builtin.authz.acl_rules import Identity, Op, Res

log = logging.getLogger("kgate.authz")

LOG_WINDOW_S = 10.0
LOG_BURST = 20


class DecisionReport:
    """Counts and logs one filter instance's decisions (one instance per virtual cluster)."""

    def __init__(self, filter_name: str) -> None:
        self.filter_name = filter_name
        #: (cluster, api key, allowed) -> requests
        self.counts: defaultdict[tuple[str, int, bool], int] = defaultdict(int)
        self._window_start = 0.0
        self._logged = 0
        self._suppressed = 0
        _LIVE.add(self)
        # a reload replaces the filter: its counts join the retired ones, so the counter never goes down
        weakref.finalize(self, _retire, filter_name, self.counts)

    def denied(self, cluster: str, who: Identity, address: str, api_key: int, res: Res, name: str, op: Op) -> None:
        """Log one refused check (rate-limited)."""
        now = time.monotonic()
        if now - self._window_start >= LOG_WINDOW_S:
            if self._suppressed:
                log.warning(
                    "authz %s: %d more denied checks in the last window not logged", self.filter_name, self._suppressed
                )
            self._window_start, self._logged, self._suppressed = now, 0, 0
        if self._logged >= LOG_BURST:
            self._suppressed += 1
            return
        self._logged += 1
        api = api_name(api_key)
        resource = f"{res.name.lower()}:{name}"
        log.warning(
            "authz %s: denied cluster=%s principal=%s client_id=%r address=%s api=%s resource=%s operation=%s",
            self.filter_name,
            cluster,
            who.principal,
            who.client_id,
            address,
            api,
            resource,
            op.name.lower(),
            # the same facts as fields, for the JSON log format (proxy/control/logs.py)
            extra={
                "cluster": cluster,
                "principal": who.principal,
                "client_id": who.client_id,
                "api": api,
                "resource": resource,
                "decision": "deny",
                "filter": self.filter_name,
                "operation": op.name.lower(),
                "address": address,
            },
        )


_LIVE: weakref.WeakSet[DecisionReport] = weakref.WeakSet()
#: (cluster, filter, api key, allowed) -> requests decided by instances no longer alive
_RETIRED: defaultdict[tuple[str, str, int, bool], int] = defaultdict(int)


def _retire(filter_name: str, counts: dict[tuple[str, int, bool], int]) -> None:
    for (cluster, key, allowed), n in list(counts.items()):
        _RETIRED[(cluster, filter_name, key, allowed)] += n


class _DecisionCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "kgate_authz_decisions",
            "Requests the authorizer decided, by api and decision (deny: any part of the request refused)",
            labels=["cluster", "filter", "decision", "api"],
        )
        totals: defaultdict[tuple[str, str, str, str], int] = defaultdict(int)
        for report in list(_LIVE):
            for (cluster, key, allowed), n in list(report.counts.items()):
                totals[(cluster, report.filter_name, "allow" if allowed else "deny", api_name(key))] += n
        for (cluster, name, key, allowed), n in list(_RETIRED.items()):
            totals[(cluster, name, "allow" if allowed else "deny", api_name(key))] += n
        for labels, n in sorted(totals.items()):
            family.add_metric(list(labels), n)
        yield family


REGISTRY.register(_DecisionCollector())
