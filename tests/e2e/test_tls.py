"""TLS both ways through kgate, with real clients (librdkafka, kafka-python, aiokafka).

Clients speak TLS (and mTLS) to kgate; kgate speaks TLS to the broker. The broker side is a
**stand-in**: the Tansu fixture runs plaintext only, so a small TLS-terminating relay
(tests/support/tls_relay.py) sits in front of it and Tansu advertises the relay's port; every
byte kgate sends over TLS reaches Tansu unchanged. The CA and every certificate are made at run
time (tests/support/certs.py). kgate runs in-process (support/inproc_kgate.py) so a test filter
registered here can report the principal it sees.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import procs
from support.certs import TestCA
from support.inproc_kgate import InprocKgate
from support.ports import HOST, free_port, free_port_range
from support.workloads import unique

from kgate.api import FORWARD, ApiKey, Filter, FilterContext, on_request
from kgate.codec import api
from kgate.config import parse_config
from kgate.filters.registry import register_filter

pytestmark = pytest.mark.timeout(180)

SEEN: list[tuple[str, str | None]] = []  # (client address, principal) per Metadata request


class PrincipalRecorder(Filter):
    """Records what kgate reports about the connection of every Metadata request."""

    name = "test-tls-principal"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        SEEN.append((ctx.connection.client_address, ctx.connection.principal))
        return FORWARD


register_filter("test-tls-principal", PrincipalRecorder)


class Pki:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = TestCA(root / "ca")
        self.kgate = self.ca.issue("kgate", "kgate.test", server=True)
        self.broker = self.ca.issue("broker", "broker.test", server=True)
        self.alice = self.ca.issue("alice", "alice", ou="payments")
        self.rogue_ca = TestCA(root / "rogue", name="rogue CA")
        self.rogue_broker = self.rogue_ca.issue("rogue-broker", "broker.test", server=True)
        self.rogue_client = self.rogue_ca.issue("mallory", "mallory")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


class TlsBroker:
    def __init__(self, tansu: procs.Tansu, relay: procs.TlsRelay) -> None:
        self.tansu = tansu
        self.relay = relay


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki) -> Iterator[TlsBroker]:
    """Tansu advertising the TLS relay's port, and the relay (broker.test's certificate) in front."""
    d = tmp_path_factory.mktemp("tls-broker")
    relay_port = free_port()
    tansu = procs.Tansu(d / "tansu.log", advertised_port=relay_port).start()
    relay = procs.TlsRelay(d / "relay.log", relay_port, tansu.bootstrap, pki.broker.cert, pki.broker.key)
    try:
        relay.start()
        yield TlsBroker(tansu, relay)
    finally:
        relay.kill()
        tansu.kill()


def tls_config(
    pki: Pki,
    upstream: str,
    *,
    client_auth: str = "required",
    upstream_tls: dict | None = None,
    tls: dict | None = None,
    **cluster: Any,
) -> Any:
    vc: dict[str, Any] = {
        "name": "default",
        "listen": f"{HOST}:{free_port()}",
        "advertised_host": HOST,
        "upstream": [upstream],
        "node_ports": {"base": free_port_range(256), "count": 256},
        "bootstrap_serves_node": False,  # clients use the bootstrap port and a node port: both TLS
        "upstream_tls": upstream_tls if upstream_tls is not None else {"ca_file": str(pki.ca.cert_path)},
        **cluster,
    }
    if tls is not False:
        vc["tls"] = tls or {
            "cert_file": str(pki.kgate.cert),
            "key_file": str(pki.kgate.key),
            "client_ca_file": str(pki.ca.cert_path),
            "client_auth": client_auth,
        }
    return parse_config(
        {
            "log_level": "debug",
            "proxy": {"drain_timeout_s": 2},
            "virtual_clusters": [vc],
            "filters": [{"name": "test-tls-principal"}],
        },
        "test",
    )


@pytest.fixture
def kgate_factory_inproc() -> Iterator[Any]:
    started: list[InprocKgate] = []

    def make(config: Any) -> InprocKgate:
        k = InprocKgate(config).start()
        started.append(k)
        return k

    yield make
    for k in started:
        k.stop()


def confluent_ssl(pki: Pki, client: Any = None) -> dict[str, Any]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca.cert_path)}
    if client is not None:
        conf.update({"ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)})
    return conf


def client_context(pki: Pki, client: Any = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def confluent_roundtrip(bootstrap: str, conf: dict[str, Any], n: int = 20, size: int = 1000) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = unique("tls")
    values = [f"{i:06d}".encode() + b"x" * size for i in range(n)]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0, errors
    assert not errors, errors
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False, **conf})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        c.close()
    assert got == values


def principals_seen() -> set[str | None]:
    return {p for _addr, p in SEEN}


# ------------------------------------------------------------------------------------------ tests
def test_librdkafka_mtls_both_ways_principal_reaches_filter(pki, tls_broker, kgate_factory_inproc):
    """librdkafka over mTLS to kgate, kgate over TLS (CA verified) to the broker; the filter sees
    the client certificate's subject as Kafka would name it."""
    SEEN.clear()
    k = kgate_factory_inproc(tls_config(pki, tls_broker.relay.bootstrap))
    # kgate's own connection speaks TLS too: discovery learned the node before any client came ...
    deadline = time.monotonic() + 10
    while not k.call(lambda: dict(k.cluster.upstream_nodes)):
        assert time.monotonic() < deadline, "node discovery over upstream TLS did not finish"
        time.sleep(0.05)
    # ... and a lookup over it (what the topic-id resolver and ctx.send_request use) is answered
    req = api.API_INFO[int(ApiKey.METADATA)].request_class(topics=[], allow_auto_topic_creation=False)
    _v, resp = asyncio.run_coroutine_threadsafe(
        k.cluster.own_client.request(int(ApiKey.METADATA), req, lo=1), k.loop
    ).result(10)
    assert [b.port for b in resp.brokers] == [tls_broker.relay.port]
    # ... and so does a filter's request to one node (ClusterServices.send_request(node_id=...))
    node_resp = asyncio.run_coroutine_threadsafe(
        k.cluster.services.send_request(int(ApiKey.METADATA), req, max_version=12, node_id=111), k.loop
    ).result(10)
    assert [b.node_id for b in node_resp.brokers] == [111]
    confluent_roundtrip(k.bootstrap, confluent_ssl(pki, pki.alice))
    assert principals_seen() == {"CN=alice,OU=payments,O=kgate tests"}
    # node connections went through TLS too: kgate learned node 111 and served it on its own port
    assert 111 in k.call(lambda: dict(k.cluster.listening_ports))


