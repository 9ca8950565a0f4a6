"""The run-time registry of kgate's own listeners (real sockets bound on loopback)."""

from __future__ import annotations

import socket

from kgate.proxy.carrier.own_listeners import OwnListeners


def _listener(host: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((host, 0))
    s.listen()
    return s


def test_connection_to_a_registered_listener_is_a_self_connection() -> None:
    own = OwnListeners()
    lst = _listener()
    key = own.add(lst, "127.0.0.1")
    port = lst.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port)) as c:
        assert own.is_self_connection(c.getsockname(), c.getpeername())
    # the same check through an IPv4-mapped IPv6 address (what a name may resolve to)
    with socket.socket(socket.AF_INET6) as c6:
        c6.connect(("::ffff:127.0.0.1", port))
        assert own.is_self_connection(c6.getsockname(), c6.getpeername())
    other = _listener()
    with socket.create_connection(("127.0.0.1", other.getsockname()[1])) as c:
        assert not own.is_self_connection(c.getsockname(), c.getpeername())
    own.remove(key, "127.0.0.1")
    with socket.create_connection(("127.0.0.1", port)) as c:
        assert not own.is_self_connection(c.getsockname(), c.getpeername())
    lst.close()
    other.close()


def test_wildcard_listener_is_reached_through_loopback() -> None:
    own = OwnListeners()
    lst = _listener("0.0.0.0")
    own.add(lst, "kgate.example")
    port = lst.getsockname()[1]
    with socket.create_connection(("127.0.0.2", port)) as c:
        assert own.is_self_connection(c.getsockname(), c.getpeername())
    assert own.learned_is_own("127.0.0.9", port)
    assert own.learned_is_own("kgate.example", port)  # the client-facing name kgate hands out
    assert not own.learned_is_own("broker.example", port)
    lst.close()


def test_self_targets_are_remembered() -> None:
    own = OwnListeners()
    assert not own.known_self_target("Host", 1)
    own.mark_self_target("host", 1)
    assert own.known_self_target("HOST", 1)
    assert not own.is_self_connection(None, None)  # non-inet sockets: nothing to compare
