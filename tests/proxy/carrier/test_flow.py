"""ReadGate against real event loops: a pause made in ``connection_made`` must hold.

uvloop starts reading an accepted transport after ``connection_made`` returns, undoing a pause
made there; kgate pauses every new client until its upstream is connected, and the gate then
believed itself paused while the client was read without limit (2.3 GiB in 30 s from one
pipelining client). Both loops are checked: the bug was uvloop's behaviour, the fix must not
depend on it.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvloop

from kgate.proxy.carrier.flow import ReadGate


class Gated(asyncio.Protocol):
    def __init__(self) -> None:
        self.gate = ReadGate()
        self.received = 0
        self.made: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.gate.pause("connecting")
        self.gate.attach(transport)  # type: ignore[arg-type]
        self.made.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > 100_000:
            self.gate.pause("full")  # a second reason while the first still holds


async def _scenario() -> tuple[int, int, int]:
    loop = asyncio.get_running_loop()
    protos: list[Gated] = []
    server = await loop.create_server(lambda: protos.append(Gated()) or protos[-1], "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    client.setblocking(False)
    await asyncio.sleep(0.05)
    p = protos[0]
    await p.made
    for _ in range(20):
        try:
            client.send(b"x" * 65536)
        except BlockingIOError:
            pass
        await asyncio.sleep(0.01)
    while_paused = p.received
    p.gate.resume("connecting")  # reading starts; at 100 kB the gate pauses for "full"
    await asyncio.sleep(0.2)
    after_full = p.received
    for _ in range(10):
        try:
            client.send(b"x" * 65536)
        except BlockingIOError:
            pass
        await asyncio.sleep(0.01)
    still = p.received
    client.close()
    server.close()
    return while_paused, after_full, still


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_pause_in_connection_made_holds_and_a_second_reason_pauses(loop_kind: str) -> None:
    run = uvloop.run if loop_kind == "uvloop" else asyncio.run
    while_paused, after_full, still = run(_scenario())
    assert while_paused == 0, f"{while_paused} bytes read while the gate was paused in connection_made"
    assert after_full > 100_000
    assert still == after_full, "reading went on after the gate paused for a second reason"
