"""Tests for config.loader / config.model: round trip, defaults, and every validation error."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
import yaml

from kgate.config import (
    AdminConfig,
    ConfigError,
    FilterConfig,
    HostPort,
    KgateConfig,
    MetricsConfig,
    NodePorts,
    ProxySettings,
    VirtualClusterConfig,
    load_config,
    parse_config,
    quick_config,
)

FULL_YAML = """\
log_level: debug
proxy:
  max_frame_bytes: 2000000
  drain_timeout_s: 2.5
  connect_timeout_s: 3
  high_water_bytes: 65536
  low_water_bytes: 1024
metrics: {listen: 127.0.0.1:9190}
virtual_clusters:
  - name: default
    listen: 127.0.0.1:9192
    advertised_host: proxy.example.com
    upstream: [127.0.0.1:9092, "[::1]:9093"]
    node_ports: {base: 9193, count: 16, first_node_id: 1}
    bootstrap_serves_node: false
  - name: second
    listen: 0.0.0.0:10000
    advertised_host: kafka.internal
    upstream: broker:9092
filters:
  - name: topic-policy
    config: {deny: [a, b]}
  - name: topic-policy
"""


def write(tmp_path: Path, text: str, name: str = "kgate.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def cluster(**overrides) -> dict:
    c = {"name": "c", "listen": "127.0.0.1:9192", "upstream": ["127.0.0.1:9092"]}
    c.update(overrides)
    return c


def parse(**top) -> KgateConfig:
    top.setdefault("virtual_clusters", [cluster()])
    return parse_config(top, "test.yaml")


def parse_error(**top) -> str:
    with pytest.raises(ConfigError) as info:
        parse(**top)
    return str(info.value)


# --------------------------------------------------------------------------- round trip


def test_full_file_round_trip(tmp_path):
    cfg = load_config(write(tmp_path, FULL_YAML))
    assert cfg == KgateConfig(
        virtual_clusters=(
            VirtualClusterConfig(
                name="default",
                listen=HostPort("127.0.0.1", 9192),
                advertised_host="proxy.example.com",
                upstream=(HostPort("127.0.0.1", 9092), HostPort("::1", 9093)),
                node_ports=NodePorts(base=9193, count=16, first_node_id=1),
                bootstrap_serves_node=False,
            ),
            VirtualClusterConfig(
                name="second",
                listen=HostPort("0.0.0.0", 10000),
                advertised_host="kafka.internal",
                upstream=(HostPort("broker", 9092),),
                node_ports=NodePorts(base=10001, count=256, first_node_id=0),
                bootstrap_serves_node=True,
            ),
        ),
        proxy=ProxySettings(
            max_frame_bytes=2_000_000,
            drain_timeout_s=2.5,
            connect_timeout_s=3.0,
            high_water_bytes=65536,
            low_water_bytes=1024,
        ),
        metrics=MetricsConfig(listen=HostPort("127.0.0.1", 9190)),
        admin=AdminConfig(listen=HostPort("127.0.0.1", 9190), from_metrics_listen=True),
        log_level="DEBUG",
        filters=(
            FilterConfig(
                name="topic-policy",
                config={"deny": ("a", "b"), "allow": None, "unresolved_error": "UNKNOWN_TOPIC_ID"},
            ),
            FilterConfig(
                name="topic-policy", config={"deny": (), "allow": None, "unresolved_error": "UNKNOWN_TOPIC_ID"}
            ),
        ),
    )
    assert isinstance(cfg.proxy.connect_timeout_s, float)
    assert isinstance(cfg.virtual_clusters[0].upstream, tuple)


def test_model_is_frozen_and_filter_config_read_only(tmp_path):
    cfg = load_config(write(tmp_path, FULL_YAML))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.log_level = "INFO"  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.filters[0].config["level"] = 4  # type: ignore[index]
    hash(cfg.virtual_clusters[0])  # usable as dict keys


def test_minimal_cluster_gets_defaults():
    cfg = parse()
    (vc,) = cfg.virtual_clusters
    assert vc.advertised_host == "127.0.0.1"
    assert vc.node_ports == NodePorts(base=9193, count=256, first_node_id=0)
    assert vc.bootstrap_serves_node is True
    assert cfg.proxy == ProxySettings()
    assert cfg.metrics == MetricsConfig(listen=None)
    assert cfg.log_level == "INFO"
    assert [f.name for f in cfg.filters] == ["guardrails"]  # no filters named: the default chain


def test_embedded_default_config():
    cfg = load_config(None)
    (vc,) = cfg.virtual_clusters
    assert vc.name == "default"
    assert vc.listen == HostPort("127.0.0.1", 9192)
    assert vc.advertised_host == "127.0.0.1"
    assert vc.upstream == (HostPort("127.0.0.1", 9092),)
    assert vc.node_ports == NodePorts(base=9193, count=256, first_node_id=0)
    assert cfg.proxy == ProxySettings()
    assert cfg.metrics.listen is None


def test_quick_config():
    cfg = quick_config("127.0.0.1:19092", "10.0.0.1:9092,[::1]:9093")
    (vc,) = cfg.virtual_clusters
    assert vc.name == "default"
    assert vc.listen == HostPort("127.0.0.1", 19092)
    assert vc.advertised_host == "127.0.0.1"
    assert vc.upstream == (HostPort("10.0.0.1", 9092), HostPort("::1", 9093))
    assert vc.node_ports.base == 19093
    assert vc.node_ports.count == 256
    assert cfg.proxy == ProxySettings()


def test_quick_config_near_top_of_port_space_shrinks_node_range():
    (vc,) = quick_config("127.0.0.1:65500", "h:1").virtual_clusters
    assert vc.node_ports.base == 65501
    assert vc.node_ports.last_port == 65535


@pytest.mark.parametrize(
    ("listen", "upstream", "expected"),
    [
        ("9192", "h:1", '--listen: expected "host:port", got "9192"'),
        ("127.0.0.1:0", "h:1", "--listen: port 0 out of range"),
        ("127.0.0.1:9192", "h", '--upstream: expected "host:port", got "h"'),
        ("127.0.0.1:9192", "", "--upstream"),
        ("0.0.0.0:9192", "h:1", "--listen: cannot listen on the wildcard"),
        ("127.0.0.1:65535", "h:1", "--listen: port 65535 leaves no room"),
    ],
)
def test_quick_config_errors(listen, upstream, expected):
    with pytest.raises(ConfigError) as info:
        quick_config(listen, upstream)
    assert str(info.value).startswith("command line: ")
    assert expected in str(info.value)


# --------------------------------------------------------------------------- model helpers


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [("localhost:9092", "localhost", 9092), ("[::1]:1", "::1", 1), (" 10.1.2.3:65535 ", "10.1.2.3", 65535)],
)
def test_host_port_parse(text, host, port):
    hp = HostPort.parse(text)
    assert hp == HostPort(host, port)
    assert HostPort.parse(str(hp)) == hp


def test_host_port_str():
    assert str(HostPort("kafka", 9092)) == "kafka:9092"
    assert str(HostPort("::1", 9092)) == "[::1]:9092"


@pytest.mark.parametrize("text", ["9092", "h:", ":9092", "::1:9092", "[::1]9092", "h:0", "h:65536", "h:x", "h:-1"])
def test_host_port_parse_rejects(text):
    with pytest.raises(ValueError, match=r"host|port|IPv6"):
        HostPort.parse(text)


def test_node_ports_port_for():
    np = NodePorts(base=9193, count=3, first_node_id=100)
    assert np.port_for(100) == 9193
    assert np.port_for(102) == 9195
    assert np.port_for(103) is None
    assert np.port_for(99) is None
    assert NodePorts(base=5000).port_for(255) == 5255
    assert NodePorts(base=5000).port_for(256) is None


# --------------------------------------------------------------------------- validation errors


def test_error_message_format_names_source_path_and_problem(tmp_path):
    p = write(
        tmp_path,
        """\
        virtual_clusters:
          - name: default
            listen: "9192"
            upstream: [127.0.0.1:9092]
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(p)
    err = info.value
    assert str(err) == f'{p}: virtual_clusters[0].listen: expected "host:port", got "9192"'
    assert (err.source, err.path) == (str(p), "virtual_clusters[0].listen")


