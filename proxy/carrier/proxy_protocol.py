"""The PROXY protocol header (HAProxy's v1 text and v2 binary forms), sans-IO.

A TCP load balancer in front of kgate hides the client's address: kgate sees the balancer's.
With the PROXY protocol the balancer sends one header before the client's first byte, naming
the original source and destination. This module parses that header and nothing else: bytes
in, a ``ProxyHeader`` (or "need more", or ``ProxyProtocolError``) out, no sockets.

``safe_read_size`` says how many more bytes may be read without reading past the header: the
header comes before the client's TLS ClientHello, and asyncio's ``start_tls`` cannot be handed
bytes already read, so the carrier (proxy/carrier/front_door.py) reads the header exactly.

Spec: https://www.haproxy.org/download/3.0/doc/proxy-protocol.txt. Per the spec: a LOCAL command
(v2; a balancer's own health check) and the UNKNOWN / UNSPEC families mean "use the real
connection's addresses" (``source`` is None); a v1 line is at most 107 bytes; v2 TLVs are skipped.
Bounds: v2 headers longer than ``MAX_V2_HEADER`` bytes are refused (AWS and GCP balancers send
well under 300; the spec allows 64 KiB of TLVs, which nobody needs a proxy to hold per connection).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

V1_PREFIX = b"PROXY "
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_MAX = 107  # the spec's longest line, CRLF included
MAX_V2_HEADER = 4096
_V2_FIXED = 16
# Shortest complete v1 lines per protocol word, to read ahead in few steps without overshooting.
_V1_MIN_TOTAL = {b"TCP4": len(b"PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n"), b"TCP6": len(b"PROXY TCP6 :: :: 0 0\r\n")}
_V1_MIN = len(b"PROXY UNKNOWN\r\n")


class ProxyProtocolError(ValueError):
    """A malformed or unacceptable header: the connection it came on is closed, nothing else."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int
    """1 or 2."""
    length: int
    """Bytes the header took; the client's own bytes start after it."""
    source: tuple[str, int] | None
    """The original client (host, port); None: use the connection's own peer (LOCAL, UNKNOWN)."""
    destination: tuple[str, int] | None = None

    @property
    def source_text(self) -> str | None:
        """``host:port`` (``[v6]:port``) as kgate writes client addresses, or None."""
        if self.source is None:
            return None
        host, port = self.source
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _accepts(mode: str, version: int) -> bool:
    return mode == "any" or mode == f"v{version}"


def _which(buf: bytes | bytearray, mode: str) -> int:
    """1 or 2 once the version's prefix is complete, 0 before; raises if it cannot be a header.

    The two forms differ in their first byte ("P" against CR), so one byte picks the candidate.
    """
    n = len(buf)
    if buf[0] == V2_SIGNATURE[0]:
        version, prefix = 2, V2_SIGNATURE
    elif buf[0] == V1_PREFIX[0]:
        version, prefix = 1, V1_PREFIX
    else:
        raise ProxyProtocolError(f"no PROXY protocol header (expected {mode}); first bytes {bytes(buf[:16])!r}")
    if not _accepts(mode, version):
        raise ProxyProtocolError(f"a PROXY protocol v{version} header, but this listener accepts {mode} only")
    if not prefix.startswith(bytes(buf[: len(prefix)])):
        raise ProxyProtocolError(f"not a PROXY protocol v{version} header; first bytes {bytes(buf[:16])!r}")
    return version if n >= len(prefix) else 0


def safe_read_size(buf: bytes | bytearray, mode: str) -> int:
    """How many more bytes can be read without reading past the header (0 once it is complete).

    Raises ``ProxyProtocolError`` as soon as the bytes cannot start an acceptable header.
    """
    n = len(buf)
    if not n:
        return _V2_FIXED if mode == "v2" else _V1_MIN  # no header is shorter than either
    version = _which(buf, mode)
    if version == 0:
        return (_V2_FIXED if buf[0] == V2_SIGNATURE[0] else _V1_MIN) - n
    if version == 2:
        if n < _V2_FIXED:
            return _V2_FIXED - n
        total = _V2_FIXED + int.from_bytes(buf[14:16], "big")
        if total > MAX_V2_HEADER:
            raise ProxyProtocolError(f"v2 header of {total} bytes is longer than kgate accepts ({MAX_V2_HEADER})")
        return max(total - n, 0)
    if buf.find(b"\r\n") >= 0:
        return 0
    if b"\n" in buf:
        raise ProxyProtocolError("v1 header line ends with LF, not CRLF")
    if n >= V1_MAX:
        raise ProxyProtocolError(f"v1 header without CRLF in its first {V1_MAX} bytes")
    least = _V1_MIN_TOTAL.get(bytes(buf[6:10]), _V1_MIN) if n >= 10 else _V1_MIN
    return min(max(least - n, 1 if buf.endswith(b"\r") else 2), V1_MAX - n)


