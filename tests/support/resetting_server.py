"""A stand-in broker that accepts every connection and resets it at once (SO_LINGER 0).

No real broker can be made to do that on demand; it is how a broker that crashes or a load
balancer with no healthy backend looks to kgate.
"""

from __future__ import annotations

import socket
import struct
import threading


class ResettingServer:
    """Accepts connections and resets each one at once."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self.sock.close()
