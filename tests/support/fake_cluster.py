"""A small fake of what ``ConnectionCore`` needs from its cluster (proxy/sansio/cluster_port.py).

A stand-in by design: the core's tests need a cluster only as a dependency (its chain-derived
tables, its metrics, its node map), not its listeners or sockets. The tables and metrics are
kgate's own (``ChainTables``, ``ClusterMetrics``), so the core reads exactly what it would under
``VirtualCluster``; the node map is a dict the test fills, and binding a node's listener is the
carrier's action (``RecordingActions.open_listener`` calls ``bind`` here).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from kgate.api import ErrorCode, TopicNameError
from kgate.config import ProxySettings
from kgate.filters.chain import FilterChain
from kgate.filters.exchanges import ExchangeObserver
from kgate.proxy.control.metrics import ClusterMetrics
from kgate.proxy.sansio.chain_tables import ChainTables
from kgate.proxy.sansio.cluster_port import OPEN_LISTENER, Address, OpenListener

HOST = "127.0.0.1"  # the client-facing host of every node in the fake (the listen host of make_core's config)


class FakeTopicNames:
    """Topic names the test taught (``names``); unknown ids resolve to an error, nothing is looked up."""

    def __init__(self) -> None:
        self.names: dict[UUID, str] = {}
        self.observed: list[tuple[int, int]] = []

    def cached(self, topic_id: UUID) -> str | None:
        return self.names.get(topic_id)

    async def resolve(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        unknown = TopicNameError(int(ErrorCode.UNKNOWN_TOPIC_ID), "not known to the fake", False)
        return {t: self.names.get(t) or unknown for t in topic_ids}

    def observe(self, api_key: int, version: int, msg: Any, request: Any = None) -> None:
        self.observed.append((api_key, version))


class FakeOwnClient:
    async def request(self, api_key: int, message: Any, version: int | None = None) -> tuple[int, Any]:
        raise ConnectionError("the fake cluster has no upstream")


class FakeCluster:
    """``ClusterPort`` without listeners: node N is served on ``base_port + N`` once bound."""

    def __init__(self, settings: ProxySettings, chain: FilterChain, name: str = "t", base_port: int = 19100) -> None:
        self.name = name
        self.settings = settings
        self.metrics = ClusterMetrics(name)
        self.exchange_observer: ExchangeObserver | None = None
        self.topic_names = FakeTopicNames()
        self.own_client = FakeOwnClient()
        self.base_port = base_port
        self.upstream_nodes: dict[int, Address] = {}  # node id -> the broker address a response named
        self.node_ports: dict[int, int] = {}  # node id -> its listener's port, once bound
        self.bound: list[int] = []  # nodes bound, in order (each once)
        self.use_chain(chain)

    def use_chain(self, chain: FilterChain) -> None:
        """What ``VirtualCluster._use_chain`` does: the chain and the tables derived from it."""
        tables = ChainTables(chain, self.metrics.request_count)
        self.chain = chain
        self.plans = tables.plans
        self.answers = tables.answers
        self.filter_limits = tables.filter_limits

    def learn_node(self, node_id: int, host: str, port: int) -> Address | OpenListener | None:
        self.upstream_nodes[node_id] = (host, port)
        kport = self.node_ports.get(node_id)
        return OPEN_LISTENER if kport is None else (HOST, kport)

    def bind(self, node_id: int) -> Address | None:
        """The carrier's ``open_listener``: the node's port, as ``VirtualCluster.open_node_listener`` would."""
        kport = self.node_ports[node_id] = self.base_port + node_id
        self.bound.append(node_id)
        return HOST, kport

    def mapped_address(self, node_id: int, host: str, port: int) -> Address | None:
        kport = self.node_ports.get(node_id) if node_id in self.upstream_nodes else None
        return None if kport is None else (HOST, kport)

    def nodes_for_empty_answer(self) -> list[tuple[int, str, int]]:
        return [(n, HOST, self.node_ports[n]) for n in self.upstream_nodes if n in self.node_ports]

    def observe_response(self, api_key: int, version: int, msg: Any, request: Any = None) -> None:
        self.topic_names.observe(api_key, version, msg, request)
