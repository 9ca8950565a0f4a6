"""Load and validate kgate configuration (YAML file, mapping, or quick mode).

Everything here is pure: no sockets are opened. Validation errors raise
:class:`config.errors.ConfigError` naming the source, the key path and the problem.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
from collections.abc import Callable, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

from .errors import ConfigError
from .model import (
    CLIENT_AUTH_MODES,
    DEFAULT_TRUSTED_SOURCES,
    PROXY_PROTOCOL_MODES,
    TLS_VERSIONS,
    WILDCARD_HOSTS,
    AdminConfig,
    ClientMetricsConfig,
    FilterConfig,
    HostPort,
    KgateConfig,
    MetricsConfig,
    NodePorts,
    ProxyProtocolConfig,
    ProxySettings,
    ServerTlsConfig,
    TopicMetricsConfig,
    TopicNamesConfig,
    UpstreamAuth,
    UpstreamTlsConfig,
    VirtualClusterConfig,
)
from .self_address import loops_back
from .tls_context import TlsFileError, server_context, upstream_context

__all__ = ["DEFAULT_CONFIG_SOURCE", "LOG_FORMATS", "LOG_LEVELS", "load_config", "parse_config", "quick_config"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
DEFAULT_CONFIG_SOURCE = "<embedded default.yaml>"
QUICK_SOURCE = "command line"
#: the filters of a configuration that names none (top-level ``filters`` absent or null): bounds that keep
#: one request from taking the broker down (docs/guardrails.md). ``filters: []`` turns it off.
DEFAULT_CHAIN: tuple[dict[str, Any], ...] = ({"name": "guardrails"},)

_TOP_KEYS = ("log_level", "proxy", "metrics", "virtual_clusters", "filters", "topic_names", "admin", "log_format")
_PROXY_KEYS = (
    "max_frame_bytes",
    "drain_timeout_s",
    "connect_timeout_s",
    "high_water_bytes",
    "low_water_bytes",
    "filter_timeout_s",
    "max_queued_requests",
    "max_inflight_requests",
    "max_held_bytes",
    "idle_timeout_s",
    "frame_timeout_s",
    "upstream_timeout_s",
    "validate_requests",
    "leader_hints",
)
_TOPIC_NAMES_KEYS = (
    "batch_window_ms",
    "negative_ttl_s",
    "max_entries",
    "idle_revalidate_s",
    "sweep_interval_s",
    "lookup_timeout_s",
)
_METRICS_KEYS = ("listen",)
_ADMIN_KEYS = ("listen", "probe_interval_s", "probe_timeout_s", "topic_metrics", "client_metrics")
_CLIENT_METRICS_KEYS = ("enabled", "max_clients")
_TOPIC_METRICS_KEYS = ("enabled", "max_topics")
_CLUSTER_KEYS = (
    "name",
    "listen",
    "advertised_host",
    "upstream",
    "node_ports",
    "bootstrap_serves_node",
    "upstream_auth",
    "max_connections",
    "tls",
    "upstream_tls",
    "proxy_protocol",
    "filters",
)
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "key_password",
    "key_password_env",
    "client_ca_file",
    "client_auth",
    "min_version",
    "ciphers",
    "reload_interval_s",
)
_UPSTREAM_TLS_KEYS = (
    "verify",
    "ca_file",
    "server_hostname",
    "cert_file",
    "key_file",
    "key_password",
    "key_password_env",
    "min_version",
    "reload_interval_s",
)
_PROXY_PROTOCOL_KEYS = ("mode", "trusted_sources")
_AUTH_KEYS = ("mechanism", "username", "password", "password_env")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_NODE_PORTS_KEYS = ("base", "count", "first_node_id")
_FILTER_KEYS = ("name", "config")

# --------------------------------------------------------------------------- helpers


def _show(value: Any) -> str:
    """Render a user-supplied value for an error message."""
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class _Ctx:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, problem: str) -> ConfigError:
        return ConfigError(self.source, path, problem)

    # -- shapes

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(path, f"expected a mapping, got {_show(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(path, f"keys must be strings, got {_show(key)}")
            if key not in allowed:
                hint = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                msg = f"unknown key {_show(key)}"
                msg += f' (did you mean "{hint[0]}"?)' if hint else f" (allowed: {', '.join(allowed)})"
                raise self.error(_join(path, key), msg)
        return value

    def integer(self, value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, f"expected an integer, got {_show(value)}")
        if minimum is not None and value < minimum:
            if maximum is not None:
                raise self.error(path, f"must be in range {minimum}-{maximum}, got {value}")
            raise self.error(path, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            if minimum is not None:
                raise self.error(path, f"must be in range {minimum}-{maximum}, got {value}")
            raise self.error(path, f"must be <= {maximum}, got {value}")
        return value

    def positive_number(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(path, f"expected a number, got {_show(value)}")
        if not value > 0 or value != value or value == float("inf"):
            raise self.error(path, f"must be a positive finite number, got {_show(value)}")
        return float(value)

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {_show(value)}")
        if not value.strip():
            raise self.error(path, "must not be empty")
        return value.strip()

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(path, f"expected true or false, got {_show(value)}")
        return value

    def host_port(self, value: Any, path: str) -> HostPort:
        if not isinstance(value, str):
            raise self.error(path, f'expected "host:port", got {_show(value)}')
        try:
            return HostPort.parse(value)
        except ValueError as exc:
            raise self.error(path, str(exc)) from None

    def list_of(self, value: Any, path: str, item: Callable[[Any, str], Any]) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise self.error(path, f"expected a list, got {_show(value)}")
        return tuple(item(v, _join(path, i)) for i, v in enumerate(value))


def _freeze(value: Any) -> Any:
    """Deep-copy ``value`` into read-only containers (mappings -> MappingProxyType, lists -> tuples)."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


