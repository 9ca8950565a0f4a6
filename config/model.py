"""Immutable configuration model for kgate.

These dataclasses are what the proxy consumes; they are built and validated by
:mod:`kgate.config.loader`. Constructing them directly performs no validation beyond
what the type annotations document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kgate.config.memory_limit import default_max_held_bytes

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        if ":" in self.host:  # IPv6 literal
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> HostPort:
        """Parse ``host:port`` or ``[ipv6]:port``.

        Raises :class:`ValueError` with a short description of the problem. The
        port must be in 1-65535.
        """
        if not isinstance(text, str):
            raise ValueError(f'expected "host:port", got {text!r}')
        s = text.strip()
        if s.startswith("["):
            end = s.find("]")
            if end < 0 or not s[end + 1 :].startswith(":"):
                raise ValueError(f'expected "[ipv6]:port", got "{text}"')
            host, port_s = s[1:end], s[end + 2 :]
            if not host:
                raise ValueError(f'empty host in "{text}"')
        else:
            if ":" not in s:
                raise ValueError(f'expected "host:port", got "{text}"')
            host, port_s = s.rsplit(":", 1)
            if ":" in host:
                raise ValueError(f'IPv6 addresses must be bracketed, e.g. "[::1]:9092", got "{text}"')
            if not host:
                raise ValueError(f'expected "host:port" with a non-empty host, got "{text}"')
        if not port_s.isdigit() or not port_s.isascii():
            raise ValueError(f'expected "host:port" with a numeric port, got "{text}"')
        port = int(port_s)
        if not 1 <= port <= 65535:
            raise ValueError(f'port {port} out of range 1-65535 in "{text}"')
        return cls(host, port)


@dataclass(frozen=True)
class NodePorts:
    base: int
    """Listener port for node id ``first_node_id``."""
    count: int = 256
    """How many node ports are in the range."""
    first_node_id: int = 0

    def port_for(self, node_id: int) -> int | None:
        """The proxy port for broker ``node_id``, or None if it is outside the range."""
        offset = node_id - self.first_node_id
        if 0 <= offset < self.count:
            return self.base + offset
        return None

    @property
    def last_port(self) -> int:
        return self.base + self.count - 1


@dataclass(frozen=True)
class UpstreamAuth:
    """Credentials for kgate's own upstream connection (clients authenticate themselves)."""

    mechanism: str
    """PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."""
    username: str
    password: str = field(repr=False)


TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
CLIENT_AUTH_MODES = ("none", "requested", "required")
PROXY_PROTOCOL_MODES = ("v1", "v2", "any")
DEFAULT_TRUSTED_SOURCES = ("127.0.0.0/8", "::1/128")


@dataclass(frozen=True)
class ServerTlsConfig:
    """TLS towards clients on every listener of a virtual cluster (bootstrap and node ports)."""

    cert_file: str
    """PEM: the server certificate, then any intermediates."""
    key_file: str
    """PEM private key of ``cert_file``."""
    key_password: str | None = field(default=None, repr=False)
    client_ca_file: str | None = None
    """PEM CA bundle that client certificates must chain to (mTLS)."""
    client_auth: str = "none"
    """none, requested (verified if sent) or required (no certificate, no connection)."""
    min_version: str = "TLSv1.2"
    ciphers: str | None = None
    """OpenSSL cipher string for TLS 1.2; TLS 1.3 suites are OpenSSL's (all strong)."""
    reload_interval_s: float = 30.0
    """How often the files are checked for changes; changed files are loaded for new handshakes."""


@dataclass(frozen=True)
class UpstreamTlsConfig:
    """TLS towards the brokers: client connections' upstream sides and kgate's own connection."""

    verify: bool = True
    """Verify the broker's certificate chain and host name. Off only for tests and migrations."""
    ca_file: str | None = None
    """PEM CA bundle for the brokers' certificates; default: the system's trust store."""
    server_hostname: str | None = None
    """Name sent as SNI and checked against the certificate; default: the host connected to."""
    cert_file: str | None = None
    """Client certificate (PEM) when brokers require mTLS; with ``key_file``."""
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    min_version: str = "TLSv1.2"
    reload_interval_s: float = 30.0


