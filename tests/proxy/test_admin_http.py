"""proxy/admin.py's HTTP handling, against a stub readiness: methods, paths, bad requests, formats."""

from __future__ import annotations

import asyncio

from kgate.config import HostPort
from kgate.proxy.admin import AdminServer


class Stub:
    def __init__(self) -> None:
        self.ready = True

    def report(self) -> tuple[bool, list[str]]:
        return self.ready, ["cluster c: upstream reachable (1.0s)" if self.ready else "draining: ..."]


async def _raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


async def test_paths_methods_and_formats() -> None:
    stub = Stub()
    server = AdminServer(HostPort("127.0.0.1", 0), stub)
    await server.start()
    port = server.port
    try:
        status, headers, body = await _raw(port, b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (status, body) == (200, b"ok\n") and headers["connection"] == "close"

        status, _h, body = await _raw(port, b"GET /readyz?verbose HTTP/1.1\r\n\r\n")
        assert status == 200 and body.startswith(b"ready\n")
        stub.ready = False
        status, _h, body = await _raw(port, b"GET /readyz HTTP/1.0\r\n\r\n")
        assert status == 503 and body.startswith(b"not ready\ndraining")

        status, headers, body = await _raw(port, b"HEAD /livez HTTP/1.1\r\n\r\n")
        assert status == 200 and body == b"" and headers["content-length"] == "3"

        status, headers, _b = await _raw(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert status == 405 and headers["allow"] == "GET, HEAD"
        assert (await _raw(port, b"GET /admin HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await _raw(port, b"garbage\r\n\r\n"))[0] == 400

        status, headers, body = await _raw(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == 200 and headers["content-type"].startswith("text/plain") and b"# TYPE" in body
        accept = b"Accept: application/openmetrics-text; version=1.0.0\r\n"
        status, headers, body = await _raw(port, b"GET /metrics HTTP/1.1\r\n" + accept + b"\r\n")
        assert headers["content-type"].startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    finally:
        await server.close()
