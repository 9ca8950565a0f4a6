"""The connection watchers' samples (tests/support/netconn.py): the kernel's socket dump sees what
/proc/net/tcp lists, so the no-bypass checks built on it see what they saw before."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from support import netconn

LIVE = ("ESTABLISHED", "SYN_SENT", "SYN_RECV")


@pytest.fixture
def pairs() -> Iterator[list[socket.socket]]:
    """An IPv4 and an IPv6 loopback connection (both ends in this process), and their listeners."""
    held: list[socket.socket] = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        listener = socket.socket(family)
        listener.bind((host, 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname()[:2])
        server, _ = listener.accept()
        held += [listener, client, server]
    yield held
    for s in held:
        s.close()


def test_the_dump_answers_what_proc_net_tcp_lists(pairs: list[socket.socket]) -> None:
    """Every connecting or established socket of this process, with its addresses, state and inode,
    and no other: the listeners are not there, and the four ends of the two connections are."""
    netconn._diag_dump(socket.AF_INET)  # the kernel answers here (OSError if not): not the fallback
    from_proc = {c for c in netconn.tcp_connections() if c.state in LIVE}
    from_dump = set(netconn.live_connections())
    assert from_dump == from_proc
    ports = {s.getsockname()[1] for s in pairs}
    assert len([c for c in from_dump if c.local[1] in ports]) == 4, from_dump
    assert {c.local[0] for c in from_dump if c.local[1] in ports} == {"127.0.0.1", "::1"}


def test_a_watcher_sees_a_connection_and_names_a_forbidden_one(pairs: list[socket.socket]) -> None:
    listener4 = pairs[0]
    port = listener4.getsockname()[1]
    with netconn.ConnectionWatcher({port}) as watch:
        pass
    assert port in watch.seen
    with pytest.raises(AssertionError, match="connected directly"):
        watch.assert_clean()
