"""A finished connection is freed by reference counting, not left to the cycle collector.

The core and its carrier point at each other, so before ``ConnectionCore.detach`` every finished
connection (core, carrier, read gates, frame readers, deques, transports: ~33 tracked objects)
waited for a collection to find it, and those objects made the collections run. These tests run a
real kgate in-process in front of Tansu with the collector switched off: a closed connection must
go away on its own, however it ended.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import pytest
from support.inproc_kgate import InprocKgate, kgate_in_process  # noqa: F401  (the kgate fixture)
from support.wire import RawClient


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _the_connection(k: InprocKgate) -> int:
    """The id of the one client connection kgate has open.

    An id, not a weak reference: compiled (tools/compile_hot.py), ``ClientConnection`` is a mypyc
    class whose deallocator does not clear weak references, so a weak reference that outlives the
    connection dangles and reading it crashes the process. kgate itself keeps none.
    """
    deadline = time.monotonic() + 5
    while True:
        conns = k.call(lambda: list(k.cluster.connections))
        if conns:
            (conn,) = conns
            return id(conn)
        assert time.monotonic() < deadline, "kgate never registered the connection"
        time.sleep(0.01)


def _alive(conn_id: int) -> bool:
    """Whether the connection is still in memory (the collector tracks it; disabled, it only lists)."""
    return any(id(o) == conn_id and type(o).__name__ == "ClientConnection" for o in gc.get_objects())


def _gone(conn_id: int, timeout: float = 8.0) -> bool:
    """Whether the connection is freed within ``timeout`` (the broker side closes after the gentle close's FIN)."""
    deadline = time.monotonic() + timeout
    while _alive(conn_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_connection_the_client_closes_is_freed_without_the_collector(kgate: InprocKgate, no_collector: None) -> None:
    with RawClient(kgate.port) as c:
        c.api_versions()
        c.metadata()
        conn = _the_connection(kgate)
    assert _gone(conn), "the connection stayed in memory after it closed: a reference cycle is back"


def test_a_connection_kgate_closes_is_freed_without_the_collector(kgate: InprocKgate, no_collector: None) -> None:
    """kgate refuses a frame with a negative size: its own close, then the client transport's loss."""
    with RawClient(kgate.port) as c:
        c.api_versions()
        conn = _the_connection(kgate)
        c.send(b"\xff\xff\xff\xf0" + b"\x00" * 12)
        assert c.closed_by_peer()
    assert _gone(conn), "the connection stayed in memory after kgate closed it: a reference cycle is back"
