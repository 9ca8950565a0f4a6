"""config/reload_plan.py: what a reload may change, and the key paths it names when it may not."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kgate.config import ConfigError, parse_config
from kgate.config.reload_plan import plan_reload


def cluster(name: str, port: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "listen": f"127.0.0.1:{port}",
        "upstream": ["127.0.0.1:9092"],
        "node_ports": {"base": port + 1, "count": 4},
        **extra,
    }


BASE: dict[str, Any] = {
    "virtual_clusters": [cluster("a", 19000), cluster("b", 19100)],
    "filters": [{"name": "topic-policy", "config": {"deny": ["secret*"]}}],
}


def plan(old: dict[str, Any], new: dict[str, Any]):
    return plan_reload(parse_config(old, "old.yaml"), parse_config(new, "new.yaml"), "new.yaml")


def test_same_config_changes_nothing() -> None:
    p = plan(BASE, copy.deepcopy(BASE))
    assert p.changes_nothing
    assert p.summary() == "no changes"


def test_top_level_chain_change_replaces_the_chain_of_every_cluster_that_inherits_it() -> None:
    new = copy.deepcopy(BASE)
    new["filters"][0]["config"]["deny"] = ["secret*", "audit*"]
    new["virtual_clusters"][1]["filters"] = [{"name": "topic-policy", "config": {"deny": ["secret*"]}}]
    p = plan(BASE, new)
    # b now has its own list, equal to the old default: its chain is unchanged
    assert p.chains_replaced == ("a",)
    assert (p.added, p.removed) == ((), ())
    assert p.summary() == "filter chains replaced: a"


def test_a_clusters_own_chain_change_is_that_clusters_only() -> None:
    new = copy.deepcopy(BASE)
    new["virtual_clusters"][1]["filters"] = []
    assert plan(BASE, new).chains_replaced == ("b",)


def test_filter_order_is_part_of_the_chain() -> None:
    two = [{"name": "topic-policy", "config": {"deny": ["x"]}}, {"name": "topic-policy", "config": {"deny": ["y"]}}]
    old = {**copy.deepcopy(BASE), "filters": two}
    new = {**copy.deepcopy(BASE), "filters": list(reversed(two))}
    assert plan(old, new).chains_replaced == ("a", "b")


def test_clusters_added_and_removed_by_name() -> None:
    new = copy.deepcopy(BASE)
    new["virtual_clusters"] = [cluster("b", 19100), cluster("c", 19200)]
    p = plan(BASE, new)
    assert (p.added, p.removed, p.chains_replaced) == (("c",), ("a",), ())
    assert p.summary() == "clusters added: c; clusters removed: a"
    assert p.clusters["c"].listen.port == 19200


def test_renaming_a_cluster_is_remove_plus_add_even_on_the_same_port() -> None:
    new = copy.deepcopy(BASE)
    new["virtual_clusters"][0]["name"] = "a2"
    p = plan(BASE, new)
    assert (p.added, p.removed) == (("a2",), ("a",))


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda c: c["virtual_clusters"][1].update(listen="127.0.0.1:19300"), "virtual_clusters[1].listen"),
        (lambda c: c["virtual_clusters"][0].update(upstream=["127.0.0.1:9093"]), "virtual_clusters[0].upstream"),
        (lambda c: c["virtual_clusters"][0].update(max_connections=5), "virtual_clusters[0].max_connections"),
        (lambda c: c["virtual_clusters"][0]["node_ports"].update(count=8), "virtual_clusters[0].node_ports"),
        (lambda c: c.update(proxy={"drain_timeout_s": 3}), "proxy.drain_timeout_s"),
        (lambda c: c.update(admin={"listen": "127.0.0.1:19999"}), "admin.listen"),
        (lambda c: c.update(log_level="debug"), "log_level"),
        (lambda c: c.update(topic_names={"max_entries": 10}), "topic_names.max_entries"),
    ],
)
def test_restart_only_changes_refuse_the_whole_reload_naming_the_key(change: Any, path: str) -> None:
    new = copy.deepcopy(BASE)
    new["filters"] = []  # a change that alone would be fine: refused along with the rest
    change(new)
    with pytest.raises(ConfigError) as err:
        plan(BASE, new)
    assert err.value.path == path
    assert str(err.value).startswith(f"new.yaml: {path}: changes only at restart")
    assert "nothing was changed" in str(err.value)


def test_every_restart_only_key_is_named_at_once() -> None:
    new = copy.deepcopy(BASE)
    new["virtual_clusters"][0]["listen"] = "127.0.0.1:19400"
    new["proxy"] = {"max_frame_bytes": 1024}
    with pytest.raises(ConfigError) as err:
        plan(BASE, new)
    assert err.value.path == "proxy.max_frame_bytes, virtual_clusters[0].listen"


def test_a_secret_that_changes_is_named_but_never_shown() -> None:
    auth = {"mechanism": "PLAIN", "username": "u", "password": "old-secret"}
    old = copy.deepcopy(BASE)
    old["virtual_clusters"][0]["upstream_auth"] = auth
    new = copy.deepcopy(old)
    new["virtual_clusters"][0]["upstream_auth"] = {**auth, "password": "new-secret"}
    with pytest.raises(ConfigError) as err:
        plan(old, new)
    assert err.value.path == "virtual_clusters[0].upstream_auth"
    assert "secret" not in str(err.value)


def test_renaming_metrics_listen_to_admin_listen_names_only_the_real_key() -> None:
    old = {**copy.deepcopy(BASE), "metrics": {"listen": "127.0.0.1:19990"}}
    new = {**copy.deepcopy(BASE), "admin": {"listen": "127.0.0.1:19990"}}
    with pytest.raises(ConfigError) as err:
        plan(old, new)
    assert err.value.path == "metrics.listen"