@pytest.mark.parametrize(
    ("top", "path", "problem"),
    [
        ({"lisen": 1}, "lisen", 'unknown key "lisen"'),
        ({"log_levle": "info"}, "log_levle", 'did you mean "log_level"?'),
        ({"virtual_clusters": [cluster(upstreams=["h:1"])]}, "virtual_clusters[0].upstreams", "did you mean"),
        ({"proxy": {"max_frame": 1}}, "proxy.max_frame", 'did you mean "max_frame_bytes"?'),
        (
            {"virtual_clusters": [cluster(node_ports={"bse": 1})]},
            "virtual_clusters[0].node_ports.bse",
            'did you mean "base"?',
        ),
        ({"metrics": {"port": 1}}, "metrics.port", 'unknown key "port"'),
        ({"filters": [{"name": "x", "conf": {}}]}, "filters[0].conf", 'did you mean "config"?'),
        ({"zzz": 1}, "zzz", "allowed: log_level, proxy, metrics, virtual_clusters, filters"),
    ],
)
def test_unknown_keys(top, path, problem):
    msg = parse_error(**top)
    assert msg.startswith(f"test.yaml: {path}: ")
    assert problem in msg


@pytest.mark.parametrize(
    ("top", "path", "problem"),
    [
        ({"virtual_clusters": {"name": "x"}}, "virtual_clusters", "expected a list, got a mapping"),
        ({"virtual_clusters": ["x"]}, "virtual_clusters[0]", 'expected a mapping, got "x"'),
        ({"virtual_clusters": [cluster(name=5)]}, "virtual_clusters[0].name", "expected a string, got 5"),
        ({"virtual_clusters": [cluster(name=" ")]}, "virtual_clusters[0].name", "must not be empty"),
        ({"virtual_clusters": [cluster(listen=9192)]}, "virtual_clusters[0].listen", "got 9192"),
        (
            {"virtual_clusters": [cluster(upstream=[9092])]},
            "virtual_clusters[0].upstream[0]",
            'expected "host:port", got 9092',
        ),
        (
            {"virtual_clusters": [cluster(upstream={"a": 1})]},
            "virtual_clusters[0].upstream",
            "expected a list",
        ),
        (
            {"virtual_clusters": [cluster(bootstrap_serves_node="yes")]},
            "virtual_clusters[0].bootstrap_serves_node",
            'expected true or false, got "yes"',
        ),
        (
            {"virtual_clusters": [cluster(node_ports={"base": "9193"})]},
            "virtual_clusters[0].node_ports.base",
            'expected an integer, got "9193"',
        ),
        (
            {"virtual_clusters": [cluster(node_ports={"count": True})]},
            "virtual_clusters[0].node_ports.count",
            "expected an integer, got true",
        ),
        (
            {"virtual_clusters": [cluster(node_ports={"first_node_id": -1})]},
            "virtual_clusters[0].node_ports.first_node_id",
            "must be >= 0",
        ),
        (
            {"virtual_clusters": [cluster(node_ports=[1])]},
            "virtual_clusters[0].node_ports",
            "expected a mapping, got a list",
        ),
        ({"proxy": {"max_frame_bytes": 1.5}}, "proxy.max_frame_bytes", "expected an integer, got 1.5"),
        ({"proxy": {"drain_timeout_s": "10s"}}, "proxy.drain_timeout_s", 'expected a number, got "10s"'),
        ({"proxy": []}, "proxy", "expected a mapping, got a list"),
        ({"metrics": {"listen": 9190}}, "metrics.listen", 'expected "host:port", got 9190'),
        ({"filters": {"name": "x"}}, "filters", "expected a list"),
        ({"filters": [{"config": {}}]}, "filters[0].name", "required key is missing"),
        ({"filters": [{"name": "x", "config": [1]}]}, "filters[0].config", "expected a mapping"),
        ({"log_level": 10}, "log_level", "expected one of debug, info, warning, error, critical, got 10"),
    ],
)
def test_wrong_types(top, path, problem):
    msg = parse_error(**top)
    assert msg.startswith(f"test.yaml: {path}: ")
    assert problem in msg


