"""A half-closed client waiting for an answer is still bounded by the upstream deadline.

After the client's FIN kgate keeps its connection open for the answers it is owed
(proxy/carrier/connection.py ``eof_received``); a broker that never answers must not keep it open
forever. The timeout sweep (proxy/carrier/timeouts.py) watches a half-closed connection as any
other (it skips only connections whose client is gone for good): the request at the head of the
broker queue times out after ``upstream_timeout_s`` and the connection closes.

The silent broker is a real Tansu, stopped (SIGSTOP) once kgate's connection to it is up: the
kernel keeps accepting its bytes, nothing answers. In-process kgate, real sockets.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from typing import Any

from support import wire
from support.inproc_kgate import InprocKgate, make_config

from kgate.proxy.control.metrics import TIMEOUTS


def _upstream_timeouts() -> float:
    return TIMEOUTS.labels("default", "upstream")._value.get()  # type: ignore[no-any-return]


def test_a_half_closed_connection_a_stopped_broker_never_answers_times_out(fresh_tansu: Any) -> None:
    kgate = InprocKgate(make_config(fresh_tansu.bootstrap, upstream_timeout_s=1)).start()
    before = _upstream_timeouts()
    client = socket.create_connection(("127.0.0.1", kgate.port), timeout=10)
    stopped = False
    try:
        client.sendall(wire.api_versions_request(1))
        (size,) = struct.unpack(">i", client.recv(4, socket.MSG_WAITALL))
        client.recv(size, socket.MSG_WAITALL)  # answered: kgate's broker connection is up
        os.kill(fresh_tansu.pid, signal.SIGSTOP)
        stopped = True
        client.sendall(wire.metadata_request(2, None, 1))
        client.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        client.settimeout(15)
        try:
            data = client.recv(65536)
        except ConnectionResetError:
            data = b""
        took = time.monotonic() - t0
        assert data == b"", "an answer from a stopped broker?"
        assert took >= 0.9, f"closed after {took:.2f}s: before the deadline, so not waiting for the answer"
        assert took < 6, f"a half-closed connection outlived its upstream deadline (1 s) by {took - 1:.1f}s"
        assert _upstream_timeouts() == before + 1, "closed, but not by the upstream deadline"
    finally:
        if stopped:
            os.kill(fresh_tansu.pid, signal.SIGCONT)
        client.close()
        kgate.stop()
