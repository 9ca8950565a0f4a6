"""A connection's SASL state is its own from its first SASL step (``ConnectionCore.own_sasl``).

Until then every core reads one shared, read-only state (``NO_SASL``), so a connection that never
authenticates builds none. What must hold: one connection's exchange never shows in another's
principal, and the shared state refuses every write. Driven sans-IO (tests/support/core_driver.py);
the same bookkeeping runs on sockets in tests/e2e (SASL through kgate to Kafka).
"""

from __future__ import annotations

import pytest
from support.core_driver import make_core

from kgate.api import ApiKey, ErrorCode
from kgate.proxy.carrier.sasl_client import plain_token
from kgate.proxy.sansio.core import ConnectionCore
from kgate.proxy.sansio.sasl import NO_SASL
from kgate.testing.frames import request_bytes, request_class, response_bytes, response_class


def _authenticate(core: ConnectionCore, ok: bool) -> None:
    """A PLAIN exchange (SaslHandshake v1, SaslAuthenticate v2) and the broker's answers to it."""
    core.receive_client(
        request_bytes(
            ApiKey.SASL_HANDSHAKE, 1, request_class(ApiKey.SASL_HANDSHAKE)(mechanism="PLAIN"), correlation_id=1
        )
    )
    core.receive_broker(
        response_bytes(
            ApiKey.SASL_HANDSHAKE,
            1,
            response_class(ApiKey.SASL_HANDSHAKE)(error_code=0, mechanisms=["PLAIN"]),
            correlation_id=1,
        )
    )
    ask = request_class(ApiKey.SASL_AUTHENTICATE)(auth_bytes=plain_token("bob", "pw"))
    core.receive_client(request_bytes(ApiKey.SASL_AUTHENTICATE, 2, ask, correlation_id=2))
    error = 0 if ok else int(ErrorCode.SASL_AUTHENTICATION_FAILED)
    answer = response_class(ApiKey.SASL_AUTHENTICATE)(error_code=error, error_message=None, auth_bytes=b"")
    core.receive_broker(response_bytes(ApiKey.SASL_AUTHENTICATE, 2, answer, correlation_id=2))


def test_a_connection_that_authenticates_gets_its_own_state_and_no_other_sees_it() -> None:
    alice, _ = make_core()
    other, _ = make_core()
    assert alice.sasl is NO_SASL
    assert other.sasl is NO_SASL
    _authenticate(alice, ok=True)
    assert alice.info.principal == "bob"
    assert alice.sasl is not NO_SASL
    assert other.sasl is NO_SASL
    assert other.info.principal is None
    assert NO_SASL.principal is None
    assert NO_SASL.candidate is None
    assert not NO_SASL.raw
    assert NO_SASL.mechanism == ""
    assert NO_SASL.auth_rounds == 0


def test_a_failed_exchange_leaves_the_principal_unset() -> None:
    core, _ = make_core()
    _authenticate(core, ok=False)
    assert core.info.principal is None
    assert NO_SASL.principal is None
    assert NO_SASL.mechanism == ""


def test_the_shared_state_refuses_writes() -> None:
    with pytest.raises(AttributeError, match="own_sasl"):
        NO_SASL.principal = "mallory"
    with pytest.raises(AttributeError):
        NO_SASL.handshake_request("PLAIN")
    assert NO_SASL.principal is None
    assert NO_SASL.mechanism == ""
