"""``admin:`` and ``log_format:``, and ``metrics.listen`` as admin's deprecated alias."""

from __future__ import annotations

import pytest

from kgate.config import AdminConfig, ConfigError, HostPort, KgateConfig, TopicMetricsConfig, load_config, parse_config

CLUSTER = {"name": "c", "listen": "127.0.0.1:9200", "upstream": "127.0.0.1:9092", "node_ports": {"base": 9201}}


def parse(**top) -> KgateConfig:
    top.setdefault("virtual_clusters", [CLUSTER])
    return parse_config(top, "test.yaml")


def parse_error(**top) -> str:
    with pytest.raises(ConfigError) as info:
        parse(**top)
    return str(info.value)


def test_admin_listen_and_probe_settings():
    cfg = parse(admin={"listen": "0.0.0.0:9190", "probe_interval_s": 1, "probe_timeout_s": 0.5})
    assert cfg.admin == AdminConfig(listen=HostPort("0.0.0.0", 9190), probe_interval_s=1.0, probe_timeout_s=0.5)


def test_no_admin_listener_unless_configured():
    assert parse().admin.listen is None


def test_embedded_default_serves_admin_on_localhost():
    assert load_config(None).admin.listen == HostPort("127.0.0.1", 9190)


def test_metrics_listen_is_a_deprecated_alias():
    cfg = parse(metrics={"listen": "127.0.0.1:9190"})
    assert cfg.admin.listen == HostPort("127.0.0.1", 9190)
    assert cfg.admin.from_metrics_listen


def test_both_admin_and_metrics_listen_is_refused():
    msg = parse_error(metrics={"listen": "127.0.0.1:9190"}, admin={"listen": "127.0.0.1:9191"})
    assert msg == (
        "test.yaml: metrics.listen: is a deprecated alias of admin.listen and both are set; keep only admin.listen"
    )


@pytest.mark.parametrize(
    ("top", "path", "problem"),
    [
        ({"admin": {"listen": "9190"}}, "admin.listen", 'expected "host:port"'),
        ({"admin": {"port": 1}}, "admin.port", 'unknown key "port"'),
        ({"admin": {"probe_interval_s": 0}}, "admin.probe_interval_s", "must be a positive finite number"),
        ({"admin": {"listen": "127.0.0.1:9201"}}, "admin.listen", 'port 9201 is also used by cluster "c"'),
        ({"log_format": "xml"}, "log_format", "expected one of text, json"),
        ({"admin": {"topic_metrics": {"max_topics": 0}}}, "admin.topic_metrics.max_topics", "must be >= 1, got 0"),
        ({"admin": {"topic_metrics": {"max_topics": "9"}}}, "admin.topic_metrics.max_topics", "expected an integer"),
        ({"admin": {"topic_metrics": {"enabled": "yes"}}}, "admin.topic_metrics.enabled", "expected true or false"),
        ({"admin": {"topic_metrics": {"cap": 5}}}, "admin.topic_metrics.cap", 'unknown key "cap"'),
        ({"admin": {"topic_metrics": [1]}}, "admin.topic_metrics", "expected a mapping"),
    ],
)
def test_admin_and_log_format_errors_name_the_key(top, path, problem):
    msg = parse_error(**top)
    assert msg.startswith(f"test.yaml: {path}: ")
    assert problem in msg


def test_log_format():
    assert parse().log_format == "text"
    assert parse(log_format="JSON").log_format == "json"


def test_topic_metrics_on_with_a_cap_of_200_by_default():
    assert parse().admin.topic_metrics == TopicMetricsConfig(enabled=True, max_topics=200)
    assert load_config(None).admin.topic_metrics == TopicMetricsConfig(enabled=True, max_topics=200)


def test_topic_metrics_settings():
    cfg = parse(admin={"listen": "127.0.0.1:9190", "topic_metrics": {"enabled": False, "max_topics": 50}})
    assert cfg.admin.topic_metrics == TopicMetricsConfig(enabled=False, max_topics=50)
    assert parse(admin={"topic_metrics": {"max_topics": 7}}).admin.topic_metrics == TopicMetricsConfig(max_topics=7)
