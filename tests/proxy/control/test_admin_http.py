"""proxy/control/admin.py's HTTP handling, against a stub readiness: methods, paths, bad requests, formats."""

from __future__ import annotations

import asyncio

from kgate.config import HostPort
from kgate.proxy.control.admin import AdminServer


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
        assert (status, body) == (200, b"ok\n")
        assert headers["connection"] == "close"

        status, _h, body = await _raw(port, b"GET /readyz?verbose HTTP/1.1\r\n\r\n")
        assert status == 200
        assert body.startswith(b"ready\n")
        stub.ready = False
        status, _h, body = await _raw(port, b"GET /readyz HTTP/1.0\r\n\r\n")
        assert status == 503
        assert body.startswith(b"not ready\ndraining")

        status, headers, body = await _raw(port, b"HEAD /livez HTTP/1.1\r\n\r\n")
        assert status == 200
        assert body == b""
        assert headers["content-length"] == "3"

        status, headers, _b = await _raw(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert status == 405
        assert headers["allow"] == "GET, HEAD"
        assert (await _raw(port, b"GET /admin HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await _raw(port, b"garbage\r\n\r\n"))[0] == 400

        status, headers, body = await _raw(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == 200
        assert headers["content-type"].startswith("text/plain")
        assert b"# TYPE" in body
        accept = b"Accept: application/openmetrics-text; version=1.0.0\r\n"
        status, headers, body = await _raw(port, b"GET /metrics HTTP/1.1\r\n" + accept + b"\r\n")
        assert headers["content-type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")
    finally:
        await server.close()


class Outcome:
    def __init__(self, ok: bool, message: str) -> None:
        self.ok = ok
        self.message = message


def test_only_loopback_peers_count_as_loopback() -> None:
    from kgate.proxy.control.admin import is_loopback

    assert is_loopback(("127.0.0.1", 5000))
    assert is_loopback(("127.8.9.10", 5000))
    assert is_loopback(("::1", 5000, 0, 0))
    assert is_loopback(("::ffff:127.0.0.1", 5000, 0, 0))  # a dual-stack listener's IPv4 loopback peer
    assert not is_loopback(("10.0.0.7", 5000))
    assert not is_loopback(("::ffff:10.0.0.7", 5000, 0, 0))
    assert not is_loopback(("fe80::1%eth0", 5000, 0, 2))
    assert not is_loopback(None)  # a peer the socket cannot name (it left): refused
    assert not is_loopback("/run/kgate.sock")


def _own_non_loopback_address() -> str | None:
    """An address of this host that is not loopback (the route a packet to a public address takes)."""
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent by a UDP connect
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


async def test_post_reload_answers_with_the_outcome_and_refuses_other_methods_and_peers() -> None:
    import json

    outcomes = [Outcome(True, "filter chains replaced: c"), Outcome(False, "kgate.yaml: filters[0].name: no filter")]
    calls: list[int] = []

    async def reload() -> Outcome:
        calls.append(1)
        return outcomes[len(calls) - 1]

    server = AdminServer(HostPort("0.0.0.0", 0), Stub(), reload=reload)
    await server.start()
    port = server.port
    try:
        status, headers, body = await _raw(port, b"POST /reload HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert status == 200
        assert headers["content-type"] == "application/json"
        assert json.loads(body) == {"result": "success", "message": "filter chains replaced: c"}
        status, _h, body = await _raw(port, b"POST /reload HTTP/1.1\r\n\r\n")
        assert status == 500
        assert json.loads(body)["result"] == "failure"
        assert json.loads(body)["message"] == "kgate.yaml: filters[0].name: no filter"
        status, headers, _b = await _raw(port, b"GET /reload HTTP/1.1\r\n\r\n")
        assert status == 405
        assert headers["allow"] == "POST"
        assert len(calls) == 2  # GET reloaded nothing

        other = _own_non_loopback_address()
        if other is not None:  # a peer from this host's own non-loopback address is not loopback
            reader, writer = await asyncio.open_connection(other, port, local_addr=(other, 0))
            writer.write(b"POST /reload HTTP/1.1\r\n\r\n")
            data = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert data.startswith(b"HTTP/1.1 403 "), data
            assert len(calls) == 2
    finally:
        await server.close()


async def test_without_a_reload_action_reload_is_not_a_path() -> None:
    server = AdminServer(HostPort("127.0.0.1", 0), Stub())
    await server.start()
    try:
        assert (await _raw(server.port, b"POST /reload HTTP/1.1\r\n\r\n"))[0] == 404
    finally:
        await server.close()


def test_a_connection_open_at_shutdown_ends_without_a_traceback() -> None:
    """A probe connected but silent when kgate stops: the run's end cancels its handler. Python
    3.11's stream callback then calls ``task.exception()`` on the cancelled task, which raises and
    is logged as "Exception in callback" with a traceback (seen in a kgate log at SIGTERM)."""
    reported: list[dict[str, object]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: reported.append(context))
        server = AdminServer(HostPort("127.0.0.1", 0), Stub())
        await server.start()
        _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for _ in range(100):  # until the handler task waits for the request's head
            if len(asyncio.all_tasks()) > 1:
                break
            await asyncio.sleep(0.01)
        assert len(asyncio.all_tasks()) > 1, "the admin server never started a handler"
        await server.close()
        writer.close()
        # returning leaves the handler waiting: asyncio.run cancels it, as at kgate's shutdown

    asyncio.run(main())
    assert reported == []