@dataclass(frozen=True)
class ProxyProtocolConfig:
    """PROXY protocol (HAProxy v1 text / v2 binary) expected before a client's first byte."""

    mode: str
    """v1, v2 or any (either, told apart by the first bytes)."""
    trusted_sources: tuple[str, ...] = DEFAULT_TRUSTED_SOURCES
    """CIDRs the header is accepted from; connections from elsewhere are refused at accept."""


@dataclass(frozen=True)
class FilterConfig:
    name: str
    """Plugin name (entry point in group ``kgate.filters``)."""
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """The filter's own configuration, opaque to the loader."""


@dataclass(frozen=True)
class VirtualClusterConfig:
    name: str
    listen: HostPort
    """Bootstrap listener bind address."""
    advertised_host: str
    """Host put in rewritten broker addresses."""
    upstream: tuple[HostPort, ...]
    """Upstream bootstrap servers (at least one)."""
    node_ports: NodePorts
    bootstrap_serves_node: bool = True
    upstream_auth: UpstreamAuth | None = None
    """SASL credentials for the requests kgate makes itself (node discovery, topic-id lookups)."""
    max_connections: int = 10_000
    """Client connections each listener of this cluster (bootstrap, every node port) holds at once;
    more are closed as they arrive, logged and counted, so one flood cannot take every descriptor."""
    tls: ServerTlsConfig | None = None
    """TLS towards clients; None: plaintext listeners."""
    upstream_tls: UpstreamTlsConfig | None = None
    """TLS towards the brokers; None: plaintext."""
    proxy_protocol: ProxyProtocolConfig | None = None
    """PROXY protocol on the client listeners; None: off."""
    filters: tuple[FilterConfig, ...] | None = None
    """This cluster's own filter chain; None: the top-level ``filters`` (see ``KgateConfig.chain_for``)."""


@dataclass(frozen=True)
class ProxySettings:
    max_frame_bytes: int = 100 * 1024 * 1024
    drain_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    high_water_bytes: int = 64 * 1024
    low_water_bytes: int = 16 * 1024
    filter_timeout_s: float = 30.0
    """A suspended filter hook that takes longer gets a defined outcome (error answer or close)."""
    max_queued_requests: int = 1000
    """Requests waiting behind a suspended one before kgate stops reading from that client."""
    max_inflight_requests: int = 1000
    """Requests a client may have unanswered on one connection before kgate stops reading from it.

    A client that pipelines without reading its answers (or faster than the broker answers) would
    otherwise grow kgate by one in-flight record per request, and slow every other client down
    (bench/hostile.py; docs/performance.md, "Hostile clients" and "Figures moved out of code
    comments"). Real clients keep 5 (Java) to a few hundred (librdkafka batches) in flight;
    reading resumes as answers go out.
    """
    validate_requests: bool = False
    """Decode every request of a known api key and version (and walk a Produce's record batches)
    before forwarding it; a malformed one closes the connection and never reaches the broker
    (proxy/sansio/validate.py). Off by default, from its measured cost (docs/performance.md, "Request
    validation"): each request is held whole and decoded, and a Produce under a peeking filter is
    no longer streamed, which costs large produce throughput and proxy CPU on every produce."""
    max_held_bytes: int = field(default_factory=default_max_held_bytes)
    """Request bytes held whole across all connections (frames a filter must see, backlog) before
    kgate pauses reading from all but the longest-holding one (proxy/carrier/held_bytes.py). Default: a
    quarter of the memory the process may use (the cgroup's limit, else RAM), between 64 MiB and
    512 MiB (config/memory_limit.py)."""
    idle_timeout_s: float = 600.0
    """A connection with nothing owed and no byte in either direction for this long is closed
    (Kafka's own ``connections.max.idle.ms`` default, which clients already handle)."""
    frame_timeout_s: float = 30.0
    """A request frame (and a new connection's first one) must arrive whole within this time: a
    client that dribbles bytes (slowloris) or connects and sends nothing is closed."""
    upstream_timeout_s: float = 360.0
    """A request the broker has not answered after this long closes the connection (both sides),
    so a broker that never answers cannot hold a client forever. Longer than any wait a client
    asks the broker for with default settings (JoinGroup's rebalance timeout is 300 s)."""
    leader_hints: bool = False
    """Deprecated, no effect (kept so configurations that set it still load; a warning says so).

    It used to cap clients at Produce v9 / Fetch v15 unless true, because rewriting KIP-951 node
    endpoints meant holding Fetch responses whole. kgate now walks those responses as they stream
    and rewrites only their tail (proxy/sansio/response_tail.py), so every version is offered whatever
    this says: a cap changes what clients do (transactions v2 need Produce v12+), and an opt-out
    would keep that defect for every configuration that copied ``leader_hints: false``.
    """
    leader_hints_written: bool = False
    """Whether the configuration wrote ``leader_hints`` (kgate warns that it has no effect)."""