# --------------------------------------------------------------------------- sections


def _parse_proxy(ctx: _Ctx, value: Any, path: str) -> ProxySettings:
    m = ctx.mapping(value, path, _PROXY_KEYS)
    kw: dict[str, Any] = {}
    _ints = (
        "max_frame_bytes",
        "high_water_bytes",
        "low_water_bytes",
        "max_queued_requests",
        "max_inflight_requests",
        "max_held_bytes",
    )
    for key in _ints:
        if key in m:
            kw[key] = ctx.integer(m[key], _join(path, key), minimum=1)
    for key in (
        "drain_timeout_s",
        "connect_timeout_s",
        "filter_timeout_s",
        "idle_timeout_s",
        "frame_timeout_s",
        "upstream_timeout_s",
    ):
        if key in m:
            kw[key] = ctx.positive_number(m[key], _join(path, key))
    for key in ("leader_hints", "validate_requests"):
        if key in m:
            kw[key] = ctx.boolean(m[key], _join(path, key))
    kw["leader_hints_written"] = "leader_hints" in m  # deprecated, no effect: warned about at start
    settings = ProxySettings(**kw)
    if settings.low_water_bytes >= settings.high_water_bytes:
        # Point at whichever key the user actually wrote.
        wrote_low = "low_water_bytes" in m or "high_water_bytes" not in m
        key = "low_water_bytes" if wrote_low else "high_water_bytes"
        raise ctx.error(
            _join(path, key),
            f"low_water_bytes ({settings.low_water_bytes}) must be less than "
            f"high_water_bytes ({settings.high_water_bytes})",
        )
    return settings


def _parse_topic_names(ctx: _Ctx, value: Any, path: str) -> TopicNamesConfig:
    if value is None:
        return TopicNamesConfig()
    m = ctx.mapping(value, path, _TOPIC_NAMES_KEYS)
    kw: dict[str, Any] = {}
    for key in _TOPIC_NAMES_KEYS:
        if key == "max_entries":
            if key in m:
                kw[key] = ctx.integer(m[key], _join(path, key), minimum=1)
        elif key in m:
            kw[key] = ctx.positive_number(m[key], _join(path, key))
    return TopicNamesConfig(**kw)


