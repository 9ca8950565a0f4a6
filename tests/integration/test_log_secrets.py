"""No SASL credential ever reaches kgate's logs, even at debug, in text or JSON.

Every SASL path kgate has is driven through the test SASL gate (see test_sasl.py): kgate's own
upstream_auth (PLAIN and SCRAM-SHA-256, right and wrong password), clients' SaslHandshake v1 +
SaslAuthenticate (decoded by kgate) and v0 bare tokens (passed through), with right and wrong
passwords. Everything kgate logged meanwhile is formatted both ways (text with tracebacks,
JSON) and searched for each password, in the clear, in base64 and as the PLAIN token.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Iterator

import pytest
from support.sasl_gate import SaslGate

from integration.test_sasl import (  # fixtures and helpers of the SASL suite
    SVC,
    USERS,
    Wire,
    gate,  # noqa: F401
    kgate_factory,  # noqa: F401
    sasl_v0,
    sasl_v1,
    secured,  # noqa: F401
)
from kgate.proxy.carrier.sasl_client import plain_token
from kgate.proxy.control.logs import TEXT_FORMAT, JsonFormatter

pytestmark = pytest.mark.timeout(120)
WRONG = "wrong-Pa55word-never-logged"


class Capture(logging.Handler):
    """Every record, kept to be formatted both ways at the end."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        text, js = logging.Formatter(TEXT_FORMAT), JsonFormatter()
        return "\n".join(f(r) for r in self.records for f in (text.format, js.format))


@pytest.fixture
def captured() -> Iterator[Capture]:
    root = logging.getLogger()
    cap, level = Capture(), root.level
    root.addHandler(cap)
    root.setLevel(logging.DEBUG)
    try:
        yield cap
    finally:
        root.removeHandler(cap)
        root.setLevel(level)


def _forms(secret: str, user: str) -> list[str]:
    raw = secret.encode()
    return [
        secret,
        base64.b64encode(raw).decode(),
        base64.b64encode(plain_token(user, secret)).decode(),
        repr(plain_token(user, secret)),
        raw.hex(),
    ]


def _wait_logged(cap: Capture, needle: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not any(needle in r.getMessage() for r in list(cap.records)):
        assert time.monotonic() < deadline, f"{needle!r} never logged"
        time.sleep(0.05)


async def test_no_credential_in_debug_logs(gate: SaslGate, kgate_factory, captured: Capture) -> None:  # noqa: F811
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        # kgate's own connection: right password (discovery), then a kgate with a wrong one
        kgate_factory({"mechanism": mechanism, "username": SVC, "password": USERS[SVC]})
        kgate_factory({"mechanism": mechanism, "username": SVC, "password": WRONG})
    _wait_logged(captured, "node discovery failed")  # the wrong password was tried and logged

    k = kgate_factory()
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        for user in ("alice", "bob"):
            w = await Wire.open(k.port)
            try:
                assert (await sasl_v1(w, mechanism, user, USERS[user])).error_code == 0
                await w.metadata()
            finally:
                w.close()
            w = await Wire.open(k.port)
            try:
                await sasl_v0(w, mechanism, user, USERS[user])
                await w.metadata()
            finally:
                w.close()
        w = await Wire.open(k.port)
        try:
            assert (await sasl_v1(w, mechanism, "alice", WRONG)).error_code != 0
        finally:
            w.close()
    await asyncio.sleep(0)

    text = captured.text()
    assert "kgate.connection" in text, "nothing captured: the check would prove nothing"
    assert "DEBUG" in text, "nothing captured: the check would prove nothing"
    for user, secret in [*USERS.items(), ("alice", WRONG), (SVC, WRONG)]:
        for form in _forms(secret, user):
            assert form not in text, f"a credential of {user} ({form!r}) reached the logs"