@pytest.mark.parametrize("key", ["name", "listen", "upstream"])
def test_required_cluster_keys(key):
    c = cluster()
    del c[key]
    msg = parse_error(virtual_clusters=[c])
    assert msg == f"test.yaml: virtual_clusters[0].{key}: required key is missing"


def test_virtual_clusters_required_and_non_empty():
    with pytest.raises(ConfigError, match=r"^test\.yaml: virtual_clusters: required key is missing"):
        parse_config({"log_level": "info"}, "test.yaml")
    assert parse_error(virtual_clusters=[]) == ("test.yaml: virtual_clusters: at least one virtual cluster is required")


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("listen", "127.0.0.1:0", "port 0 out of range 1-65535"),
        ("listen", "127.0.0.1:70000", "port 70000 out of range 1-65535"),
        ("upstream", ["h:65536"], "port 65536 out of range 1-65535"),
    ],
)
def test_port_ranges(field, value, problem):
    msg = parse_error(virtual_clusters=[cluster(**{field: value})])
    assert f"virtual_clusters[0].{field}" in msg
    assert problem in msg


def test_node_port_base_range():
    msg = parse_error(virtual_clusters=[cluster(node_ports={"base": 0})])
    assert msg == "test.yaml: virtual_clusters[0].node_ports.base: must be in range 1-65535, got 0"
    msg = parse_error(virtual_clusters=[cluster(node_ports={"count": 0})])
    assert msg == "test.yaml: virtual_clusters[0].node_ports.count: must be >= 1, got 0"