@dataclass(frozen=True)
class TopicNamesConfig:
    """Tuning of the topic-id -> name service (one per virtual cluster)."""

    batch_window_ms: float = 2.0
    negative_ttl_s: float = 5.0
    max_entries: int = 100_000
    idle_revalidate_s: float = 300.0
    sweep_interval_s: float = 60.0
    lookup_timeout_s: float = 10.0


@dataclass(frozen=True)
class MetricsConfig:
    listen: HostPort | None = None
    """Deprecated alias of ``admin.listen`` (kept so existing files keep working)."""


@dataclass(frozen=True)
class TopicMetricsConfig:
    """Per-topic metrics (proxy/control/topic_metrics.py): ``kgate_topic_requests_total``, ``..._bytes_total``."""

    enabled: bool = True
    """On by default: with the cap, at most ~4 series per topic, and little CPU per Produce or Fetch
    (docs/performance.md, "The upstream latency histogram and the per-topic metrics")."""
    max_topics: int = 200
    """Topics with a label of their own, per cluster; later ones count under ``topic="<other>"``."""


@dataclass(frozen=True)
class ClientMetricsConfig:
    """Per-client metrics (proxy/control/client_metrics.py): ``kgate_client_requests_total``, ``..._bytes_total``."""

    enabled: bool = True
    """On by default: one dict read and four adds per exchange, bounded series (docs/quotas.md)."""
    max_clients: int = 1000
    """(principal, client id) pairs with series of their own, per cluster; the rest count as ``client_id="other"``."""


@dataclass(frozen=True)
class AdminConfig:
    """The admin listener: ``/livez``, ``/readyz``, ``/metrics`` (proxy/control/admin.py)."""

    listen: HostPort | None = None
    """None: no admin listener. The embedded default serves it on 127.0.0.1:9190."""
    probe_interval_s: float = 5.0
    """How often each virtual cluster's upstream is asked (ApiVersions over kgate's own connection)."""
    probe_timeout_s: float = 2.0
    """A probe with no answer within this counts as unreachable."""
    from_metrics_listen: bool = False
    """Set when ``listen`` came from the deprecated ``metrics.listen`` (a warning says so)."""
    topic_metrics: TopicMetricsConfig = TopicMetricsConfig()
    """Per-topic metrics, collected only while the admin listener is on (it serves ``/metrics``)."""
    client_metrics: ClientMetricsConfig = ClientMetricsConfig()
    """Per-client metrics, collected only while the admin listener is on."""


@dataclass(frozen=True)
class KgateConfig:
    virtual_clusters: tuple[VirtualClusterConfig, ...]
    proxy: ProxySettings = ProxySettings()
    metrics: MetricsConfig = MetricsConfig()
    log_level: str = "INFO"
    log_format: str = "text"
    """``text`` (human-readable) or ``json`` (one object per line); proxy/control/logs.py."""
    admin: AdminConfig = AdminConfig()
    filters: tuple[FilterConfig, ...] = ()
    """The default chain: for every cluster that sets no ``filters`` of its own."""
    topic_names: TopicNamesConfig = TopicNamesConfig()

    def chain_for(self, cluster: VirtualClusterConfig) -> tuple[FilterConfig, ...]:
        """The filters of ``cluster``: its own list when it has one (replacing the default), else the default.

        Replaced rather than appended: a chain's order matters (an authorizer must run before a filter
        that rewrites what it checks), and a cluster that needs a different policy must be able to
        drop the default one; appending would give it no way to. ``filters: []`` runs no filter.
        """
        return cluster.filters if cluster.filters is not None else self.filters
