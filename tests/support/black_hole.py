"""An upstream whose connects hang: a listening socket with backlog 0 and a full accept queue.

The kernel drops further SYNs to such a listener, so a connect to it hangs exactly like one to a
broker behind a dead route, with no stand-in involved. ``open`` lets connects through: a hung
connect completes at its next SYN retransmission (~1, 3, 7 s after it began), so a test can also
watch what a client sent while kgate was connecting arrive at the upstream.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


class Accepted:
    """An accepted connection whose first bytes were already read (to tell it from the others)."""

    def __init__(self, sock: socket.socket, first: bytes) -> None:
        self.sock = sock
        self.first = first

    def read_exactly(self, n: int, timeout: float = 20) -> bytes:
        parts = [self.first]
        got = len(self.first)
        self.sock.settimeout(timeout)
        while got < n:
            chunk = self.sock.recv(min(1 << 20, n - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self.sock.close()


class BlackHole:
    """A listener whose connects hang until ``open`` frees its accept queue."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.fillers: list[socket.socket] = []
        self.others: list[socket.socket] = []  # connections ``open`` accepted and did not return
        for _ in range(4):  # more than the queue holds: the rest stay in SYN-SENT (non-blocking connect)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(s)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def hangs(self) -> bool:
        """Whether a connect to it really hangs on this kernel."""
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", self.port))
            return False
        except (TimeoutError, OSError):
            return True
        finally:
            probe.close()

    def open(self, prefix: bytes, timeout: float) -> Accepted:
        """Let connects through and return the connection whose first bytes are ``prefix``.

        The accept queue grows (Linux takes a second ``listen`` as a new backlog), so every hung
        connect completes at its next SYN retransmission, not only the first to arrive. kgate's own
        upstream client (node discovery) also connects here and sends requests of its own; those
        connections are held open, unanswered, so that it does not reconnect at once. Each is told
        apart by its first bytes, read only as far as they still match ``prefix``.
        """
        for s in self.fillers:
            s.close()  # a filler still in SYN-SENT stops retransmitting
        self.fillers.clear()
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(2)
            first = b""
            try:
                while len(first) < len(prefix) and prefix.startswith(first):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    first += chunk
            except (TimeoutError, OSError):
                pass
            if first.startswith(prefix):
                return Accepted(conn, first)
            self.others.append(conn)  # a filler the queue held, or kgate's own upstream client
        raise AssertionError("no connection with the expected first bytes came through once the queue was freed")

    def close(self) -> None:
        for s in self.fillers + self.others:
            s.close()
        self.listener.close()


@contextmanager
def black_hole() -> Iterator[BlackHole]:
    """A ``BlackHole``; skips the test where this kernel completes the connect anyway."""
    hole = BlackHole()
    try:
        if not hole.hangs():
            pytest.skip("this kernel completed a connect to a full backlog-0 listener: no black hole to test against")
        yield hole
    finally:
        hole.close()