def test_node_port_range_must_fit_below_65536():
    msg = parse_error(virtual_clusters=[cluster(node_ports={"base": 65500, "count": 100})])
    assert "virtual_clusters[0].node_ports.count: node port range 65500-65599 exceeds 65535" in msg
    # Implicit base (listen + 1) with the default count also overflows.
    msg = parse_error(virtual_clusters=[cluster(listen="127.0.0.1:65400")])
    assert "virtual_clusters[0].node_ports: node port range 65401-65656 exceeds 65535" in msg
    # ... and a small enough count fixes it.
    (vc,) = parse(virtual_clusters=[cluster(listen="127.0.0.1:65400", node_ports={"count": 135})]).virtual_clusters
    assert vc.node_ports.last_port == 65535


def test_node_ports_must_not_overlap_bootstrap_listener():
    msg = parse_error(virtual_clusters=[cluster(listen="127.0.0.1:9200", node_ports={"base": 9100})])
    assert msg == (
        "test.yaml: virtual_clusters[0].node_ports: node port range 9100-9355 overlaps the bootstrap listener port 9200"
    )
    # Ending just below the bootstrap port is fine.
    parse(virtual_clusters=[cluster(listen="127.0.0.1:9200", node_ports={"base": 9100, "count": 100})])


def test_clusters_must_not_share_ports():
    a = cluster(name="a", listen="127.0.0.1:9192")  # 9192 + 9193-9448
    # b's bootstrap port inside a's node range
    msg = parse_error(virtual_clusters=[a, cluster(name="b", listen="127.0.0.1:9300")])
    assert msg.startswith('test.yaml: virtual_clusters[1]: port 9300 of cluster "b" overlap')
    assert 'ports 9193-9448 of cluster "a" (virtual_clusters[0])' in msg
    # b's node range covering a's bootstrap port
    msg = parse_error(virtual_clusters=[a, cluster(name="b", listen="127.0.0.1:9000", node_ports={"base": 9100})])
    assert "virtual_clusters[1]: ports 9100-9355" in msg
    assert 'port 9192 of cluster "a"' in msg
    # same bootstrap port
    msg = parse_error(virtual_clusters=[a, cluster(name="b", node_ports={"base": 20000})])
    assert 'virtual_clusters[1]: port 9192 of cluster "b" overlap' in msg
    # disjoint clusters are fine
    cfg = parse(virtual_clusters=[a, cluster(name="b", listen="127.0.0.1:9449")])
    assert cfg.virtual_clusters[1].node_ports.base == 9450