def parse(buf: bytes | bytearray, mode: str) -> ProxyHeader | None:
    """The header at the start of ``buf``, or None if more bytes are needed.

    ``mode`` is v1, v2 or any. Raises ``ProxyProtocolError`` for anything malformed, a version the
    listener does not accept, or a header over its size bound.
    """
    if not buf or safe_read_size(buf, mode) > 0:
        return None
    if buf[0] == V2_SIGNATURE[0]:
        return _parse_v2(bytes(buf[: _V2_FIXED + int.from_bytes(buf[14:16], "big")]))
    end = buf.find(b"\r\n")
    return _parse_v1(bytes(buf[:end]), end + 2)


def _port(text: bytes) -> int:
    if not text.isdigit() or (len(text) > 1 and text.startswith(b"0")) or len(text) > 5:
        raise ProxyProtocolError(f"v1 port {text!r} is not a decimal 0-65535 without leading zeros")
    port = int(text)
    if port > 65535:
        raise ProxyProtocolError(f"v1 port {port} out of range")
    return port


def _parse_v1(line: bytes, length: int) -> ProxyHeader:
    parts = line.split(b" ")
    if len(parts) < 2:
        raise ProxyProtocolError("v1 header without a protocol")
    proto = parts[1]
    if proto == b"UNKNOWN":
        return ProxyHeader(1, length, None)  # the rest of the line is to be ignored (spec 2.1)
    if proto not in (b"TCP4", b"TCP6"):
        raise ProxyProtocolError(f"v1 protocol {proto[:16]!r} is not TCP4, TCP6 or UNKNOWN")
    if len(parts) != 6:
        raise ProxyProtocolError(f"v1 {proto.decode()} header needs 4 fields after the protocol, got {len(parts) - 2}")
    kind = ipaddress.IPv4Address if proto == b"TCP4" else ipaddress.IPv6Address
    try:
        src = kind(parts[2].decode("ascii"))
        dst = kind(parts[3].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        shown = f"{parts[2][:46]!r} {parts[3][:46]!r}"
        raise ProxyProtocolError(f"v1 {proto.decode()} addresses {shown} are not valid") from None
    return ProxyHeader(1, length, (str(src), _port(parts[4])), (str(dst), _port(parts[5])))


def _parse_v2(header: bytes) -> ProxyHeader:
    ver_cmd, fam = header[12], header[13]
    if ver_cmd >> 4 != 2:
        raise ProxyProtocolError(f"v2 signature with version {ver_cmd >> 4}, not 2")
    command = ver_cmd & 0x0F
    length = len(header)
    if command == 0:  # LOCAL: the balancer's own connection (health check); use the real addresses
        return ProxyHeader(2, length, None)
    if command != 1:
        raise ProxyProtocolError(f"v2 command {command} is neither LOCAL (0) nor PROXY (1)")
    family, transport = fam >> 4, fam & 0x0F
    if transport not in (0, 1):
        raise ProxyProtocolError(f"v2 transport {transport} is not STREAM: not a TCP client")
    body = header[_V2_FIXED:]
    if family == 1:
        if len(body) < 12:
            raise ProxyProtocolError(f"v2 INET address block of {len(body)} bytes (needs 12)")
        src = ipaddress.IPv4Address(body[0:4])
        dst = ipaddress.IPv4Address(body[4:8])
        sport, dport = int.from_bytes(body[8:10], "big"), int.from_bytes(body[10:12], "big")
        return ProxyHeader(2, length, (str(src), sport), (str(dst), dport))
    if family == 2:
        if len(body) < 36:
            raise ProxyProtocolError(f"v2 INET6 address block of {len(body)} bytes (needs 36)")
        src6 = ipaddress.IPv6Address(body[0:16])
        dst6 = ipaddress.IPv6Address(body[16:32])
        sport, dport = int.from_bytes(body[32:34], "big"), int.from_bytes(body[34:36], "big")
        return ProxyHeader(2, length, (str(src6), sport), (str(dst6), dport))
    if family in (0, 3):  # UNSPEC, UNIX: no IP address to report; the real connection's is used
        return ProxyHeader(2, length, None)
    raise ProxyProtocolError(f"v2 address family {family} is unknown")


class SourceFilter:
    """Which peers may send a header: everyone else is refused at accept (spec: never guess)."""

    __slots__ = ("_nets",)

    def __init__(self, cidrs: tuple[str, ...]) -> None:
        self._nets = tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)

    def trusted(self, host: str) -> bool:
        try:
            addr = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr.version == net.version and addr in net for net in self._nets)
