"""SCRAM client against the RFC 7677 test vector, and its refusals."""

from __future__ import annotations

import base64

import pytest

from kgate.proxy.carrier.sasl_client import SaslError, ScramClient, plain_token
from kgate.proxy.sansio.sasl import principal_from_token

# RFC 7677, section 3 (SCRAM-SHA-256, user "user", password "pencil")
NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _client() -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=NONCE)


def test_rfc7677_exchange() -> None:
    c = _client()
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert c.final(SERVER_FIRST) == CLIENT_FINAL
    c.verify(SERVER_FINAL)  # does not raise


def test_wrong_server_signature_is_refused() -> None:
    c = _client()
    c.final(SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(SaslError, match="server signature"):
        c.verify(forged)


def test_server_nonce_must_extend_ours() -> None:
    c = _client()
    with pytest.raises(SaslError, match="forged"):
        c.final(b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def test_server_error_is_reported() -> None:
    c = _client()
    with pytest.raises(SaslError, match="unknown-user"):
        c.final(b"e=unknown-user")


def test_sha512_and_escaped_names() -> None:
    c = ScramClient("SCRAM-SHA-512", "a,b=c", "pw", nonce="n0nce")
    assert c.first() == b"n,,n=a=2Cb=3Dc,r=n0nce"
    assert principal_from_token("SCRAM-SHA-512", c.first()) == "a,b=c"


def test_plain_token_and_principal() -> None:
    token = plain_token("alice", "secret")
    assert token == b"\0alice\0secret"
    assert principal_from_token("PLAIN", token) == "alice"
