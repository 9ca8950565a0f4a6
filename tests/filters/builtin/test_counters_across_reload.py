"""Filter counters never go down when a reload replaces the filter instance that counted.

A reload builds new filter instances and the old ones are garbage-collected; the collectors used to
sum only the live instances, so ``kgate_audit_events_written_total`` fell from 1,765 to 53 and
``kgate_authz_decisions_total`` vanished after a reload (found by a new-user review). Each test
counts on an instance, lets it die as a reload does, and reads the counter from the registry.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prometheus_client.core import REGISTRY

from kgate.api import TopicNameError
from kgate.filters.builtin.audit.filter import AuditLog
from kgate.filters.builtin.authz.report import DecisionReport
from kgate.filters.builtin.quotas.filter import Quotas

pytestmark = pytest.mark.unit


class _Services:
    """What the proxy hands an exchange observer (filters.exchanges.ExchangeServices), for one cluster."""

    def __init__(self, cluster: str, loop: asyncio.AbstractEventLoop) -> None:
        self.cluster, self.loop, self.worker = cluster, loop, None

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        return None

    async def topic_names(self, topic_ids: Any) -> dict[UUID, str | TopicNameError]:
        return {}


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_authz_decisions_survive_the_instance() -> None:
    labels = {"cluster": "reload-c", "filter": "authz-reload", "decision": "allow", "api": "Produce"}
    before = _sample("kgate_authz_decisions_total", labels)
    report = DecisionReport("authz-reload")
    report.counts[("reload-c", 0, True)] += 3
    assert _sample("kgate_authz_decisions_total", labels) == before + 3
    del report
    gc.collect()
    assert _sample("kgate_authz_decisions_total", labels) == before + 3
    again = DecisionReport("authz-reload")  # the reloaded instance counts on top
    again.counts[("reload-c", 0, True)] += 1
    assert _sample("kgate_authz_decisions_total", labels) == before + 4


async def test_quota_throttle_seconds_survive_the_instance() -> None:
    labels = {"cluster": "reload-q", "principal": "p", "client_id": "c"}
    before = _sample("kgate_client_throttle_seconds_total", labels)
    q = Quotas(Quotas.validate_config({"rules": [{"client_id": "c", "requests_per_s": 1}]}))
    q.observe_exchanges(_Services("reload-q", asyncio.get_running_loop()))  # type: ignore[arg-type]
    q.throttled[("p", "c")] += 1.5
    del q
    gc.collect()
    assert _sample("kgate_client_throttle_seconds_total", labels) == before + 1.5


async def test_audit_counts_survive_the_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the malloc tuning looks up libc with ldconfig (a process): not what this test is about
    monkeypatch.setattr("kgate.filters.builtin.audit.filter.keep_freed_memory", lambda _n: None)
    labels = {"cluster": "reload-a", "sink": "file"}
    dropped = {"cluster": "reload-a", "reason": "queue_full"}
    before = _sample("kgate_audit_events_written_total", labels)
    before_dropped = _sample("kgate_audit_events_dropped_total", dropped)
    f = AuditLog(AuditLog.validate_config({"directory": str(tmp_path)}))
    f.observe_exchanges(_Services("reload-a", asyncio.get_running_loop()))  # type: ignore[arg-type]
    f.counters.written += 5
    f.counters.queue_full += 2
    await f.close()
    del f
    gc.collect()
    assert _sample("kgate_audit_events_written_total", labels) == before + 5
    assert _sample("kgate_audit_events_dropped_total", dropped) == before_dropped + 2
