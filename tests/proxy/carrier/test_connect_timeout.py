"""The upstream connect timeout (proxy/carrier/connection.py ``_connect_upstream``) against a real black hole.

A listening socket with backlog 0 whose queue is full never completes another handshake: the
kernel drops the SYNs, so a connect to it hangs exactly like a broker behind a dead route. No
stand-in is involved: kgate, its sockets and the kernel's behaviour are real.

The timeout is one timer that cancels the connecting task; these tests pin that it closes the
client with a clear reason when it fires, and that a client leaving while kgate connects is not
mistaken for a timeout (no failure counted, nothing left behind).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from support.black_hole import black_hole as make_black_hole
from support.inproc_kgate import InprocKgate, make_config

_API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)


@pytest.fixture
def black_hole() -> Iterator[int]:
    """The port of a ``support.black_hole.BlackHole`` (connects to it hang)."""
    with make_black_hole() as hole:
        yield hole.port


def _failures(kgate: InprocKgate) -> float:
    return float(kgate.call(lambda: kgate.cluster.metrics.upstream_connect_failures._value.get()))


def test_connect_timeout_closes_the_client_and_counts_a_failure(black_hole: int) -> None:
    kgate = InprocKgate(make_config(f"127.0.0.1:{black_hole}", connect_timeout_s=0.5)).start()
    try:
        before = _failures(kgate)
        client = socket.create_connection(("127.0.0.1", kgate.port), timeout=10)
        client.sendall(_API_VERSIONS_V0)
        started = time.monotonic()
        # closed by kgate, not answered: a FIN, or a reset when kgate's socket still held the request
        # unread (reading pauses while the upstream connects; whether the request arrived before or
        # after that pause is up to the scheduler, and the kernel resets a close with unread bytes)
        try:
            assert client.recv(100) == b""
        except ConnectionResetError:
            pass
        waited = time.monotonic() - started
        client.close()
        assert 0.3 <= waited < 5, waited
        deadline = time.monotonic() + 5
        while _failures(kgate) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _failures(kgate) >= before + 1
        assert kgate.call(lambda: len(kgate.cluster.connections)) == 0
    finally:
        kgate.stop()


def test_client_leaving_while_connecting_is_not_a_timeout(black_hole: int) -> None:
    kgate = InprocKgate(make_config(f"127.0.0.1:{black_hole}", connect_timeout_s=1.0)).start()
    try:
        before = _failures(kgate)
        for _ in range(5):
            client = socket.create_connection(("127.0.0.1", kgate.port), timeout=10)
            client.close()  # before the upstream connect could finish or time out
        deadline = time.monotonic() + 5
        # all five accepted (kgate may not have taken them off the accept queue yet), then all gone
        while kgate.call(lambda: kgate.cluster.metrics.accepted_connections) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        while kgate.call(lambda: len(kgate.cluster.connections)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kgate.call(lambda: kgate.cluster.metrics.accepted_connections) == 5
        assert kgate.call(lambda: len(kgate.cluster.connections)) == 0
        time.sleep(1.5)  # past connect_timeout_s: a leaked timer would now count failures
        # kgate's own upstream client (node discovery) may count its own failed attempts; client
        # connections that were cancelled must not add one each
        assert _failures(kgate) - before < 5
    finally:
        kgate.stop()
