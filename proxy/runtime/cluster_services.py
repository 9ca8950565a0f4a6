"""``ClusterServices`` (kgate.api) for one virtual cluster: filters' own requests and topic names.

Requests without a node go over the cluster's own client (the one node discovery and topic-id
lookups use). Requests for a node (a partition leader, for a filter's own Produce and Fetch) go
over a connection kept per node, made on first use: a Produce sent to a broker that does not
lead the partition would only come back NOT_LEADER; and a filter's long-poll Fetch there never
holds up the cluster's own connection, which topic-id lookups share. (A node kgate has not
discovered yet is reached through the bootstrap servers, still on that node's own connection.)
Failures surface as ``ConnectionError`` so a
filter needs nothing from kgate's proxy package to handle them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from kgate.proxy.carrier.upstream_client import UpstreamClient, UpstreamError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kgate.api import TopicNameError
    from kgate.config import ProxySettings, VirtualClusterConfig
    from kgate.proxy.carrier.tls import ReloadingContext
    from kgate.proxy.control.metrics import ClusterMetrics
    from kgate.topic_ids import TopicNameResolver


class ServicesCluster(Protocol):
    """What ``ClusterServicesImpl`` reads of its cluster (``VirtualCluster``; a protocol, so this
    module does not import proxy/runtime/cluster.py, which imports it)."""

    @property
    def name(self) -> str: ...
    @property
    def cfg(self) -> VirtualClusterConfig: ...
    @property
    def settings(self) -> ProxySettings: ...
    @property
    def metrics(self) -> ClusterMetrics: ...
    @property
    def own_client(self) -> UpstreamClient: ...
    @property
    def topic_names(self) -> TopicNameResolver: ...
    @property
    def upstream_tls(self) -> ReloadingContext | None: ...
    @property
    def upstream_server_hostname(self) -> str | None: ...
    def upstream_targets(self, node_id: int | None) -> Sequence[tuple[str, int]]: ...


class FilterUpstreamError(ConnectionError):
    """A filter's own request got no answer (the UpstreamError's message)."""


class ClusterServicesImpl:
    """One per virtual cluster; handed to every filter's ``start``."""

    def __init__(self, cluster: ServicesCluster) -> None:
        self._cluster = cluster
        self._node_clients: dict[int, UpstreamClient] = {}

    @property
    def virtual_cluster(self) -> str:
        return self._cluster.name

    def _client(self, node_id: int | None) -> UpstreamClient:
        cluster = self._cluster
        if node_id is None:
            return cluster.own_client
        client = self._node_clients.get(node_id)
        if client is None:
            settings = cluster.settings
            client = UpstreamClient(
                lambda: cluster.upstream_targets(node_id),
                connect_timeout_s=settings.connect_timeout_s,
                max_frame_bytes=settings.max_frame_bytes,
                auth=cluster.cfg.upstream_auth,
                refuse_own_listeners=True,
                # the same TLS as kgate's other upstream connections: without it a filter's request
                # to one node went out in plaintext to a TLS broker (and failed, or worse, did not)
                tls=cluster.upstream_tls,
                server_hostname=cluster.upstream_server_hostname,
                on_tls_failure=lambda: cluster.metrics.tls_handshake_failed("upstream"),
            )
            self._node_clients[node_id] = client
        return client

    async def send_request(
        self,
        api_key: int,
        message: Any,
        version: int | None = None,
        *,
        max_version: int | None = None,
        node_id: int | None = None,
    ) -> Any:
        try:
            _version, response = await self._client(node_id).request(api_key, message, version, hi=max_version)
        except UpstreamError as exc:
            raise FilterUpstreamError(str(exc)) from exc
        return response

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        return self._cluster.topic_names.cached(topic_id)

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        return await self._cluster.topic_names.resolve(topic_ids)

    def close(self) -> None:
        for client in self._node_clients.values():
            client.close()
        self._node_clients.clear()
