"""Signals (issue 7, item 4): SIGHUP reloads (test_reload.py), never kills; a second SIGTERM cuts the drain short.

The broker in the drain test is a stand-in that never answers (tests/e2e/test_limits.BlackHole), so
kgate owes its client an answer for the whole drain: no real broker can be told to stay silent.
"""

from __future__ import annotations

import signal
import time

import pytest
from support import procs
from support.wire import RawClient, api_versions_request

from e2e.test_limits import BlackHole


@pytest.mark.timeout(60)
def test_sighup_reloads_and_does_not_kill(tansu, kgate_factory) -> None:
    k = kgate_factory(tansu.bootstrap)
    with RawClient(k.listen_port) as c:  # a connection open across the reload stays usable
        c.api_versions()
        k.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "config reloaded (SIGHUP): no changes" not in k.log_text():  # the file is unchanged
            assert k.alive(), f"SIGHUP killed kgate (exit {k.proc.returncode if k.proc else None})"
            assert time.monotonic() < deadline, k.log_text()[-3000:]
            time.sleep(0.05)
        c.api_versions()
    k.signal(signal.SIGTERM)
    assert k.wait(20) == 0


@pytest.mark.timeout(60)
def test_second_sigterm_cuts_the_drain_short(tmp_path) -> None:
    hole = BlackHole()
    # started by hand: kgate_factory's teardown expects exit 0, and this kgate must exit 1
    k = procs.Kgate(tmp_path / "kgate", [f"127.0.0.1:{hole.port}"], drain_timeout_s=30)
    try:
        k.start()
        with RawClient(k.listen_port) as c:
            c.send(api_versions_request(1))  # owed an answer that never comes
            time.sleep(0.3)
            k.signal(signal.SIGTERM)
            time.sleep(0.5)
            assert k.alive(), "the first SIGTERM must drain (30 s here), not exit"
            t0 = time.monotonic()
            k.signal(signal.SIGTERM)
            rc = k.wait(10)
        assert time.monotonic() - t0 < 5
        assert rc == 1, "a drain cut short exits 1"
        log = k.log_text()
        assert "second stop signal: closing with 1 request(s) still in flight" in log
        assert "filter chain: guardrails" in log  # the start-up log names the chain (the default one here)
    finally:
        k.kill()
        hole.close()
    assert "Traceback" not in k.log_text()