def _parse_metrics(ctx: _Ctx, value: Any, path: str) -> MetricsConfig:
    if value is None:
        return MetricsConfig()
    m = ctx.mapping(value, path, _METRICS_KEYS)
    listen = m.get("listen")
    if listen is None:
        return MetricsConfig()
    return MetricsConfig(listen=ctx.host_port(listen, _join(path, "listen")))


def _parse_topic_metrics(ctx: _Ctx, value: Any, path: str) -> TopicMetricsConfig:
    m = ctx.mapping(value, path, _TOPIC_METRICS_KEYS)
    kw: dict[str, Any] = {}
    if "enabled" in m:
        kw["enabled"] = ctx.boolean(m["enabled"], _join(path, "enabled"))
    if "max_topics" in m:
        kw["max_topics"] = ctx.integer(m["max_topics"], _join(path, "max_topics"), minimum=1)
    return TopicMetricsConfig(**kw)


def _parse_client_metrics(ctx: _Ctx, value: Any, path: str) -> ClientMetricsConfig:
    m = ctx.mapping(value, path, _CLIENT_METRICS_KEYS)
    kw: dict[str, Any] = {}
    if "enabled" in m:
        kw["enabled"] = ctx.boolean(m["enabled"], _join(path, "enabled"))
    if "max_clients" in m:
        kw["max_clients"] = ctx.integer(m["max_clients"], _join(path, "max_clients"), minimum=1)
    return ClientMetricsConfig(**kw)


def _parse_admin(ctx: _Ctx, value: Any, path: str, metrics: MetricsConfig) -> AdminConfig:
    """``admin:``; ``metrics.listen`` is its deprecated alias, and both at once is refused.

    Refused rather than one silently winning: two addresses for one listener is a mistake
    whichever the operator meant, and the error names both keys.
    """
    m: Mapping[str, Any] = {} if value is None else ctx.mapping(value, path, _ADMIN_KEYS)
    kw: dict[str, Any] = {}
    for key in ("probe_interval_s", "probe_timeout_s"):
        if key in m:
            kw[key] = ctx.positive_number(m[key], _join(path, key))
    if m.get("topic_metrics") is not None:
        kw["topic_metrics"] = _parse_topic_metrics(ctx, m["topic_metrics"], _join(path, "topic_metrics"))
    if m.get("client_metrics") is not None:
        kw["client_metrics"] = _parse_client_metrics(ctx, m["client_metrics"], _join(path, "client_metrics"))
    listen = m.get("listen")
    if listen is not None:
        if metrics.listen is not None:
            raise ctx.error(
                "metrics.listen",
                "is a deprecated alias of admin.listen and both are set; keep only admin.listen",
            )
        kw["listen"] = ctx.host_port(listen, _join(path, "listen"))
    elif metrics.listen is not None:
        kw["listen"] = metrics.listen
        kw["from_metrics_listen"] = True
    return AdminConfig(**kw)


def _parse_node_ports(ctx: _Ctx, value: Any, path: str, listen: HostPort) -> NodePorts:
    if value is None:
        value = {}
    m = ctx.mapping(value, path, _NODE_PORTS_KEYS)
    base = ctx.integer(m["base"], _join(path, "base"), minimum=1, maximum=65535) if "base" in m else None
    count = ctx.integer(m.get("count", 256), _join(path, "count"), minimum=1)
    first = ctx.integer(m.get("first_node_id", 0), _join(path, "first_node_id"), minimum=0)
    if base is None:
        base = listen.port + 1
    if base + count - 1 > 65535:
        where = _join(path, "count") if "count" in m else (_join(path, "base") if "base" in m else path)
        raise ctx.error(
            where,
            f"node port range {base}-{base + count - 1} exceeds 65535 "
            f"(base {base}{' = listen port + 1' if 'base' not in m else ''}, count {count})",
        )
    nodes = NodePorts(base=base, count=count, first_node_id=first)
    if base <= listen.port <= nodes.last_port:
        raise ctx.error(
            path,
            f"node port range {base}-{nodes.last_port} overlaps the bootstrap listener port {listen.port}",
        )
    return nodes


