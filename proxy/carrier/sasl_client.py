"""SASL for kgate's own upstream connection (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).

Clients authenticate themselves through kgate untouched; this module is only for the requests
kgate makes on its own behalf (node discovery, topic-id lookups) against a secured cluster, with
credentials from kgate's config. The SCRAM client follows RFC 5802 / RFC 7677 and verifies the
server's signature, so a kgate instance never talks to a broker that did not prove it knows the
credentials either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *_HASHES)


class SaslError(Exception):
    """Authentication failed or the server's answer is not what the mechanism expects."""


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


@dataclass
class ScramClient:
    """One SCRAM exchange: ``first()``, ``final(server_first)``, ``verify(server_final)``."""

    mechanism: str
    username: str
    password: str
    nonce: str = ""

    def __post_init__(self) -> None:
        if self.mechanism not in _HASHES:
            raise SaslError(f"not a SCRAM mechanism: {self.mechanism}")
        self._hash = _HASHES[self.mechanism]
        self.nonce = self.nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self._first_bare = f"n={_saslname(self.username)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
        if "e" in attrs:
            raise SaslError(f"server refused: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if not nonce.startswith(self.nonce) or salt is None or iterations is None:
            raise SaslError("malformed or forged server-first-message")
        salted = hashlib.pbkdf2_hmac(self._hash, self.password.encode(), base64.b64decode(salt), int(iterations))
        client_key = hmac.new(salted, b"Client Key", self._hash).digest()
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self._hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self._hash).digest()
        self._server_signature = hmac.new(server_key, auth_message, self._hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(kv.split("=", 1) for kv in server_final.decode().split(",") if "=" in kv)
        if "e" in attrs:
            raise SaslError(f"server refused: {attrs['e']}")
        got = base64.b64decode(attrs.get("v", ""))
        if not hmac.compare_digest(got, self._server_signature):
            raise SaslError("server signature does not match: the broker did not prove the credentials")


def plain_token(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()
