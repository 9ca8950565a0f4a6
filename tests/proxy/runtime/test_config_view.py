"""GET /config's document: the running config as JSON with every secret-named value redacted."""

from __future__ import annotations

import json

from kgate.config import parse_config
from kgate.proxy.runtime.config_view import REDACTED, config_document, config_json, is_secret_key, redact


def test_secret_keys_are_recognised_whatever_their_spelling() -> None:
    for key in (
        "password",
        "sasl.password",
        "ssl.key.password",
        "sasl_jaas_config",
        "client-secret",
        "token",
        "api_token",
        "SASL.JAAS.CONFIG",
        "private_key",
    ):
        assert is_secret_key(key), key
    for key in ("key_file", "cert_file", "username", "mechanism", "listen", "deny"):
        assert not is_secret_key(key), key


def test_redaction_reaches_filter_configs_and_keeps_the_rest() -> None:
    cfg = parse_config(
        {
            "virtual_clusters": [
                {
                    "name": "a",
                    "listen": "127.0.0.1:19092",
                    "upstream": ["127.0.0.1:9092"],
                    "node_ports": {"base": 19100, "count": 8},
                    "upstream_auth": {"mechanism": "PLAIN", "username": "kgate", "password": "hunter2"},
                    "filters": [
                        {
                            "name": "audit-log",
                            "config": {
                                "directory": "/tmp/audit",
                                "kafka": {"bootstrap": "127.0.0.1:9092", "topic": "audit"},
                            },
                        }
                    ],
                },
                {
                    "name": "b",
                    "listen": "127.0.0.1:29092",
                    "upstream": ["127.0.0.1:9093"],
                    "node_ports": {"base": 29100, "count": 8},
                },
            ],
            "filters": [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}],
        },
        "test",
    )
    doc = config_document(cfg)
    text = json.dumps(doc)
    assert "hunter2" not in text
    assert text.count(REDACTED) == 1
    assert doc["chains"] == {"a": ["audit-log"], "b": ["topic-policy"]}
    assert doc["version"]
    cluster = doc["config"]["virtual_clusters"][0]
    assert cluster["listen"] == "127.0.0.1:19092"
    assert cluster["upstream_auth"]["username"] == "kgate"
    # "secret-*" is a topic pattern, not a secret: values are never judged, only keys
    assert doc["config"]["filters"][0]["config"]["deny"] == ["secret-*"]
    assert json.loads(config_json(cfg)) == doc


def test_a_plugins_nested_secret_is_redacted() -> None:
    """Filter configs are opaque to the loader: a plugin's secret is found by its key, at any depth."""
    plugin = {"endpoint": "https://vault", "auth": [{"user": "u", "client_secret": "s3"}], "sasl.jaas.config": "x"}
    assert redact(plugin) == {
        "endpoint": "https://vault",
        "auth": [{"user": "u", "client_secret": REDACTED}],
        "sasl.jaas.config": REDACTED,
    }


def test_a_missing_secret_stays_visibly_missing() -> None:
    assert redact({"password": None, "token": ""}) == {"password": None, "token": REDACTED}
