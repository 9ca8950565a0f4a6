"""SASL bookkeeping on a connection kgate relays but never authenticates itself.

Two jobs: after SaslHandshake v0 the client's tokens travel as bare frames without Kafka
headers (they must be recognised and passed through untouched, and their answers too), and
the principal the client authenticated as is worth knowing for filters (audit, authorization).
kgate learns the principal from the client's token for mechanisms that carry the user name in
clear (PLAIN, SCRAM-*) and trusts it only once the broker accepted the authentication.
"""

from __future__ import annotations

from typing import Final

from kgate.api import ErrorCode
from kgate.codec import api
from kgate.codec.headers import peek_request


def principal_from_token(mechanism: str, token: bytes) -> str | None:
    """The user name a client-first SASL token names, for mechanisms that send it in clear."""
    try:
        if mechanism == "PLAIN":
            parts = token.split(b"\x00")
            if len(parts) != 3:
                return None
            authzid, authcid = parts[0], parts[1]
            return (authzid or authcid).decode()
        if mechanism.startswith("SCRAM-"):
            # client-first-message: gs2-header "n,," then "n=<user>,r=<nonce>"
            text = token.decode()
            for attr in text.split(",")[2:]:
                if attr.startswith("n="):
                    return attr[2:].replace("=2C", ",").replace("=3D", "=")
    except UnicodeDecodeError:
        return None
    return None


def plausible_request(frame: memoryview) -> bool:
    """Whether a frame after SaslHandshake v0 looks like a Kafka request rather than a bare token."""
    if len(frame) < 14:
        return False
    api_key, version, _cid = peek_request(frame)
    return api.knows(api_key, version)


def _rounds(mechanism: str) -> int:
    """Client tokens until a successful exchange is complete (0: kgate cannot tell)."""
    if mechanism == "PLAIN":
        return 1
    if mechanism.startswith("SCRAM-"):
        return 2
    return 0


class SaslState:
    """Per-connection SASL progress.

    A principal is trusted only once the exchange is complete: PLAIN after its one token, SCRAM
    after its second (the one carrying the proof) was accepted. Before that the name is only a
    claim, and filters (audit, authorization) must not act on a claim.
    """

    __slots__ = ("auth_rounds", "candidate", "mechanism", "principal", "raw", "raw_tokens")

    def __init__(self) -> None:
        self.mechanism = ""  # from the latest SaslHandshake request
        self.raw = False  # True while bare tokens are expected (after SaslHandshake v0)
        self.raw_tokens = 0
        self.auth_rounds = 0  # SaslAuthenticate rounds accepted so far
        self.candidate: str | None = None  # principal named by the token, not yet proven
        self.principal: str | None = None

    def handshake_request(self, mechanism: str) -> None:
        self.mechanism = mechanism.upper()
        self.candidate = None
        self.auth_rounds = 0

    def handshake_v0_accepted(self) -> None:
        self.raw = True
        self.raw_tokens = 0

    def is_raw_token(self, frame: memoryview) -> bool:
        """Classify a client frame while bare tokens may come.

        PLAIN is exactly one token (whose first bytes could pass for a header); for the other
        mechanisms the exchange ends at the first frame that parses as a Kafka request. The
        broker closes the connection on a failed exchange, so a request after the full number
        of tokens means the exchange succeeded.
        """
        if self.mechanism == "PLAIN":
            is_token = self.raw_tokens == 0
        else:
            is_token = not plausible_request(frame)
        if is_token:
            if self.raw_tokens == 0:
                self.candidate = principal_from_token(self.mechanism, bytes(frame[4:]))
            self.raw_tokens += 1
            return True
        self.raw = False
        needed = _rounds(self.mechanism)
        if needed and self.raw_tokens >= needed and self.candidate is not None:
            self.principal = self.candidate
        self.candidate = None
        return False

    def authenticate_request(self, token: bytes) -> None:
        if self.candidate is None and self.auth_rounds == 0:
            self.candidate = principal_from_token(self.mechanism, token)

    def authenticate_response(self, error_code: int) -> None:
        if error_code != ErrorCode.NONE:
            self.candidate = None
            return
        self.auth_rounds += 1
        needed = _rounds(self.mechanism)
        if needed and self.auth_rounds >= needed and self.candidate is not None:
            self.principal, self.candidate = self.candidate, None


class _Unstarted(SaslState):
    """The state of a connection that has taken no SASL step: one instance (``NO_SASL``) shared by
    every such connection, so each does not build its own. Read-only once made: a path that
    changes SASL state without ``ConnectionCore.own_sasl()`` fails here, never writing one
    connection's principal into all the others'."""

    __slots__ = ("_sealed",)

    def __setattr__(self, name: str, value: object) -> None:
        if getattr(self, "_sealed", False):
            raise AttributeError(f"NO_SASL is shared by every connection: set {name} on ConnectionCore.own_sasl()")
        super().__setattr__(name, value)


NO_SASL: Final[SaslState] = _Unstarted()
NO_SASL._sealed = True  # type: ignore[attr-defined]
