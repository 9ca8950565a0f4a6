"""The addresses this process listens on, so kgate never forwards a connection to itself.

A connection kgate opens upstream that lands on one of its own listeners is accepted by kgate,
which opens another, and so on: a storm of self-connections that exhausts file descriptors in
seconds. ``config.self_address`` refuses such an ``upstream`` at load time by comparing names;
this registry holds what the kernel really bound, for the two run-time checks:

- ``learned_is_own``: a broker address read from a response (before it is stored as a node's
  route) that names a kgate listener or a client-facing kgate address;
- ``is_self_connection``: an upstream socket whose peer is one of the bound listeners, known
  from the connected socket's addresses, so a DNS name or LAN address leading back here is
  caught too.

One registry per process: every virtual cluster (and every kgate embedded in the same process)
registers its listeners, since a loop through another cluster's listener is still a loop.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from kgate.config.self_address import WILDCARD_HOSTS, loops_back, normalise_host


def _ip(host: str) -> str:
    """The canonical text of an IP literal (``::ffff:127.0.0.1`` -> ``127.0.0.1``)."""
    try:
        addr = ipaddress.ip_address(normalise_host(host).split("%", 1)[0])
    except ValueError:
        return normalise_host(host)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return str(addr)


class OwnListeners:
    """Bound (host, port) pairs and the client-facing hosts of this process's listeners."""

    def __init__(self) -> None:
        self._bound: dict[tuple[str, int], int] = {}  # (bind ip, port) -> reference count
        self._advertised: dict[str, int] = {}  # client-facing host -> reference count
        self._self_targets: set[tuple[str, int]] = set()  # upstream targets found to lead back here
        self._learned: dict[tuple[str, int], bool] = {}  # learned_is_own answers, while listeners stay
        self._ports: frozenset[int] = frozenset()  # the bound ports, checked before any address is parsed

    def add(self, sock: socket.socket, advertised_host: str) -> tuple[str, int]:
        """Record a bound listening socket; returns the key to ``remove`` it with."""
        name = sock.getsockname()
        key = (_ip(str(name[0])), int(name[1]))
        self._bound[key] = self._bound.get(key, 0) + 1
        self._ports = frozenset(port for _host, port in self._bound)
        self._learned.clear()
        adv = normalise_host(advertised_host)
        self._advertised[adv] = self._advertised.get(adv, 0) + 1
        return key

    def remove(self, key: tuple[str, int], advertised_host: str) -> None:
        self._learned.clear()
        _release(self._bound, key)
        self._ports = frozenset(port for _host, port in self._bound)
        _release(self._advertised, normalise_host(advertised_host))

    @property
    def ports(self) -> set[int]:
        return set(self._ports)

    def learned_is_own(self, host: str, port: int) -> bool:
        """Whether a broker address from a response names one of kgate's own listeners.

        Asked for every broker of every Metadata answer, so answers are memoised until the set of
        listeners changes (a fleet has few broker addresses; parsing them each time costs more than a lookup).
        """
        key = (host, port)
        hit = self._learned.get(key)
        if hit is None:
            listeners = [(h, p, p) for h, p in self._bound]
            hit = loops_back(key, listeners, tuple(self._advertised)) is not None
            if len(self._learned) >= 4096:
                self._learned.clear()  # bounded even if a broker sends ever-new addresses
            self._learned[key] = hit
        return hit

    def mark_self_target(self, host: str, port: int) -> None:
        """Remember a target that led back to kgate, so that it is never connected to again.

        The connection kgate aborts was already accepted by its own listener, whose connection
        would try the same target: without this memory each link of that chain connects once
        more. With it the chain ends at the next link (its connect is refused before it starts).
        Bounded: targets come from the config and from broker addresses.
        """
        self._self_targets.add((normalise_host(host), port))

    def known_self_target(self, host: str, port: int) -> bool:
        """Asked before every upstream connect; almost always with no such target known."""
        return bool(self._self_targets) and (normalise_host(host), port) in self._self_targets

    def own_port(self, port: int) -> bool:
        """Whether ``port`` is one a kgate listener is bound to: a connection to any other port is no
        loop, so a caller that knows the port it connected to asks this first (no address asked of
        the transport, which uvloop formats into a string each time)."""
        return port in self._ports

    def connected_to_self(self, transport: Any) -> bool:
        """``is_self_connection`` for a connected asyncio transport.

        A transport the peer already closed has no addresses left (uvloop even raises instead of
        answering None): it is no loop, and the caller drops it as closed.

        The peer's port is looked at first: it is almost never one of kgate's, and then the local
        address is not needed (a ``get_extra_info`` and a call fewer per upstream connection;
        uvloop answers both addresses without a syscall of its own, strace shows the same count).
        """
        try:
            peer = transport.get_extra_info("peername")
            if not isinstance(peer, tuple) or int(peer[1]) not in self._ports:
                return False
            return self.is_self_connection(transport.get_extra_info("sockname"), peer)
        except (AttributeError, OSError):
            return False

    def is_self_connection(self, local: Any, peer: Any) -> bool:
        """Whether a connected upstream socket (its sockname and peername) reached a kgate listener.

        A listener bound to a wildcard address accepts on every local address; a peer address is
        local when it is a loopback address or the very address the connection leaves from (the
        kernel routes a connection to one of this host's addresses from that address).
        """
        if not isinstance(peer, tuple) or not isinstance(local, tuple):
            return False  # not an inet socket (tests with pipes, unix sockets): nothing to compare
        if int(peer[1]) not in self._ports:
            return False  # every upstream connection asks: parsing their addresses was a visible part of each set-up
        pip, pport = _ip(str(peer[0])), int(peer[1])
        for bip, bport in self._bound:
            if bport != pport:
                continue
            if bip == pip:
                return True
            if bip in WILDCARD_HOSTS and (pip == _ip(str(local[0])) or ipaddress.ip_address(pip).is_loopback):
                return True
        return False


#: the process-wide registry every virtual cluster registers its listeners in
OWN_LISTENERS = OwnListeners()


def _release(table: dict[Any, int], key: Any) -> None:
    """One user fewer of ``key``; forget it at zero."""
    n = table.get(key, 0) - 1
    if n > 0:
        table[key] = n
    else:
        table.pop(key, None)