def test_duplicate_cluster_names():
    msg = parse_error(
        virtual_clusters=[cluster(name="x"), cluster(name="x", listen="127.0.0.1:20000")],
    )
    assert msg == 'test.yaml: virtual_clusters[1].name: duplicate cluster name "x" (also virtual_clusters[0])'


def test_metrics_port_must_not_collide_with_cluster_ports():
    msg = parse_error(metrics={"listen": "127.0.0.1:9200"})
    assert msg.startswith('test.yaml: metrics.listen: port 9200 is also used by cluster "c"')
    assert parse(metrics={"listen": "127.0.0.1:9190"}).metrics.listen == HostPort("127.0.0.1", 9190)
    assert parse(metrics=None).metrics.listen is None


@pytest.mark.parametrize(
    ("proxy", "path", "problem"),
    [
        ({"low_water_bytes": 100, "high_water_bytes": 100}, "proxy.low_water_bytes", "must be less than"),
        ({"high_water_bytes": 1000}, "proxy.high_water_bytes", "low_water_bytes (16384) must be less than"),
        ({"low_water_bytes": 8 * 1024 * 1024}, "proxy.low_water_bytes", "(8388608) must be less than"),
        ({"max_frame_bytes": 0}, "proxy.max_frame_bytes", "must be >= 1, got 0"),
        ({"high_water_bytes": -5}, "proxy.high_water_bytes", "must be >= 1"),
        ({"drain_timeout_s": 0}, "proxy.drain_timeout_s", "must be a positive finite number, got 0"),
        ({"connect_timeout_s": -1.5}, "proxy.connect_timeout_s", "must be a positive finite number"),
        ({"connect_timeout_s": float("inf")}, "proxy.connect_timeout_s", "must be a positive finite number"),
        ({"connect_timeout_s": True}, "proxy.connect_timeout_s", "expected a number, got true"),
    ],
)
def test_proxy_settings_validation(proxy, path, problem):
    msg = parse_error(proxy=proxy)
    assert msg.startswith(f"test.yaml: {path}: ")
    assert problem in msg


@pytest.mark.parametrize("level", ["debug", "INFO", "Warning", "error", "critical"])
def test_log_levels_accepted_case_insensitively(level):
    assert parse(log_level=level).log_level == level.upper()


@pytest.mark.parametrize("level", ["verbose", "trace", "", "warn"])
def test_log_level_rejected(level):
    msg = parse_error(log_level=level)
    assert msg.startswith("test.yaml: log_level: expected one of debug, info, warning, error, critical")


def test_empty_upstream_list():
    msg = parse_error(virtual_clusters=[cluster(upstream=[])])
    assert msg == "test.yaml: virtual_clusters[0].upstream: at least one upstream bootstrap server is required"


def test_wildcard_listen_requires_advertised_host():
    for host, shown in (("0.0.0.0", '"0.0.0.0"'), ("[::]", '"::"')):
        msg = parse_error(virtual_clusters=[cluster(listen=f"{host}:9192")])
        assert msg.startswith(
            f"test.yaml: virtual_clusters[0].advertised_host: required when listen host is the wildcard {shown}"
        )
    (vc,) = parse(virtual_clusters=[cluster(listen="0.0.0.0:9192", advertised_host="kgate.local")]).virtual_clusters
    assert vc.advertised_host == "kgate.local"
    assert vc.listen == HostPort("0.0.0.0", 9192)
    msg = parse_error(virtual_clusters=[cluster(advertised_host="0.0.0.0")])
    assert 'virtual_clusters[0].advertised_host: "0.0.0.0" is a wildcard address' in msg


def test_top_level_must_be_mapping():
    with pytest.raises(ConfigError, match="expected a mapping, got a list"):
        parse_config([1, 2], "x.yaml")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- file-level errors


def test_file_not_found(tmp_path):
    p = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(info.value) == f"{p}: file not found"


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file(tmp_path, text):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(info.value).startswith(f"{p}: file is empty")


