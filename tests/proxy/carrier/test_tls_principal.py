"""The mTLS principal (proxy/carrier/tls.py) is named as Kafka's default principal builder names it:
X500Principal.getName() (RFC 2253), RDNs in reverse certificate order, Java's keywords."""

from __future__ import annotations

from kgate.proxy.carrier.tls import principal_from_peercert


def test_reverse_order_and_keywords():
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("stateOrProvinceName", "Berlin"),),
            (("localityName", "Berlin"),),
            (("organizationName", "Example"),),
            (("organizationalUnitName", "payments"),),
            (("commonName", "alice"),),
        )
    }
    assert principal_from_peercert(cert) == "CN=alice,OU=payments,O=Example,L=Berlin,ST=Berlin,C=DE"


def test_escaping_multivalued_and_email():
    cert = {
        "subject": (
            (("domainComponent", "com"),),
            (("organizationName", 'Acme, Inc. "+" <x>;'),),
            (("commonName", " svc#1 "), ("userId", "42")),
            (("emailAddress", "a@b.c"),),
        )
    }
    assert principal_from_peercert(cert) == (
        "1.2.840.113549.1.9.1=#1605614062 2e63".replace(" ", "")
        + r",CN=\ svc#1\ +UID=42,O=Acme\, Inc. \"\+\" \<x\>\;,DC=com"
    )


def test_no_certificate():
    assert principal_from_peercert(None) is None
    assert principal_from_peercert({}) is None


def test_sasl_replaces_the_certificate_principal_only_once_it_succeeds():
    """front_door.adopt_tls_principal seeds the SASL state; the core copies it into info after each step."""
    from kgate.api import ErrorCode
    from kgate.proxy.carrier.sasl_client import plain_token
    from kgate.proxy.sansio.sasl import SaslState

    sasl = SaslState()
    sasl.principal = "CN=alice,O=kgate tests"
    sasl.handshake_request("PLAIN")
    sasl.authenticate_request(plain_token("bob", "pw"))
    sasl.authenticate_response(ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert sasl.principal == "CN=alice,O=kgate tests"  # failed: the certificate's name stays
    sasl.handshake_request("PLAIN")
    sasl.authenticate_request(plain_token("bob", "pw"))
    sasl.authenticate_response(ErrorCode.NONE)
    assert sasl.principal == "bob"  # completed: SASL wins, as on a Kafka SASL_SSL listener