def _parse_cluster(ctx: _Ctx, value: Any, path: str) -> VirtualClusterConfig:
    m = ctx.mapping(value, path, _CLUSTER_KEYS)
    for required in ("name", "listen", "upstream"):
        if required not in m:
            raise ctx.error(_join(path, required), "required key is missing")
    name = ctx.string(m["name"], _join(path, "name"))
    listen = ctx.host_port(m["listen"], _join(path, "listen"))

    if m.get("advertised_host") is not None:
        advertised = ctx.string(m["advertised_host"], _join(path, "advertised_host"))
        if advertised in WILDCARD_HOSTS:
            raise ctx.error(
                _join(path, "advertised_host"),
                f"{_show(advertised)} is a wildcard address; clients cannot connect to it",
            )
    elif listen.host in WILDCARD_HOSTS:
        raise ctx.error(
            _join(path, "advertised_host"),
            f"required when listen host is the wildcard {_show(listen.host)} (the host name clients should connect to)",
        )
    else:
        advertised = listen.host

    upstream_raw = m["upstream"]
    upath = _join(path, "upstream")
    if isinstance(upstream_raw, str):
        upstream = (ctx.host_port(upstream_raw, upath),)
    else:
        upstream = ctx.list_of(upstream_raw, upath, ctx.host_port)
    if not upstream:
        raise ctx.error(upath, "at least one upstream bootstrap server is required")

    node_ports = _parse_node_ports(ctx, m.get("node_ports"), _join(path, "node_ports"), listen)
    serves = ctx.boolean(m.get("bootstrap_serves_node", True), _join(path, "bootstrap_serves_node"))
    auth = _parse_auth(ctx, m.get("upstream_auth"), _join(path, "upstream_auth"))
    max_conns = ctx.integer(m.get("max_connections", 10_000), _join(path, "max_connections"), minimum=1)
    tls = _parse_tls(ctx, m.get("tls"), _join(path, "tls"))
    upstream_tls = _parse_upstream_tls(ctx, m.get("upstream_tls"), _join(path, "upstream_tls"))
    proxy_protocol = _parse_proxy_protocol(ctx, m.get("proxy_protocol"), _join(path, "proxy_protocol"))
    filters = None
    if m.get("filters") is not None:
        fpath = _join(path, "filters")
        filters = ctx.list_of(m["filters"], fpath, lambda v, p: _parse_filter(ctx, v, p))
    return VirtualClusterConfig(
        tls=tls,
        upstream_tls=upstream_tls,
        proxy_protocol=proxy_protocol,
        filters=filters,
        max_connections=max_conns,
        upstream_auth=auth,
        name=name,
        listen=listen,
        advertised_host=advertised,
        upstream=upstream,
        node_ports=node_ports,
        bootstrap_serves_node=serves,
    )


def _parse_auth(ctx: _Ctx, value: Any, path: str) -> UpstreamAuth | None:
    """SASL credentials for kgate's own connection; the password may come from the environment."""
    if value is None:
        return None
    m = ctx.mapping(value, path, _AUTH_KEYS)
    for required in ("mechanism", "username"):
        if required not in m:
            raise ctx.error(_join(path, required), "required key is missing")
    mechanism = ctx.string(m["mechanism"], _join(path, "mechanism")).upper()
    if mechanism not in _MECHANISMS:
        raise ctx.error(
            _join(path, "mechanism"), f"expected one of {', '.join(_MECHANISMS)}, got {_show(m['mechanism'])}"
        )
    if ("password" in m) == ("password_env" in m):
        raise ctx.error(path, "give exactly one of password and password_env")
    if "password_env" in m:
        var = ctx.string(m["password_env"], _join(path, "password_env"))
        if var not in os.environ:
            raise ctx.error(_join(path, "password_env"), f"environment variable {var} is not set")
        password = os.environ[var]
    else:
        password = ctx.string(m["password"], _join(path, "password"))
    return UpstreamAuth(
        mechanism=mechanism, username=ctx.string(m["username"], _join(path, "username")), password=password
    )


