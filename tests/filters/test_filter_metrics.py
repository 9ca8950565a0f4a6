"""The SRE metrics that filters and connections move, scraped from the admin listener's /metrics.

kgate runs in-process (filters defined here) in front of a real Tansu; clients are kgate's own
``UpstreamClient`` pointed at kgate. Each check compares a counter with what the clients did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import urllib.request
from typing import Any

import pytest
from support.inproc_kgate import InprocKgate, make_config
from support.ports import free_port

from kgate import __version__
from kgate.api import FORWARD, ApiKey, Filter, FilterContext, on_request, respond
from kgate.codec import api
from kgate.codec.generated.api_keys import API_VERSIONS, METADATA
from kgate.config import AdminConfig, HostPort
from kgate.filters.registry import register_filter
from kgate.proxy.carrier.upstream_client import UpstreamClient, UpstreamError

SLOW_S = 0.3


class Outcomes(Filter):
    """Metadata for ``local-*``: answered here; ``slow-*``: awaits then forwards; ``hang-*``: never
    returns (filter timeout); ``boom-*`` / ``aboom-*``: raises (synchronously / after awaiting)."""

    name = "test-metric-outcomes"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        names = [t.name for t in request.topics or []]
        first = names[0] if names else ""
        if first.startswith("local-"):
            return respond(api.API_INFO[METADATA].response_class())
        if first.startswith("slow-"):
            return self._slow()
        if first.startswith("hang-"):
            return asyncio.sleep(3600)
        if first.startswith("boom-"):
            raise RuntimeError("synchronous filter bug")
        if first.startswith("aboom-"):
            return self._boom()
        return FORWARD

    async def _slow(self) -> Any:
        await asyncio.sleep(SLOW_S)
        return FORWARD

    async def _boom(self) -> Any:
        await asyncio.sleep(0)
        raise RuntimeError("asynchronous filter bug")


register_filter("test-metric-outcomes", Outcomes)


def _metadata(*names: str) -> Any:
    from kgate.codec.generated.data.metadata import MetadataRequestTopic

    return api.API_INFO[METADATA].request_class(
        topics=[MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False
    )


@pytest.fixture
def kgate(tansu):
    config = make_config(tansu.bootstrap, [{"name": "test-metric-outcomes"}], filter_timeout_s=0.5)
    admin = AdminConfig(listen=HostPort("127.0.0.1", free_port()), probe_interval_s=0.2)
    k = InprocKgate(dataclasses.replace(config, admin=admin)).start()
    yield k
    k.stop()


def _scrape(k: InprocKgate) -> str:
    port = k.config.admin.listen.port  # type: ignore[union-attr]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total


def _client(k: InprocKgate) -> UpstreamClient:
    return UpstreamClient(lambda: [("127.0.0.1", k.port)], client_id="test")


async def _ask(client: UpstreamClient, topic: str) -> Any:
    return await client.request(METADATA, _metadata(topic), lo=1, timeout_s=5)


class Delta:
    """Values since the test began: other in-process kgates of this session (cluster "default"
    too) may still be alive and counted in the same registry."""

    def __init__(self, k: InprocKgate) -> None:
        self.k = k
        self.base = _scrape(k)
        self.text = self.base

    def scrape(self) -> Delta:
        self.text = _scrape(self.k)
        return self

    def __call__(self, name: str, **labels: str) -> float:
        return _value(self.text, name, **labels) - _value(self.base, name, **labels)


async def test_counters_follow_what_the_clients_did(kgate) -> None:
    d = Delta(kgate)
    a, b = _client(kgate), _client(kgate)
    try:
        await a.request(API_VERSIONS, api.API_INFO[API_VERSIONS].request_class(), 3)
        await b.request(API_VERSIONS, api.API_INFO[API_VERSIONS].request_class(), 3)
        d.scrape()
        assert d("kgate_open_connections", cluster="default", side="client") == 2
        assert d("kgate_open_connections", cluster="default", side="upstream") == 2

        await _ask(a, "local-1")
        await _ask(a, "local-2")
        await _ask(a, "slow-1")
        await _ask(a, "plain-1")
        await _ask(b, "hang-1")  # kgate answers REQUEST_TIMED_OUT after filter_timeout_s
        d.scrape()
        filt = {"cluster": "default", "filter": "test-metric-outcomes", "direction": "request"}
        assert d("kgate_filter_decisions_total", decision="respond", **filt) == 2
        assert d("kgate_filter_timeouts_total", **filt) == 1
        assert d("kgate_filter_errors_total", **filt) == 0
        assert d("kgate_suspension_seconds_count", cluster="default", direction="request") == 2
        waited = d("kgate_suspension_seconds_sum", cluster="default", direction="request")
        assert waited >= SLOW_S + 0.5 - 0.01  # slow + timed out; the loop's clock moves in ms steps
        assert d("kgate_suspension_seconds_bucket", direction="request", le="0.1") == 0
        assert d("kgate_suspension_seconds_bucket", direction="request", le="+Inf") == 2
        assert d("kgate_suspended_messages", cluster="default", direction="request") == 0
        # api names, not numbers, label the request counter
        assert d("kgate_requests_total", cluster="default", api="Metadata") == 5
        assert 'api_key="3"' not in d.text
        assert _value(d.text, "kgate_build_info", version=__version__) == 1  # a gauge, not a delta

        for topic in ("boom-1", "aboom-1"):  # a filter bug closes that connection
            c = _client(kgate)
            try:
                with pytest.raises(UpstreamError):
                    await _ask(c, topic)
            finally:
                c.close()
        d.scrape()
        assert d("kgate_filter_errors_total", **filt) == 2
    finally:
        a.close()
        b.close()
    for _ in range(200):  # closes are asynchronous: poll until the gauges come back down
        if d.scrape()("kgate_open_connections", cluster="default") == 0:
            break
        await asyncio.sleep(0.02)
    assert d("kgate_open_connections", cluster="default", side="client") == 0
    assert d("kgate_open_connections", cluster="default", side="upstream") == 0
