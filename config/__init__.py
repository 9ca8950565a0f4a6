"""kgate configuration: model dataclasses, YAML loading and validation (no I/O besides reading files)."""

from .errors import ConfigError
from .loader import load_config, parse_config, quick_config
from .model import (
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

__all__ = [
    "AdminConfig",
    "ClientMetricsConfig",
    "ConfigError",
    "FilterConfig",
    "HostPort",
    "KgateConfig",
    "MetricsConfig",
    "NodePorts",
    "ProxyProtocolConfig",
    "ProxySettings",
    "ServerTlsConfig",
    "TopicMetricsConfig",
    "TopicNamesConfig",
    "UpstreamAuth",
    "UpstreamTlsConfig",
    "VirtualClusterConfig",
    "load_config",
    "parse_config",
    "quick_config",
]
