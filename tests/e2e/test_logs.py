"""Log output of a real kgate process: JSON lines on request, one line per closed connection."""

from __future__ import annotations

import json
import time

import pytest
from support.wire import RawClient


def _wait_for(k, needle: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while needle not in (text := k.log_text()):
        assert time.monotonic() < deadline, f"{needle!r} not logged:\n{text[-3000:]}"
        time.sleep(0.05)
    return text


@pytest.mark.timeout(60)
def test_json_log_lines_and_the_connection_closed_line(tansu, kgate_factory) -> None:
    k = kgate_factory(tansu.bootstrap, log_level="info", extra={"log_format": "json"})
    with RawClient(k.listen_port) as c:
        peer = f"127.0.0.1:{c.sock.getsockname()[1]}"
        c.api_versions()
    text = _wait_for(k, f'"peer": "{peer}", "listener": "bootstrap", "reason"')
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is one JSON object
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    # (the start-up port probe is a connection too: pick this client's line)
    (closed,) = [r for r in lines if r.get("event") == "connection_closed" and r["peer"] == peer]
    assert closed["level"] == "info"
    assert closed["logger"] == "kgate.connection"
    assert closed["reason"] == "client-left"
    assert closed["cluster"] == "default"
    assert closed["requests"] == 1
    assert closed["listener"] == "bootstrap"
    assert not [r for r in lines if r.get("event") == "connection_opened"], "opens are debug lines"


@pytest.mark.timeout(60)
def test_text_log_names_the_close_reason(tansu, kgate_factory) -> None:
    k = kgate_factory(tansu.bootstrap, log_level="debug")
    with RawClient(k.listen_port) as c:
        peer = f"127.0.0.1:{c.sock.getsockname()[1]}"
        c.api_versions()
    text = _wait_for(k, f"connection from {peer} closed after")
    assert f"connection from {peer} opened (cluster default, bootstrap)" in text
    line = next(line for line in text.splitlines() if f"{peer} closed after" in line)
    assert f" INFO    kgate.connection: connection from {peer} closed after " in line
    assert "and 1 request(s) (cluster default, bootstrap): client-left: client closed the connection" in line
