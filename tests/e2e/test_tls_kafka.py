"""TLS to a real TLS broker: Apache Kafka 4.0.2 with an SSL listener of its own (PEM key store
made at run time), no relay. kgate verifies Kafka's certificate against the test CA, clients speak
mTLS to kgate, and kgate's own connection (node discovery) uses TLS too. A Kafka of this module's
own (the session's broker is plaintext); skipped, with the reason, where Kafka cannot run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import kafka_broker
from support.inproc_kgate import InprocKgate

from .test_tls import SEEN, Pki, confluent_roundtrip, confluent_ssl, principals_seen, tls_config

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki-kafka"))


@pytest.fixture(scope="module")
def kafka_ssl(tmp_path_factory, pki) -> Iterator[kafka_broker.Kafka]:
    why = kafka_broker.unavailable()
    if why is not None:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("kafka-ssl")
    keystore = d / "broker-keystore.pem"
    keystore.write_bytes(pki.broker.key.read_bytes() + pki.broker.cert.read_bytes())
    k = kafka_broker.Kafka(d, ssl_listener=(keystore, pki.ca.cert_path))
    k.start()
    yield k
    k.stop()


def test_kafka_ssl_listener_through_kgate(pki, kafka_ssl):
    SEEN.clear()
    k = InprocKgate(tls_config(pki, kafka_ssl.ssl_bootstrap)).start()
    try:
        confluent_roundtrip(k.bootstrap, confluent_ssl(pki, pki.alice), n=20)
        assert principals_seen() == {"CN=alice,OU=payments,O=kgate tests"}
        # discovery (kgate's own connection, over TLS) learned Kafka's node at its SSL address
        nodes = k.call(lambda: dict(k.cluster.upstream_nodes))
        assert nodes == {kafka_ssl.node_id: ("127.0.0.1", kafka_ssl.ssl_port)}
    finally:
        k.stop()


def test_kafka_certificate_from_another_ca_is_refused(tmp_path, kafka_ssl):
    """kgate configured with a CA that did not sign Kafka's certificate: nothing gets through."""
    other = Pki(tmp_path)
    cfg = tls_config(other, kafka_ssl.ssl_bootstrap)
    k = InprocKgate(cfg).start()
    try:
        with pytest.raises(AssertionError):
            confluent_roundtrip(k.bootstrap, {**confluent_ssl(other, other.alice), "message.timeout.ms": 3000}, n=1)
    finally:
        k.stop()
