"""A client reconnecting in a loop while the broker is down must not flood kgate's log.

Each connection kgate closes for an error gets a warning; a librdkafka client retrying against a
dead broker closed ~20 a second, each with its own line. The warnings are bounded per cluster and
reason (five per 10 s, proxy/control/logs.py ``LineBudget``); the counter still counts every one.
Real kgate in process, a real port that refuses connections as the "broker", raw clients.
"""

from __future__ import annotations

import logging
import time

import pytest
from support import wire
from support.inproc_kgate import InprocKgate, make_config
from support.ports import free_port

CLIENTS = 12


@pytest.mark.timeout(60)
def test_a_reconnect_storm_writes_five_warnings_and_counts_them_all(caplog: pytest.LogCaptureFixture) -> None:
    k = InprocKgate(make_config(f"127.0.0.1:{free_port()}")).start()  # nothing listens there
    try:
        with caplog.at_level(logging.WARNING, logger="kgate"):
            for i in range(CLIENTS):
                c = wire.RawClient(k.port)
                with pytest.raises((ConnectionError, OSError, EOFError)):
                    c.api_versions(i)  # kgate finds no upstream and closes the connection
                c.close()
            deadline = time.monotonic() + 10
            while k.call(lambda: closed_unreachable(k)) < CLIENTS:
                assert time.monotonic() < deadline, k.call(lambda: closed_unreachable(k))
                time.sleep(0.05)
        lines = [r.getMessage() for r in caplog.records if "closing client" in r.getMessage()]
    finally:
        k.stop()
    assert len(lines) == 5, lines
    assert all("no upstream reachable" in line for line in lines), lines


def closed_unreachable(k: InprocKgate) -> float:
    from kgate.proxy.control.metrics import CLOSED_ERRORS

    return CLOSED_ERRORS.labels(k.cluster.name, "upstream-unreachable")._value.get()