def test_yaml_syntax_error_reports_line(tmp_path):
    p = write(
        tmp_path,
        """\
        log_level: info
        virtual_clusters:
          - name: a
            listen: [127.0.0.1:9192
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: line 5, column 1: YAML syntax error")


def test_yaml_tab_indentation_error_reports_line(tmp_path):
    p = tmp_path / "tabs.yaml"
    p.write_text("log_level: info\nvirtual_clusters:\n\t- name: a\n")
    with pytest.raises(ConfigError, match=r"line 3, column 1: YAML syntax error"):
        load_config(p)


def test_yaml_duplicate_key_is_an_error(tmp_path):
    p = write(
        tmp_path,
        """\
        log_level: info
        virtual_clusters:
          - name: a
            listen: 127.0.0.1:9192
            listen: 127.0.0.1:9300
            upstream: h:1
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(info.value).startswith(f"{p}: line 5, column 5: YAML syntax error")
    assert 'duplicate key "listen"' in str(info.value)


def test_yaml_top_level_scalar(tmp_path):
    p = write(tmp_path, "just a string\n")
    with pytest.raises(ConfigError, match='expected a YAML mapping at the top level, got "just a string"'):
        load_config(p)


def test_upstream_single_string_in_file(tmp_path):
    p = write(
        tmp_path,
        """\
        virtual_clusters:
          - name: a
            listen: "[::1]:9192"
            upstream: kafka:9092
        """,
    )
    (vc,) = load_config(str(p)).virtual_clusters
    assert vc.upstream == (HostPort("kafka", 9092),)
    assert vc.advertised_host == "::1"
    assert vc.node_ports.base == 9193


def test_docs_example_is_valid():
    """The full example in docs/configuration.md must load."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = doc.read_text()
    start = text.index("<!-- full-example -->")
    block = text[start:].split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = parse_config(yaml.safe_load(block), "docs/configuration.md")
    assert len(cfg.virtual_clusters) >= 2


def _with_filters(filters: str) -> str:
    return "virtual_clusters:\n  - {name: a, listen: 127.0.0.1:19192, upstream: 127.0.0.1:9092}\n" + filters


def test_unknown_filter_name_is_refused_at_load() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(yaml.safe_load(_with_filters("filters: [{name: no-such-filter}]")), "k.yaml")
    assert "filters[0].name" in str(err.value)
    assert "no filter named 'no-such-filter'" in str(err.value)


def test_filter_validates_its_own_config_at_load() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(yaml.safe_load(_with_filters("filters: [{name: topic-policy, config: {deny: 5}}]")), "k.yaml")
    assert "filters[0].config" in str(err.value)
    assert "deny: expected a list of topic name patterns" in str(err.value)


def _with_auth(auth: str) -> dict:
    return yaml.safe_load(
        "virtual_clusters:\n  - {name: a, listen: 127.0.0.1:19192, upstream: 127.0.0.1:9092, upstream_auth: "
        + auth
        + "}\n"
    )


def test_upstream_auth_with_password_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGATE_TEST_PW", "s3cret")
    cfg = parse_config(_with_auth("{mechanism: scram-sha-512, username: kgate, password_env: KGATE_TEST_PW}"), "k")
    auth = cfg.virtual_clusters[0].upstream_auth
    assert auth is not None
    assert (auth.mechanism, auth.username, auth.password) == ("SCRAM-SHA-512", "kgate", "s3cret")
    assert "s3cret" not in repr(auth)  # never logged by accident


@pytest.mark.parametrize(
    ("auth", "problem"),
    [
        ("{mechanism: GSSAPI, username: u, password: p}", "upstream_auth.mechanism: expected one of PLAIN"),
        ("{mechanism: PLAIN, username: u}", "give exactly one of password and password_env"),
        ("{mechanism: PLAIN, username: u, password: p, password_env: X}", "give exactly one of password"),
        ("{mechanism: PLAIN, username: u, password_env: KGATE_SURELY_UNSET_VAR}", "is not set"),
        ("{mechanism: PLAIN, password: p}", "upstream_auth.username: required key is missing"),
    ],
)
def test_upstream_auth_errors(auth: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_with_auth(auth), "k.yaml")
    assert problem in str(err.value)
    assert "virtual_clusters[0].upstream_auth" in str(err.value)
