"""The load-time check that an upstream is not one of kgate's own listeners (pure, no sockets)."""

from __future__ import annotations

import pytest

from kgate.config import parse_config
from kgate.config.errors import ConfigError
from kgate.config.self_address import loops_back, same_host


@pytest.mark.parametrize(
    ("listen", "target", "same"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "localhost", True),
        ("127.0.0.1", "LOCALHOST", True),
        ("::1", "127.0.0.1", True),  # a name like localhost may resolve to either
        ("[::1]", "::1", True),
        ("0.0.0.0", "127.0.0.5", True),  # a wildcard listener accepts on every loopback address
        ("0.0.0.0", "0.0.0.0", True),
        ("127.0.0.1", "kafka.example.com", False),
        ("10.0.0.5", "127.0.0.1", False),
        ("0.0.0.0", "kafka.example.com", False),  # unknowable without DNS: the socket check covers it
    ],
)
def test_same_host(listen: str, target: str, same: bool) -> None:
    assert same_host(listen, target) is same


def test_loops_back_by_port_range_and_advertised_host() -> None:
    listeners = [("127.0.0.1", 9192, 9192), ("127.0.0.1", 9193, 9448)]
    assert loops_back(("localhost", 9192), listeners) == ("127.0.0.1", 9192, 9192)
    assert loops_back(("127.0.0.1", 9300), listeners) == ("127.0.0.1", 9193, 9448)
    assert loops_back(("127.0.0.1", 9092), listeners) is None
    # the client-facing name under one of kgate's ports is kgate: what a rewritten answer carries
    assert loops_back(("kgate.internal", 9200), listeners, ("kgate.internal",)) is not None
    assert loops_back(("broker.internal", 9200), listeners, ("kgate.internal",)) is None


def _cfg(upstream: list[str], second: bool = False) -> dict:
    clusters = [{"name": "a", "listen": "127.0.0.1:9192", "upstream": upstream, "node_ports": {"base": 9193}}]
    if second:
        clusters.append(
            {
                "name": "b",
                "listen": "127.0.0.1:9500",
                "upstream": ["broker:9092"],
                "node_ports": {"base": 9501, "count": 4},
            }
        )
    return {"virtual_clusters": clusters}


def test_config_refuses_an_upstream_in_another_clusters_range() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_cfg(["broker:9092", "127.0.0.1:9502"], second=True), "k.yaml")
    msg = str(err.value)
    assert "virtual_clusters[0].upstream[1]:" in msg
    assert 'own node port range (ports 9501-9504 of cluster "b")' in msg


def test_config_accepts_a_real_broker() -> None:
    cfg = parse_config(_cfg(["127.0.0.1:9092"]), "k.yaml")
    assert str(cfg.virtual_clusters[0].upstream[0]) == "127.0.0.1:9092"