def test_kafka_python_and_aiokafka_mtls(pki, tls_broker, kgate_factory_inproc):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    SEEN.clear()
    k = kgate_factory_inproc(tls_config(pki, tls_broker.relay.bootstrap))
    ctx = client_context(pki, pki.alice)
    topic = unique("kp-tls")
    p = KafkaProducer(bootstrap_servers=k.bootstrap, security_protocol="SSL", ssl_context=ctx)
    values = [f"kp{i}".encode() for i in range(10)]
    for v in values:
        p.send(topic, v, partition=0)
    p.flush(30)
    p.close(10)
    c = KafkaConsumer(
        bootstrap_servers=k.bootstrap,
        security_protocol="SSL",
        ssl_context=ctx,
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    got = []
    for rec in c:
        got.append(rec.value)
        if len(got) == len(values):
            break
    c.close()
    assert got == values

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka import TopicPartition as ATP

        prod = AIOKafkaProducer(bootstrap_servers=k.bootstrap, security_protocol="SSL", ssl_context=ctx)
        await prod.start()
        try:
            for v in values:
                await prod.send_and_wait(topic, b"aio-" + v, partition=0)
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(
            bootstrap_servers=k.bootstrap,
            security_protocol="SSL",
            ssl_context=ctx,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await cons.start()
        out: list[bytes] = []
        try:
            cons.assign([ATP(topic, 0)])
            await cons.seek_to_beginning(ATP(topic, 0))
            deadline = time.monotonic() + 30
            while len(out) < 2 * len(values) and time.monotonic() < deadline:
                for recs in (await cons.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in recs)
        finally:
            await cons.stop()
        return out

    assert asyncio.run(aio()) == values + [b"aio-" + v for v in values]
    assert principals_seen() == {"CN=alice,OU=payments,O=kgate tests"}


def _handshake(port: int, ctx: ssl.SSLContext) -> tuple[ssl.SSLSocket | None, str]:
    raw = socket.create_connection((HOST, port), timeout=10)
    try:
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.settimeout(10)
        # TLS 1.3: a refused client certificate shows on the first read, not in the handshake
        s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")  # ApiVersions v0
        data = s.recv(4)
        return (s, "ok") if data else (None, "closed")
    except (ssl.SSLError, OSError) as exc:
        raw.close()
        return None, str(exc)


def test_client_without_certificate_refused_when_required(pki, tls_broker, kgate_factory_inproc):
    k = kgate_factory_inproc(tls_config(pki, tls_broker.relay.bootstrap))
    s, _why = _handshake(k.port, client_context(pki))
    assert s is None, "a client without a certificate was served"
    s, _why = _handshake(k.port, client_context(pki, pki.rogue_client))
    assert s is None, "a certificate from another CA was accepted"
    with socket.create_connection((HOST, k.port), timeout=10) as plain:  # a plaintext client on a TLS port
        plain.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
        try:
            assert plain.recv(65536) == b""
        except ConnectionResetError:
            pass
    ok, why = _handshake(k.port, client_context(pki, pki.alice))
    assert ok is not None, why
    ok.close()


def test_requested_client_auth_serves_clients_without_certificate(pki, tls_broker, kgate_factory_inproc):
    SEEN.clear()
    k = kgate_factory_inproc(tls_config(pki, tls_broker.relay.bootstrap, client_auth="requested"))
    confluent_roundtrip(k.bootstrap, confluent_ssl(pki), n=3)
    assert principals_seen() == {None}


def test_untrusted_upstream_certificate_refused_with_clear_log(pki, tmp_path, tls_broker, kgate_factory_inproc, caplog):
    """A broker whose certificate kgate's CA did not sign: kgate does not talk to it, and says why."""
    relay = procs.TlsRelay(
        tmp_path / "rogue.log", free_port(), tls_broker.tansu.bootstrap, pki.rogue_broker.cert, pki.rogue_broker.key
    ).start()
    try:
        k = kgate_factory_inproc(tls_config(pki, relay.bootstrap))
        with caplog.at_level(logging.INFO):
            s, _why = _handshake(k.port, client_context(pki, pki.alice))
            if s is not None:
                s.close()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any(
                "broker certificate not trusted" in r.getMessage() for r in caplog.records
            ):
                time.sleep(0.1)
        lines = [r.getMessage() for r in caplog.records if "broker certificate not trusted" in r.getMessage()]
        assert lines, [r.getMessage() for r in caplog.records][-20:]
        assert "unable to get local issuer certificate" in lines[0] or "self-signed" in lines[0], lines[0]
    finally:
        relay.kill()


def test_upstream_client_certificate_required_by_broker(pki, tmp_path, tls_broker, kgate_factory_inproc):
    """A broker side that requires mTLS: kgate presents upstream_tls.cert_file."""
    kgate_client = pki.ca.issue("kgate-client", "kgate-proxy")
    relay = procs.TlsRelay(
        tmp_path / "mtls.log",
        free_port(),
        tls_broker.tansu.bootstrap,
        pki.broker.cert,
        pki.broker.key,
        client_ca=pki.ca.cert_path,
    ).start()
    try:
        # Tansu advertises the module relay: bootstrap through the mTLS relay, nodes through the other;
        # both need kgate's TLS, only this one its certificate.
        k = kgate_factory_inproc(
            tls_config(
                pki,
                relay.bootstrap,
                upstream_tls={
                    "ca_file": str(pki.ca.cert_path),
                    "cert_file": str(kgate_client.cert),
                    "key_file": str(kgate_client.key),
                },
            )
        )
        confluent_roundtrip(k.bootstrap, confluent_ssl(pki, pki.alice), n=3)
        assert "CN=kgate-proxy" in relay.log_text() or "kgate-proxy" in relay.log_text()
    finally:
        relay.kill()


def _served_serial(port: int, pki: Pki) -> int:
    from cryptography import x509

    ctx = client_context(pki, pki.alice)
    with socket.create_connection((HOST, port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=HOST) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_certificate_reload_new_handshakes_get_new_cert(pki, tmp_path, tls_broker, kgate_factory_inproc):
    """Replace the files: new connections see the new serial, an open connection keeps working."""
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copy(pki.kgate.cert, cert)
    shutil.copy(pki.kgate.key, key)
    tls = {
        "cert_file": str(cert),
        "key_file": str(key),
        "client_ca_file": str(pki.ca.cert_path),
        "client_auth": "required",
        "reload_interval_s": 0.2,
    }
    k = kgate_factory_inproc(tls_config(pki, tls_broker.relay.bootstrap, tls=tls))
    assert _served_serial(k.port, pki) == pki.kgate.serial
    held, why = _handshake(k.port, client_context(pki, pki.alice))
    assert held is not None, why
    new = pki.ca.issue("kgate-renewed", "kgate.test", server=True, directory=tmp_path)
    # a half-done rotation (certificate first, key later) keeps the old one and does not crash
    shutil.copy(new.cert, cert)
    time.sleep(0.6)
    assert _served_serial(k.port, pki) == pki.kgate.serial
    shutil.copy(new.key, key)
    deadline = time.monotonic() + 10
    while _served_serial(k.port, pki) != new.serial:
        assert time.monotonic() < deadline, "new certificate not served within 10 s"
        time.sleep(0.2)
    # the connection opened before the reload still works
    held.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x02\xff\xff")
    held.settimeout(10)
    assert len(held.recv(65536)) > 0
    held.close()
    assert k.call(lambda: k.cluster.client_tls.reloads) == 1


def _scraped(admin_port: int, name: str, labels: str) -> float:
    """One sample of ``name`` with exactly ``labels`` (Prometheus text from the admin listener)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{HOST}:{admin_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.split()[-1])
    return 0.0


def test_tls_handshake_failures_are_counted_and_logged(pki, tls_broker, kgate_factory_inproc, caplog):
    """A plaintext client and a client with another CA's certificate on the TLS listener: each
    counts in kgate_tls_handshake_failures_total{side="client"} (scraped from /metrics), and the
    first of the burst is logged with the peer's address and the reason."""
    import dataclasses

    from kgate.config import AdminConfig, HostPort

    admin_port = free_port()
    cfg = tls_config(pki, tls_broker.relay.bootstrap, name="tls-fail")
    cfg = dataclasses.replace(cfg, admin=AdminConfig(listen=HostPort(HOST, admin_port)))
    labels = 'cluster="tls-fail",side="client"'
    with caplog.at_level(logging.WARNING, logger="kgate.connection"):
        k = kgate_factory_inproc(cfg)
        assert _scraped(admin_port, "kgate_tls_handshake_failures_total", labels) == 0
        with socket.create_connection((HOST, k.port), timeout=10) as plain:  # plaintext on a TLS port
            peer = f"{HOST}:{plain.getsockname()[1]}"
            plain.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")  # ApiVersions v0
            try:
                assert plain.recv(65536) == b""
            except ConnectionResetError:
                pass
        deadline = time.monotonic() + 10
        while _scraped(admin_port, "kgate_tls_handshake_failures_total", labels) < 1:
            assert time.monotonic() < deadline, "the plaintext client's failed handshake was not counted"
            time.sleep(0.05)
        s, _why = _handshake(k.port, client_context(pki, pki.rogue_client))
        assert s is None, "a certificate from another CA was accepted"
        while _scraped(admin_port, "kgate_tls_handshake_failures_total", labels) < 2:
            assert time.monotonic() < deadline + 10, "the rogue certificate's failed handshake was not counted"
            time.sleep(0.05)
        ok, why = _handshake(k.port, client_context(pki, pki.alice))  # a good client does not count
        assert ok is not None, why
        ok.close()
    assert _scraped(admin_port, "kgate_tls_handshake_failures_total", labels) == 2
    lines = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(lines) == 1, lines  # rate-limited: the second failure within 10 s is only counted
    assert peer in lines[0], lines[0]
    assert "cluster tls-fail" in lines[0], lines[0]
