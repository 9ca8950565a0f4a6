"""The carrier: sockets and asyncio around each connection core (accept, connect, flow control, TLS, timeouts)."""
