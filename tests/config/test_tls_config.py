"""``tls``, ``upstream_tls`` and ``proxy_protocol``: the files are loaded at load time, so a bad one
is a config error naming its key (exit 2 before anything binds), and every shape error names its path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.certs import TestCA

from kgate.config import ConfigError, ProxyProtocolConfig, ServerTlsConfig, UpstreamTlsConfig, parse_config


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = TestCA(d)
    return {"ca": ca, "server": ca.issue("server", "kgate", server=True), "other": ca.issue("other", "x"), "dir": d}


def cfg(**cluster: Any) -> dict[str, Any]:
    return {"virtual_clusters": [{"name": "c", "listen": "127.0.0.1:9192", "upstream": "127.0.0.1:9092", **cluster}]}


def error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "k.yaml")
    return str(info.value)


def server_tls(pki, **kw: Any) -> dict[str, Any]:
    return {"cert_file": str(pki["server"].cert), "key_file": str(pki["server"].key), **kw}


def test_valid_tls_both_ways(pki):
    c = parse_config(
        cfg(
            tls=server_tls(pki, client_ca_file=str(pki["ca"].cert_path), client_auth="required", min_version="TLSv1.3"),
            upstream_tls={"ca_file": str(pki["ca"].cert_path), "server_hostname": "kafka.internal"},
            proxy_protocol={"mode": "v2", "trusted_sources": ["10.0.0.0/8", "192.168.1.7"]},
        ),
        "k.yaml",
    ).virtual_clusters[0]
    assert isinstance(c.tls, ServerTlsConfig)
    assert c.tls.client_auth == "required"
    assert c.tls.min_version == "TLSv1.3"
    assert c.upstream_tls == UpstreamTlsConfig(ca_file=str(pki["ca"].cert_path), server_hostname="kafka.internal")
    assert c.proxy_protocol == ProxyProtocolConfig("v2", ("10.0.0.0/8", "192.168.1.7/32"))


def test_shorthands_and_defaults(pki):
    c = parse_config(cfg(upstream_tls=True, proxy_protocol="any"), "k.yaml").virtual_clusters[0]
    assert c.upstream_tls == UpstreamTlsConfig()  # verify on, system CAs
    assert c.proxy_protocol == ProxyProtocolConfig("any", ("127.0.0.0/8", "::1/128"))
    off = yaml.safe_load("proxy_protocol: off")["proxy_protocol"]  # YAML 1.1 reads a bare off as false
    c = parse_config(cfg(proxy_protocol=off, tls=None), "k.yaml").virtual_clusters[0]
    assert c.proxy_protocol is None
    assert c.tls is None
    assert c.upstream_tls is None
    assert parse_config(cfg(proxy_protocol={"mode": "off"}), "k.yaml").virtual_clusters[0].proxy_protocol is None


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        (
            {"tls": {"cert_file": "/nonexistent.crt", "key_file": "x"}},
            "virtual_clusters[0].tls.cert_file: file not found: /nonexistent.crt",
        ),
        ({"tls": {"key_file": "x"}}, "virtual_clusters[0].tls.cert_file: required key is missing"),
        (
            {"tls": "SERVER", "_client_auth": "sometimes"},
            "virtual_clusters[0].tls.client_auth: expected one of none, requested, required",
        ),
        ({"tls": "SERVER", "_client_auth": "required"}, "virtual_clusters[0].tls.client_ca_file: required with"),
        ({"tls": "SERVER", "_client_ca_file": "CA"}, "virtual_clusters[0].tls.client_auth: client_ca_file is set"),
        ({"tls": "SERVER", "_min_version": "TLSv1.0"}, "virtual_clusters[0].tls.min_version: expected one of"),
        ({"tls": "SERVER", "_ciphers": "NOPE-NOTHING"}, "virtual_clusters[0].tls.ciphers: no cipher matches"),
        ({"tls": "SERVER", "_cert": "KEY"}, "virtual_clusters[0].tls.cert_file: not a PEM certificate"),
        ({"tls": "SERVER", "_key": "OTHERKEY"}, "virtual_clusters[0].tls.key_file: not the PEM private key"),
        ({"tls": "SERVER", "_key": "CERT"}, "virtual_clusters[0].tls.key_file: not the PEM private key"),
        (
            {"tls": "SERVER", "_client_ca_file": "KEY", "_client_auth": "required"},
            "virtual_clusters[0].tls.client_ca_file: not a PEM CA bundle",
        ),
        ({"tls": "SERVER", "_cert_fil": "x"}, 'virtual_clusters[0].tls.cert_fil: unknown key "cert_fil"'),
        ({"upstream_tls": {"ca_file": "/no/ca.pem"}}, "virtual_clusters[0].upstream_tls.ca_file: file not found"),
        ({"upstream_tls": {"verify": "yes"}}, "virtual_clusters[0].upstream_tls.verify: expected true or false"),
        ({"upstream_tls": {"cert_file": "CERT"}}, "virtual_clusters[0].upstream_tls.key_file: cert_file and key_file"),
        (
            {"upstream_tls": {"key_password_env": "KGATE_TEST_UNSET_VAR"}},
            "virtual_clusters[0].upstream_tls.key_password_env: environment variable KGATE_TEST_UNSET_VAR is not set",
        ),
        ({"proxy_protocol": "v3"}, "virtual_clusters[0].proxy_protocol: expected one of v1, v2, any, off"),
        ({"proxy_protocol": {"trusted_sources": []}}, "virtual_clusters[0].proxy_protocol.mode: required key"),
        (
            {"proxy_protocol": {"mode": "v1", "trusted_sources": ["10.0.0.0/33"]}},
            "virtual_clusters[0].proxy_protocol.trusted_sources[0]: expected a CIDR",
        ),
        (
            {"proxy_protocol": {"mode": "v1", "trusted_sources": []}},
            "virtual_clusters[0].proxy_protocol.trusted_sources: at least one CIDR",
        ),
    ],
)
def test_errors_name_the_key(pki, cluster, expected):
    subst = {
        "CERT": str(pki["server"].cert),
        "KEY": str(pki["server"].key),
        "OTHERKEY": str(pki["other"].key),
        "CA": str(pki["ca"].cert_path),
    }
    cluster = dict(cluster)
    if cluster.get("tls") == "SERVER":
        tls = server_tls(pki)
        for k in [k for k in cluster if k.startswith("_")]:
            v = cluster.pop(k)
            key = {"_cert": "cert_file", "_key": "key_file"}.get(k, k[1:])
            tls[key] = subst.get(v, v)
        cluster["tls"] = tls
    if "upstream_tls" in cluster:
        cluster["upstream_tls"] = {
            k: subst.get(v, v) if isinstance(v, str) else v for k, v in cluster["upstream_tls"].items()
        }
    assert expected in error(cfg(**cluster))


def test_bad_certificate_exits_2_naming_the_key(pki, tmp_path):
    bad = tmp_path / "bad.crt"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    conf = tmp_path / "k.yaml"
    conf.write_text(yaml.safe_dump(cfg(tls={"cert_file": str(bad), "key_file": str(pki["server"].key)})))
    res = subprocess.run(
        [sys.executable, "-m", "kgate", "check-config", str(conf)],
        capture_output=True,
        text=True,
        cwd=str(Path(__file__).resolve().parents[2]),
        timeout=60,
    )
    assert res.returncode == 2, res
    assert "virtual_clusters[0].tls.cert_file: not a PEM certificate" in res.stderr, res.stderr


def test_key_password_is_not_in_repr(pki):
    c = parse_config(cfg(tls=server_tls(pki, key_password="hunter2")), "k.yaml")
    assert "hunter2" not in repr(c)


def test_encrypted_key_with_password_from_environment(pki, tmp_path, monkeypatch):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki["server"].key.read_bytes(), password=None)
    enc = tmp_path / "enc.key"
    enc.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    monkeypatch.setenv("KGATE_TEST_KEY_PW", "s3cret")
    c = parse_config(cfg(tls=server_tls(pki, key_file=str(enc), key_password_env="KGATE_TEST_KEY_PW")), "k.yaml")
    assert c.virtual_clusters[0].tls.key_password == "s3cret"
    monkeypatch.setenv("KGATE_TEST_KEY_PW", "wrong")
    assert "virtual_clusters[0].tls.key_file: not the PEM private key" in error(
        cfg(tls=server_tls(pki, key_file=str(enc), key_password_env="KGATE_TEST_KEY_PW"))
    )
    assert "give at most one of key_password and key_password_env" in error(
        cfg(tls=server_tls(pki, key_password="a", key_password_env="KGATE_TEST_KEY_PW"))
    )
