"""proxy/carrier/upstream_client.py against a broker that resets every connection: only UpstreamError comes out.

A full test run once ended kgate's shutdown with exit 1: the broker's reset had closed the
transport before the ApiVersions handshake was written, uvloop raised RuntimeError ("the handler
is closed"), and it went up through the readiness probe. The stand-in broker is a plain socket
server (tests/support/resetting_server.py): no real broker resets on demand.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvloop
from support.resetting_server import ResettingServer

from kgate.api import ApiKey
from kgate.codec import api
from kgate.proxy.carrier.upstream_client import UpstreamClient, UpstreamError


def test_a_request_on_a_closed_transport_is_an_upstream_error() -> None:
    """The deterministic half: the write finds the transport closed (closed here before the write).

    The peer is a listening socket that never accepts (the kernel completes the handshake from its
    backlog): connecting to the resetting server could itself fail with the reset.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    async def go() -> None:
        loop = asyncio.get_running_loop()
        transport, _protocol = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        transport.close()
        await asyncio.sleep(0)
        client = UpstreamClient(lambda: [("127.0.0.1", port)])
        with pytest.raises(UpstreamError, match="the connection to the broker is closed"):
            client._send(transport, ApiKey.API_VERSIONS, 0, api.API_INFO[ApiKey.API_VERSIONS].request_class())
        assert client._pending == {}  # nothing left waiting for an answer that cannot come
        client.close()

    try:
        uvloop.run(go())
    finally:
        listener.close()


def test_requests_to_a_resetting_broker_only_ever_raise_upstream_error() -> None:
    """The race as it happens: 300 lookups, each one a fresh connection the broker resets.

    The reset lands before the handshake's write only now and then (the first test is the
    deterministic check); this one shows that every other way the reset can land also ends as an
    UpstreamError.
    """
    server = ResettingServer()
    errors: list[BaseException] = []

    async def go() -> None:
        for _ in range(300):
            client = UpstreamClient(lambda: [("127.0.0.1", server.port)], connect_timeout_s=2)
            try:
                await client.request(ApiKey.METADATA, api.API_INFO[ApiKey.METADATA].request_class(topics=[]), lo=1)
            except UpstreamError:
                pass
            except BaseException as exc:  # what used to escape: RuntimeError from uvloop's write
                errors.append(exc)
            finally:
                client.close()

    try:
        uvloop.run(go())
    finally:
        server.close()
    assert server.accepted >= 300
    assert errors == []