def _choice(ctx: _Ctx, value: Any, path: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ctx.error(path, f"expected one of {', '.join(choices)}, got {_show(value)}")
    return value


def _key_password(ctx: _Ctx, m: Mapping[str, Any], path: str) -> str | None:
    """A private key's password, from the file or (better) from the environment."""
    if "key_password" in m and "key_password_env" in m:
        raise ctx.error(path, "give at most one of key_password and key_password_env")
    if "key_password_env" in m:
        var = ctx.string(m["key_password_env"], _join(path, "key_password_env"))
        if var not in os.environ:
            raise ctx.error(_join(path, "key_password_env"), f"environment variable {var} is not set")
        return os.environ[var]
    if "key_password" in m:
        return ctx.string(m["key_password"], _join(path, "key_password"))
    return None


def _parse_tls(ctx: _Ctx, value: Any, path: str) -> ServerTlsConfig | None:
    """TLS towards clients; the files are loaded here, so a bad one stops kgate before it binds."""
    if value is None:
        return None
    m = ctx.mapping(value, path, _TLS_KEYS)
    for required in ("cert_file", "key_file"):
        if required not in m:
            raise ctx.error(_join(path, required), "required key is missing")
    kw: dict[str, Any] = {
        "cert_file": ctx.string(m["cert_file"], _join(path, "cert_file")),
        "key_file": ctx.string(m["key_file"], _join(path, "key_file")),
        "key_password": _key_password(ctx, m, path),
    }
    if m.get("client_ca_file") is not None:
        kw["client_ca_file"] = ctx.string(m["client_ca_file"], _join(path, "client_ca_file"))
    if "client_auth" in m:
        kw["client_auth"] = _choice(ctx, m["client_auth"], _join(path, "client_auth"), CLIENT_AUTH_MODES)
    if "min_version" in m:
        kw["min_version"] = _choice(ctx, m["min_version"], _join(path, "min_version"), TLS_VERSIONS)
    if m.get("ciphers") is not None:
        kw["ciphers"] = ctx.string(m["ciphers"], _join(path, "ciphers"))
    if "reload_interval_s" in m:
        kw["reload_interval_s"] = ctx.positive_number(m["reload_interval_s"], _join(path, "reload_interval_s"))
    cfg = ServerTlsConfig(**kw)
    if cfg.client_auth != "none" and not cfg.client_ca_file:
        raise ctx.error(
            _join(path, "client_ca_file"), f"required with client_auth: {cfg.client_auth} (the CA clients chain to)"
        )
    if cfg.client_auth == "none" and cfg.client_ca_file:
        raise ctx.error(
            _join(path, "client_auth"),
            "client_ca_file is set but client_auth is none (the default), so no client certificate would be "
            "asked for; set client_auth: required (or requested)",
        )
    try:
        server_context(cfg)
    except TlsFileError as exc:
        raise ctx.error(_join(path, exc.key), exc.problem) from None
    return cfg


def _parse_upstream_tls(ctx: _Ctx, value: Any, path: str) -> UpstreamTlsConfig | None:
    """TLS towards the brokers; ``true`` or ``{}`` means verified TLS with the system's CAs."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    m = ctx.mapping(value, path, _UPSTREAM_TLS_KEYS)
    kw: dict[str, Any] = {"key_password": _key_password(ctx, m, path)}
    if "verify" in m:
        kw["verify"] = ctx.boolean(m["verify"], _join(path, "verify"))
    for key in ("ca_file", "server_hostname", "cert_file", "key_file"):
        if m.get(key) is not None:
            kw[key] = ctx.string(m[key], _join(path, key))
    if "min_version" in m:
        kw["min_version"] = _choice(ctx, m["min_version"], _join(path, "min_version"), TLS_VERSIONS)
    if "reload_interval_s" in m:
        kw["reload_interval_s"] = ctx.positive_number(m["reload_interval_s"], _join(path, "reload_interval_s"))
    cfg = UpstreamTlsConfig(**kw)
    if bool(cfg.cert_file) != bool(cfg.key_file):
        missing = "key_file" if cfg.cert_file else "cert_file"
        raise ctx.error(_join(path, missing), "cert_file and key_file go together (kgate's client certificate)")
    try:
        upstream_context(cfg)
    except TlsFileError as exc:
        raise ctx.error(_join(path, exc.key), exc.problem) from None
    return cfg


def _cidr(ctx: _Ctx, value: Any, path: str) -> str:
    text = ctx.string(value, path)
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError as exc:
        raise ctx.error(path, f"expected a CIDR such as 10.0.0.0/8 or an address ({exc})") from None


def _parse_proxy_protocol(ctx: _Ctx, value: Any, path: str) -> ProxyProtocolConfig | None:
    """``v1``/``v2``/``any``/``off`` (YAML reads a bare off as false), or {mode, trusted_sources}."""
    if value is None or value is False or value == "off":
        return None
    if isinstance(value, str):
        return ProxyProtocolConfig(mode=_choice(ctx, value, path, (*PROXY_PROTOCOL_MODES, "off")))
    m = ctx.mapping(value, path, _PROXY_PROTOCOL_KEYS)
    if "mode" not in m:
        raise ctx.error(_join(path, "mode"), "required key is missing (v1, v2, any or off)")
    mode = m["mode"]
    if mode is False or mode == "off":
        return None
    mode = _choice(ctx, mode, _join(path, "mode"), (*PROXY_PROTOCOL_MODES, "off"))
    trusted = DEFAULT_TRUSTED_SOURCES
    if "trusted_sources" in m:
        tpath = _join(path, "trusted_sources")
        trusted = ctx.list_of(m["trusted_sources"], tpath, lambda v, p: _cidr(ctx, v, p))
        if not trusted:
            raise ctx.error(tpath, "at least one CIDR (with none, every connection would be refused)")
    return ProxyProtocolConfig(mode=mode, trusted_sources=trusted)


def _parse_filter(ctx: _Ctx, value: Any, path: str) -> FilterConfig:
    m = ctx.mapping(value, path, _FILTER_KEYS)
    if "name" not in m:
        raise ctx.error(_join(path, "name"), "required key is missing")
    name = ctx.string(m["name"], _join(path, "name"))
    conf = m.get("config")
    if conf is None:
        conf = {}
    if not isinstance(conf, Mapping):
        raise ctx.error(_join(path, "config"), f"expected a mapping, got {_show(conf)}")
    from kgate.api import FilterConfigError
    from kgate.filters.registry import FilterLookupError, validate_filter_config

    try:
        validated = validate_filter_config(name, conf)
    except FilterLookupError as exc:
        raise ctx.error(_join(path, "name"), str(exc)) from None
    except FilterConfigError as exc:
        raise ctx.error(_join(path, "config"), str(exc)) from None
    return FilterConfig(name=name, config=_freeze(validated))


def _cluster_ports(vc: VirtualClusterConfig) -> tuple[tuple[int, int], ...]:
    """Inclusive port intervals bound by a cluster: the bootstrap port and the node range."""
    return ((vc.listen.port, vc.listen.port), (vc.node_ports.base, vc.node_ports.last_port))


def _fmt_interval(lo: int, hi: int) -> str:
    return f"port {lo}" if lo == hi else f"ports {lo}-{hi}"


def _check_cluster_conflicts(ctx: _Ctx, clusters: tuple[VirtualClusterConfig, ...], admin: AdminConfig):
    names: dict[str, int] = {}
    for i, vc in enumerate(clusters):
        path = _join("virtual_clusters", i)
        if vc.name in names:
            raise ctx.error(
                _join(path, "name"),
                f"duplicate cluster name {_show(vc.name)} (also virtual_clusters[{names[vc.name]}])",
            )
        names[vc.name] = i
        for j in range(i):
            other = clusters[j]
            for lo, hi in _cluster_ports(vc):
                for olo, ohi in _cluster_ports(other):
                    if lo <= ohi and olo <= hi:
                        raise ctx.error(
                            path,
                            f"{_fmt_interval(lo, hi)} of cluster {_show(vc.name)} overlap "
                            f"{_fmt_interval(olo, ohi)} of cluster {_show(other.name)} "
                            f"(virtual_clusters[{j}])",
                        )
    if admin.listen is not None:
        port = admin.listen.port
        for vc in clusters:
            for lo, hi in _cluster_ports(vc):
                if lo <= port <= hi:
                    raise ctx.error(
                        "metrics.listen" if admin.from_metrics_listen else "admin.listen",
                        f"port {port} is also used by cluster {_show(vc.name)} ({_fmt_interval(lo, hi)})",
                    )


def _check_no_self_upstream(ctx: _Ctx, clusters: tuple[VirtualClusterConfig, ...]) -> None:
    """Refuse an upstream that is one of kgate's own listeners: it would forward to itself forever."""
    listeners = [(vc.listen.host, lo, hi) for vc in clusters for lo, hi in _cluster_ports(vc)]
    advertised = tuple(vc.advertised_host for vc in clusters)
    for i, vc in enumerate(clusters):
        for j, up in enumerate(vc.upstream):
            hit = loops_back((up.host, up.port), listeners, advertised)
            if hit is None:
                continue
            owner = next(c for c in clusters if any(lo <= up.port <= hi for lo, hi in _cluster_ports(c)))
            what = "bootstrap listener" if up.port == owner.listen.port else "node port range"
            path = _join(_join("virtual_clusters", i), "upstream")
            if len(vc.upstream) > 1:
                path = _join(path, j)
            raise ctx.error(
                path,
                f"{up} is kgate's own {what} ({_fmt_interval(hit[1], hit[2])} of cluster {_show(owner.name)}); "
                "kgate would connect to itself",
            )


# --------------------------------------------------------------------------- public API


def parse_config(data: Mapping[str, Any], source: str) -> KgateConfig:
    """Validate an already-parsed configuration mapping (e.g. from YAML).

    ``source`` names where the data came from and prefixes every error message.
    """
    ctx = _Ctx(source)
    if data is None:
        raise ctx.error("", "configuration is empty")
    m = ctx.mapping(data, "", _TOP_KEYS)

    log_level = "INFO"
    if "log_level" in m:
        raw = m["log_level"]
        if not isinstance(raw, str) or raw.strip().upper() not in LOG_LEVELS:
            raise ctx.error(
                "log_level", f"expected one of {', '.join(lv.lower() for lv in LOG_LEVELS)}, got {_show(raw)}"
            )
        log_level = raw.strip().upper()
    log_format = "text"
    if "log_format" in m:
        raw = m["log_format"]
        if not isinstance(raw, str) or raw.strip().lower() not in LOG_FORMATS:
            raise ctx.error("log_format", f"expected one of {', '.join(LOG_FORMATS)}, got {_show(raw)}")
        log_format = raw.strip().lower()

    proxy = _parse_proxy(ctx, m["proxy"], "proxy") if m.get("proxy") is not None else ProxySettings()
    metrics = _parse_metrics(ctx, m.get("metrics"), "metrics")
    admin = _parse_admin(ctx, m.get("admin"), "admin", metrics)

    if m.get("virtual_clusters") is None:
        raise ctx.error("virtual_clusters", "required key is missing (at least one virtual cluster is required)")
    clusters = ctx.list_of(m["virtual_clusters"], "virtual_clusters", lambda v, p: _parse_cluster(ctx, v, p))
    if not clusters:
        raise ctx.error("virtual_clusters", "at least one virtual cluster is required")
    _check_cluster_conflicts(ctx, clusters, admin)
    _check_no_self_upstream(ctx, clusters)

    raw_filters = m.get("filters")
    if raw_filters is None:  # not named: the default chain (docs/configuration.md#filters); [] runs none
        raw_filters, fpath = DEFAULT_CHAIN, "filters (the default chain)"
    else:
        fpath = "filters"
    filters = ctx.list_of(raw_filters, fpath, lambda v, p: _parse_filter(ctx, v, p))

    topic_names = _parse_topic_names(ctx, m.get("topic_names"), "topic_names")

    return KgateConfig(
        topic_names=topic_names,
        virtual_clusters=clusters,
        proxy=proxy,
        metrics=metrics,
        log_level=log_level,
        log_format=log_format,
        admin=admin,
        filters=filters,
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of silently keeping the last one."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # let the default constructor report it
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {_show(key)}",
                key_node.start_mark,
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, source: str) -> KgateConfig:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = "; ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise ConfigError(source, where, f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"YAML error: {exc}") from None
    if data is None:
        raise ConfigError(source, "", "file is empty (expected a YAML mapping with virtual_clusters)")
    if not isinstance(data, Mapping):
        raise ConfigError(source, "", f"expected a YAML mapping at the top level, got {_show(data)}")
    return parse_config(data, source)


def default_config_text() -> str:
    """The text of the embedded default configuration (``config/default.yaml``)."""
    return resources.files(__package__).joinpath("default.yaml").read_text(encoding="utf-8")


def load_config(path: str | os.PathLike[str] | None) -> KgateConfig:
    """Load and validate a YAML configuration file.

    ``None`` loads the embedded default configuration, which proxies a broker on
    127.0.0.1:9092 at 127.0.0.1:9192.
    """
    if path is None:
        return _parse_yaml(default_config_text(), DEFAULT_CONFIG_SOURCE)
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(source, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(source, "", "is a directory, expected a YAML file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, "", f"not valid UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read file: {exc.strerror or exc}") from None
    return _parse_yaml(text, source)


def quick_config(listen: str, upstream: str, filters: list[dict[str, Any]] | None = None) -> KgateConfig:
    """A single-cluster configuration from command-line style arguments.

    ``listen`` is ``host:port`` for the bootstrap listener; ``upstream`` is one or
    more comma-separated ``host:port`` bootstrap servers. The cluster is named
    ``default`` and its node ports start at the listen port + 1.
    """
    ctx = _Ctx(QUICK_SOURCE)
    listen_hp = ctx.host_port(listen, "--listen")
    if not isinstance(upstream, str):
        raise ctx.error("--upstream", f'expected "host:port", got {_show(upstream)}')
    parts = [p.strip() for p in upstream.split(",") if p.strip()]
    if not parts:
        raise ctx.error("--upstream", 'expected "host:port[,host:port...]", got ""')
    ups = [str(ctx.host_port(p, "--upstream")) for p in parts]
    if listen_hp.port == 65535:
        raise ctx.error("--listen", "port 65535 leaves no room for node ports (they start at listen port + 1)")
    count = min(256, 65535 - listen_hp.port)
    cluster: dict[str, Any] = {
        "name": "default",
        "listen": str(listen_hp),
        "upstream": ups,
        "node_ports": {"base": listen_hp.port + 1, "count": count},
    }
    if listen_hp.host in WILDCARD_HOSTS:
        raise ctx.error(
            "--listen",
            f"cannot listen on the wildcard address {_show(listen_hp.host)} in quick mode "
            "(no advertised host); use a config file with advertised_host",
        )
    # --filter adds to the default chain, so naming a filter on the command line never silently drops
    # the guardrails; one named again (guardrails with a config of its own) takes the default's place
    named = {f.get("name") for f in filters or ()}
    chain = [dict(f) for f in DEFAULT_CHAIN if f["name"] not in named] + list(filters or ())
    return parse_config({"virtual_clusters": [cluster], "filters": chain}, QUICK_SOURCE)
