"""Whether an upstream address is one of kgate's own listeners (a forwarding loop).

A kgate that forwards to itself multiplies every connection: each accepted connection opens
another to the same listener, thousands per second until the process runs out of file
descriptors (about 20,000 in 2.5 s were measured when a rewritten Metadata answer taught kgate
its own address). The check runs three times, each with what it can know:

- at load time, on the configured ``upstream`` lists (no DNS: host names compared as written,
  loopback names and wildcard listeners treated as this machine);
- when a broker address is learned from a response (same static comparison, against every
  port kgate has bound and every address it hands to clients);
- after an upstream connect, on the socket's real addresses (``proxy.carrier.own_listeners``), which
  catches what names hide (a DNS name or a LAN address that leads back to kgate).

Pure functions only: no sockets, no resolution.
"""

from __future__ import annotations

import ipaddress

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "*"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def normalise_host(host: str) -> str:
    """Lower case, without IPv6 brackets (``[::1]`` and ``::1`` name the same host)."""
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    return h


def is_loopback(host: str) -> bool:
    """A loopback name or literal (127.0.0.0/8, ::1): always this machine."""
    h = normalise_host(host)
    if h in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def same_host(listen_host: str, target_host: str) -> bool:
    """Whether connecting to ``target_host`` can reach a socket bound to ``listen_host``.

    Conservative in the direction that matters: a wildcard listener accepts on every local
    address, so any loopback target reaches it; a loopback listener is reached by loopback
    targets only (127.0.0.1 and 127.0.0.2 are different addresses to the kernel, but a name
    like ``localhost`` may resolve to either, so every loopback form counts as the same).
    """
    lh, th = normalise_host(listen_host), normalise_host(target_host)
    if lh == th:
        return True
    if lh in WILDCARD_HOSTS:
        return is_loopback(th) or th in WILDCARD_HOSTS
    return is_loopback(lh) and is_loopback(th)


def loops_back(
    target: tuple[str, int],
    listeners: list[tuple[str, int, int]],
    advertised_hosts: tuple[str, ...] = (),
) -> tuple[str, int, int] | None:
    """The listener (host, first port, last port) that ``target`` would reach, or None.

    ``listeners`` are kgate's own port ranges per bind host; an ``advertised_hosts`` entry is a
    name clients use to reach kgate, so a target under that name and one of kgate's ports is
    kgate itself too (that is the address a rewritten response carries).
    """
    host, port = target
    for lhost, lo, hi in listeners:
        if not lo <= port <= hi:
            continue
        if same_host(lhost, host) or any(normalise_host(a) == normalise_host(host) for a in advertised_hosts):
            return lhost, lo, hi
    return None
