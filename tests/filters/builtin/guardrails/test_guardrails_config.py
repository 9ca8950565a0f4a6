"""``guardrails`` configuration: every mistake is reported at its key path, and the default chain.

A config that names no filters (file, embedded default, quick mode) runs ``guardrails`` with its
defaults; ``filters: []`` runs none, at the top level or for one virtual cluster.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgate.api import FilterConfigError
from kgate.config.loader import load_config, parse_config, quick_config
from kgate.filters.builtin.guardrails.filter import Guardrails
from kgate.filters.builtin.guardrails.rules import DEFAULTS

REPO = Path(__file__).resolve().parents[4]
CLUSTER = {"name": "a", "listen": "127.0.0.1:19300", "advertised_host": "127.0.0.1", "upstream": ["127.0.0.1:9092"]}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"partition": {}}, "unknown keys ['partition']"),
        ({"partitions": []}, "partitions: expected a mapping"),
        ({"partitions": {"max": 5}}, "partitions: unknown keys ['max']"),
        ({"partitions": {"max_per_topic": 0}}, "partitions.max_per_topic: expected an integer from 1"),
        ({"partitions": {"max_per_topic": True}}, "partitions.max_per_topic: expected an integer"),
        (
            {"partitions": {"min_per_topic": 20, "max_per_topic": 10}},
            "partitions: min_per_topic (20) is above max_per_topic",
        ),
        ({"partitions": {"max_per_request": "many"}}, "partitions.max_per_request: expected an integer"),
        ({"replication_factor": {"max": 40000}}, "replication_factor.max: expected an integer from 1 to 32767"),
        ({"replication_factor": {"min": 5, "max": 3}}, "replication_factor: min (5) is above max (3)"),
        ({"topic_name": {"pattern": "(unclosed"}}, "topic_name.pattern: not a valid regular expression"),
        ({"topic_name": {"max_length": 0}}, "topic_name.max_length: expected an integer"),
        ({"topic_configs": {"deny": [""]}}, "topic_configs.deny: expected a list of config names"),
        ({"topic_configs": {"allow": 3}}, "topic_configs.allow: expected a list of config names"),
        (
            {"topic_configs": {"ranges": {"retention.ms": {"min": 10, "max": 1}}}},
            "topic_configs.ranges.retention.ms: min (10) is above max (1)",
        ),
        (
            {"topic_configs": {"ranges": {"retention.ms": {"least": 1}}}},
            "topic_configs.ranges.retention.ms: unknown keys",
        ),
        (
            {"topic_configs": {"ranges": {"retention.ms": {}}}},
            "topic_configs.ranges.retention.ms: give min, max or both",
        ),
        (
            {"topic_configs": {"ranges": {"retention.ms": {"max": "1d"}}}},
            "topic_configs.ranges.retention.ms.max: expected",
        ),
        ({"produce": {"acks": []}}, "produce.acks: expected a non-empty list"),
        ({"produce": {"acks": [-1, 2]}}, "produce.acks[1]: expected -1 (or all), 0 or 1, got 2"),
        ({"produce": {"max_batch_bytes": -1}}, "produce.max_batch_bytes: expected an integer from 1"),
    ],
)
def test_each_mistake_names_its_key_path(config: dict[str, Any], message: str) -> None:
    with pytest.raises(FilterConfigError) as err:
        Guardrails.validate_config(config)
    assert str(err.value).startswith(message), str(err.value)


def test_the_defaults_are_filled_in_and_ranges_merge_over_them() -> None:
    full = Guardrails.validate_config({})
    assert full["partitions"] == DEFAULTS["partitions"]
    assert full["topic_configs"]["ranges"] == {"segment.bytes": {"min": 1_048_576, "max": None}}
    assert full["produce"] == {"acks": None, "max_batch_bytes": None}
    merged = Guardrails.validate_config({"topic_configs": {"ranges": {"retention.ms": {"min": 60000}}}})
    assert set(merged["topic_configs"]["ranges"]) == {"segment.bytes", "retention.ms"}
    removed = Guardrails.validate_config({"topic_configs": {"ranges": {"segment.bytes": None}}})
    assert removed["topic_configs"]["ranges"] == {}
    assert Guardrails.validate_config({"produce": {"acks": ["all", 1, -1]}})["produce"]["acks"] == [-1, 1]


def names(filters: Any) -> list[str]:
    return [f.name for f in filters]


def test_a_config_that_names_no_filters_gets_the_default_chain() -> None:
    assert names(load_config(None).filters) == ["guardrails"]  # config/default.yaml (./dev/run)
    assert names(parse_config({"virtual_clusters": [CLUSTER]}, "t").filters) == ["guardrails"]
    assert names(parse_config({"virtual_clusters": [CLUSTER], "filters": None}, "t").filters) == ["guardrails"]
    assert names(quick_config("127.0.0.1:19300", "127.0.0.1:9092").filters) == ["guardrails"]
    assert load_config(None).filters[0].config["partitions"]["max_per_topic"] == 10_000


def test_filters_empty_turns_it_off_and_a_named_list_is_taken_as_it_is() -> None:
    off = parse_config({"virtual_clusters": [CLUSTER], "filters": []}, "t")
    assert names(off.chain_for(off.virtual_clusters[0])) == []
    named = parse_config({"virtual_clusters": [CLUSTER], "filters": [{"name": "topic-policy"}]}, "t")
    assert names(named.filters) == ["topic-policy"]


def test_quick_mode_filters_add_to_the_default_chain() -> None:
    """``--filter`` adds (as documented): naming one never drops the guardrails silently; naming
    guardrails itself gives them that config, in that place."""
    quick = quick_config("127.0.0.1:19300", "127.0.0.1:9092", [{"name": "internal-topics"}])
    assert names(quick.filters) == ["guardrails", "internal-topics"]
    mine = [{"name": "topic-policy"}, {"name": "guardrails", "config": {"partitions": {"max_per_topic": 8}}}]
    quick = quick_config("127.0.0.1:19300", "127.0.0.1:9092", mine)
    assert names(quick.filters) == ["topic-policy", "guardrails"]
    assert quick.filters[1].config["partitions"]["max_per_topic"] == 8


def test_per_virtual_cluster_a_chain_of_its_own_replaces_the_default() -> None:
    other = dict(CLUSTER, name="b", listen="127.0.0.1:19600")
    tight = dict(CLUSTER, filters=[{"name": "guardrails", "config": {"partitions": {"max_per_topic": 64}}}])
    cfg = parse_config(
        {"virtual_clusters": [tight, dict(other, filters=[]), dict(other, name="c", listen="127.0.0.1:19900")]}, "t"
    )
    a, b, c = (cfg.chain_for(vc) for vc in cfg.virtual_clusters)
    assert a[0].config["partitions"]["max_per_topic"] == 64
    assert names(b) == []
    assert names(c) == ["guardrails"]
    assert c[0].config["partitions"]["max_per_topic"] == 10_000


def test_check_config_reports_the_file_and_the_key_path(tmp_path: Path) -> None:
    path = tmp_path / "kgate.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "virtual_clusters": [CLUSTER],
                "filters": [{"name": "guardrails", "config": {"replication_factor": {"min": 0}}}],
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "kgate", "check-config", str(path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert f"{path}: filters[0].config: replication_factor.min: expected an integer from 1 to 32767" in proc.stderr
    per_cluster = tmp_path / "cluster.yaml"
    per_cluster.write_text(
        yaml.safe_dump(
            {
                "virtual_clusters": [
                    dict(CLUSTER, filters=[{"name": "guardrails", "config": {"produce": {"acks": ["none"]}}}])
                ]
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "kgate", "check-config", str(per_cluster)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "virtual_clusters[0].filters[0].config: produce.acks[0]: expected -1 (or all), 0 or 1" in proc.stderr
