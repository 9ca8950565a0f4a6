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
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from support.inproc_kgate import InprocKgate, make_config
from support.wire import RawClient


@pytest.fixture
def kgate(tansu: Any) -> Iterator[InprocKgate]:
    k = InprocKgate(make_config(tansu.bootstrap)).start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _the_connection(k: InprocKgate) -> weakref.ref[Any]:
    """A weak reference to the one client connection kgate has open."""
    deadline = time.monotonic() + 5
    while True:
        conns = k.call(lambda: list(k.cluster.connections))
        if conns:
            (conn,) = conns
            return weakref.ref(conn)
        assert time.monotonic() < deadline, "kgate never registered the connection"
        time.sleep(0.01)


def _gone(ref: weakref.ref[Any], timeout: float = 8.0) -> bool:
    """Whether the object is freed within ``timeout`` (the broker side closes after the gentle close's FIN)."""
    deadline = time.monotonic() + timeout
    while ref() is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_connection_the_client_closes_is_freed_without_the_collector(kgate: InprocKgate, no_collector: None) -> None:
    with RawClient(kgate.port) as c:
        c.api_versions()
        c.metadata()
        ref = _the_connection(kgate)
    assert _gone(ref), "the connection stayed in memory after it closed: a reference cycle is back"


def test_a_connection_kgate_closes_is_freed_without_the_collector(kgate: InprocKgate, no_collector: None) -> None:
    """kgate refuses a frame with a negative size: its own close, then the client transport's loss."""
    with RawClient(kgate.port) as c:
        c.api_versions()
        ref = _the_connection(kgate)
        c.send(b"\xff\xff\xff\xf0" + b"\x00" * 12)
        assert c.closed_by_peer()
    assert _gone(ref), "the connection stayed in memory after kgate closed it: a reference cycle is back"
