"""What a client sends before kgate's upstream connection is up: held within a bound, then delivered whole.

kgate connects upstream when a client's first bytes for the broker arrive, and pauses reading it
if a second read arrives before the upstream is connected (proxy/carrier/connection.py
``send_upstream``: a Kafka client sends ApiVersions and waits, so most connections never pause).
What arrived before the pause took hold is held (``_early``) and written first once the upstream
connects. This pins both halves against a slow connect: kgate holds at most two reads however much
the client pushes, and the upstream then gets every byte, in order.

Pausing only once the early bytes pass the high-water mark (the raw relay, in effect, never
pauses) was measured and not kept: 1.8 % fewer user-space instructions per connection but 3 %
more CPU per connection (docs/performance.md, "2026-11-25, morning: what the many-connections row
is made of").

The upstream is a real black hole (tests/support/black_hole.py: a listening socket with backlog 0
and a full accept queue, so the kernel drops the SYNs and kgate's connect hangs) until the test
opens it; kgate's next SYN retransmission then connects, and what kgate forwards is read off a real
socket. No stand-in.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from support.black_hole import BlackHole
from support.black_hole import black_hole as make_black_hole
from support.inproc_kgate import InprocKgate, make_config
from support.wire import frame, request_header

from kgate.api import ApiKey

#: what one read by the event loop can take (uvloop reads up to 256 KiB at a time)
ONE_READ = 256 * 1024
FRAME_BYTES = 24 * 1024 * 1024  # far more than the kernel's socket buffers take on loopback


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    with make_black_hole() as hole:
        yield hole


def _big_request() -> bytes:
    """One Metadata v1 request frame of FRAME_BYTES (kgate forwards a frame larger than a read as it arrives)."""
    head = request_header(int(ApiKey.METADATA), 1, 7)
    body_len = FRAME_BYTES - 4 - len(head)
    body = (hashlib.sha256(b"kgate").digest() * (body_len // 32 + 1))[:body_len]
    return frame(head + body)


def _held(kgate: InprocKgate) -> tuple[int, bool]:
    """The one client connection's held early bytes and whether its reading is paused (0, False before accept)."""

    def look() -> tuple[int, bool]:
        if not kgate.cluster.connections:
            return 0, False
        (conn,) = kgate.cluster.connections
        return sum(len(d) for d in conn._early or ()), conn.gate.paused

    return kgate.call(look)  # type: ignore[no-any-return]


def test_bytes_before_the_upstream_connects_are_bounded_then_delivered_whole(black_hole: BlackHole) -> None:
    kgate = InprocKgate(make_config(f"127.0.0.1:{black_hole.port}", connect_timeout_s=30)).start()
    data = _big_request()
    client = socket.create_connection(("127.0.0.1", kgate.port), timeout=10)
    try:
        client.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and sent < len(data):
            try:
                sent += client.send(data[sent : sent + (1 << 20)])
            except BlockingIOError:
                time.sleep(0.02)
        assert sent < len(data), "the client sent everything: kgate (or the kernel) took it all while connecting"
        held, paused = _held(kgate)
        assert held <= 2 * ONE_READ, f"{held} bytes held while connecting"
        assert paused, "reading went on while the upstream was not connected"
        time.sleep(0.3)
        assert _held(kgate)[0] == held, "kgate kept reading while paused"

        # Free the black hole: kgate's next SYN gets through; everything the client sent, and the
        # rest it sends now, reaches the upstream in order, byte for byte.
        client.setblocking(True)
        rest = threading.Thread(target=client.sendall, args=(data[sent:],), daemon=True)
        rest.start()
        upstream = black_hole.open(data[:64], timeout=20)
        try:
            got = upstream.read_exactly(len(data))
        finally:
            upstream.close()
        rest.join(10)
        assert len(got) == len(data)
        assert got == data
    finally:
        client.close()
        kgate.stop()


def test_a_client_that_never_sends_costs_no_broker_connection(tansu) -> None:
    """The broker connection is made for the first bytes, not at accept (a port scan opens none)."""
    kgate = InprocKgate(make_config(tansu.bootstrap)).start()
    clients = [socket.create_connection(("127.0.0.1", kgate.port), timeout=10) for _ in range(5)]

    def upstreams() -> int:
        return kgate.call(lambda: kgate.cluster.metrics.open_upstream_connections)  # type: ignore[no-any-return]

    try:
        deadline = time.monotonic() + 10
        while kgate.call(lambda: len(kgate.cluster.connections)) < 5:
            assert time.monotonic() < deadline, "kgate did not accept the clients"
            time.sleep(0.02)
        time.sleep(0.3)
        assert upstreams() == 0, "kgate connected upstream for clients that sent nothing"
        clients[0].sendall(frame(request_header(int(ApiKey.API_VERSIONS), 0, 1)))
        clients[0].recv(65536)  # the broker's answer: its connection is open
        assert upstreams() == 1
    finally:
        for c in clients:
            c.close()
        kgate.stop()
