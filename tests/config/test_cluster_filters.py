"""Filter chains per virtual cluster: ``virtual_clusters[i].filters`` replaces the top-level ``filters``."""

from __future__ import annotations

from typing import Any

import pytest

from kgate.config import ConfigError, parse_config

POLICY = {"name": "topic-policy", "config": {"deny": ["secret-*"]}}
AUTHZ = {"name": "authorizer", "config": {"rules": [{"allow": "all", "topic": "*"}]}}


def config(*cluster_filters: Any, top: Any = None) -> Any:
    clusters = []
    for i, filters in enumerate(cluster_filters):
        c: dict[str, Any] = {
            "name": f"c{i}",
            "listen": f"127.0.0.1:{20000 + i * 1000}",
            "upstream": "127.0.0.1:9092",
            "node_ports": {"base": 20001 + i * 1000, "count": 16},
        }
        if filters != "unset":
            c["filters"] = filters
        clusters.append(c)
    data: dict[str, Any] = {"virtual_clusters": clusters}
    if top is not None:
        data["filters"] = top
    return parse_config(data, "kgate.yaml")


def test_a_cluster_without_filters_gets_the_default_chain() -> None:
    cfg = config("unset", [AUTHZ], [], top=[POLICY])
    chains = [[f.name for f in cfg.chain_for(vc)] for vc in cfg.virtual_clusters]
    assert chains == [["topic-policy"], ["authorizer"], []]  # replaced, not appended; [] runs none


def test_cluster_filter_errors_name_the_key_path() -> None:
    with pytest.raises(ConfigError, match=r"virtual_clusters\[1\]\.filters\[0\]\.name: no filter named 'nope'"):
        config("unset", [{"name": "nope"}])
    with pytest.raises(ConfigError, match=r"virtual_clusters\[0\]\.filters\[0\]\.config: rules\[0\]: exactly one"):
        config([{"name": "authorizer", "config": {"rules": [{"topic": "t"}]}}])
    with pytest.raises(ConfigError, match=r"virtual_clusters\[0\]\.filters: expected a list"):
        config({"name": "authorizer"})


def test_check_config_summary_shows_a_cluster_chain() -> None:
    from kgate.proxy.runtime.cli import summarize

    text = summarize(config([AUTHZ], "unset", top=[POLICY]), "kgate.yaml")
    assert "filters: authorizer (replaces the top-level list)" in text
    assert "filters: topic-policy" in text
