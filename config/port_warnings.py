"""Warnings (not errors) about listener ports inside the kernel's ephemeral port range.

The kernel picks the local port of every outgoing connection from
``net.ipv4.ip_local_port_range`` (32768-60999 by default on Linux). A kgate node port inside that
range can be taken by one of kgate's own (or anyone's) outgoing connections, or stay unbindable
while such a connection sits in TIME_WAIT: the node then cannot be served until the port frees
up (kgate retries the bind, see proxy/runtime/cluster.py). Configurations doing it still work most of the
time, hence a warning from ``kgate check-config`` rather than a refusal.
"""

from __future__ import annotations

from pathlib import Path

from .model import KgateConfig

DEFAULT_RANGE = (32768, 60999)
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range, or Linux's default where it cannot be read."""
    try:
        lo, hi = (int(x) for x in path.read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return DEFAULT_RANGE


def port_warnings(config: KgateConfig, ephemeral: tuple[int, int]) -> list[str]:
    """One line per listener port or node port range that overlaps ``ephemeral``."""
    lo, hi = ephemeral
    out = []
    for i, vc in enumerate(config.virtual_clusters):
        path = f"virtual_clusters[{i}]"
        if lo <= vc.listen.port <= hi:
            out.append(f"{path}.listen: port {vc.listen.port} is inside the ephemeral port range {lo}-{hi}")
        np = vc.node_ports
        if np.base <= hi and lo <= np.last_port:
            out.append(
                f"{path}.node_ports: ports {np.base}-{np.last_port} overlap the ephemeral port range {lo}-{hi}; "
                "a node port may be unbindable while outgoing connections use it (or sit in TIME_WAIT)"
            )
    if config.metrics.listen is not None and lo <= config.metrics.listen.port <= hi:
        out.append(f"metrics.listen: port {config.metrics.listen.port} is inside the ephemeral port range {lo}-{hi}")
    return out
