"""The PROXY protocol parser (proxy/carrier/proxy_protocol.py): spec cases, and hypothesis for what a
hostile or broken balancer can send. Two properties matter to the carrier: reading by
``safe_read_size`` never takes a byte past the header (the TLS ClientHello behind it must stay
in the socket), and no input raises anything but ``ProxyProtocolError``."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kgate.proxy.carrier.proxy_protocol import (
    MAX_V2_HEADER,
    V1_MAX,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyProtocolError,
    SourceFilter,
    parse,
    safe_read_size,
)

# deadline=None throughout: the parser is pure; a wall-clock deadline measures the shared machine
TRAILER = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # the start of a TLS ClientHello


def read_exactly(stream: bytes, mode: str) -> tuple[ProxyHeader | None, int]:
    """Read as the front door does: only ``safe_read_size`` bytes at a time, in the worst chunking."""
    buf = b""
    while True:
        need = safe_read_size(buf, mode)
        if need == 0:
            return parse(buf, mode), len(buf)
        if len(buf) >= len(stream):
            return None, len(buf)
        buf += stream[len(buf) : len(buf) + need]


def v2(cmd: int, fam: int, body: bytes) -> bytes:
    return V2_SIGNATURE + bytes([0x20 | cmd, fam]) + struct.pack(">H", len(body)) + body


ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ports = st.integers(0, 65535)


@settings(deadline=None)
@given(src=ipv4, dst=ipv4, sport=ports, dport=ports)
def test_v1_tcp4_roundtrip_never_overreads(src, dst, sport, dport):
    header = f"PROXY TCP4 {src} {dst} {sport} {dport}\r\n".encode()
    got, consumed = read_exactly(header + TRAILER, "any")
    assert consumed == len(header)
    assert got == ProxyHeader(1, len(header), (src, sport), (dst, dport))


@settings(deadline=None)
@given(src=ipv6, dst=ipv6, sport=ports, dport=ports)
def test_v1_tcp6_roundtrip(src, dst, sport, dport):
    header = f"PROXY TCP6 {src} {dst} {sport} {dport}\r\n".encode()
    got, consumed = read_exactly(header + TRAILER, "v1")
    assert consumed == len(header) <= V1_MAX
    assert got is not None
    assert got.source == (str(ipaddress.ip_address(src)), sport)
    assert got.source_text == f"[{got.source[0]}]:{sport}"


@settings(deadline=None)
@given(src=st.one_of(ipv4, ipv6), sport=ports, tlvs=st.binary(max_size=300))
def test_v2_roundtrip_with_tlvs(src, sport, tlvs):
    ip = ipaddress.ip_address(src)
    other = ipaddress.ip_address("10.0.0.1" if ip.version == 4 else "fd00::1")
    body = ip.packed + other.packed + struct.pack(">HH", sport, 9092) + tlvs
    header = v2(1, 0x11 if ip.version == 4 else 0x21, body)
    got, consumed = read_exactly(header + TRAILER, "any")
    assert consumed == len(header)
    assert got is not None
    assert got.source == (str(ip), sport)
    assert got.destination == (str(other), 9092)


def test_unknown_local_and_unspec_use_the_real_address():
    assert parse(b"PROXY UNKNOWN\r\n", "v1") == ProxyHeader(1, 15, None)
    assert parse(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", "any") == ProxyHeader(1, 35, None)
    assert parse(v2(0, 0x00, b""), "v2") == ProxyHeader(2, 16, None)  # LOCAL
    assert parse(v2(0, 0x11, b"\x00" * 12), "v2") == ProxyHeader(2, 28, None)  # LOCAL ignores the block
    assert parse(v2(1, 0x00, b""), "v2") == ProxyHeader(2, 16, None)  # UNSPEC
    assert parse(v2(1, 0x31, b"\x00" * 216), "v2") == ProxyHeader(2, 232, None)  # AF_UNIX: no IP to report


@pytest.mark.parametrize(
    ("data", "mode", "problem"),
    [
        (b"GET / HTTP/1.1\r\n", "any", "no PROXY protocol header"),
        (b"\x00\x00\x00\x10\x00\x12", "any", "no PROXY protocol header"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "v2", "accepts v2 only"),
        (v2(1, 0x11, b"\x00" * 12), "v1", "accepts v1 only"),
        (b"PROXZ", "any", "not a PROXY protocol v1 header"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "any", "LF, not CRLF"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "any", "leading zeros"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", "any", "out of range"),
        (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "any", "not valid"),
        (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "any", "not valid"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "any", "4 fields"),
        (b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "any", "not TCP4, TCP6 or UNKNOWN"),
        (b"PROXY " + b"1" * 120, "any", "without CRLF"),
        (v2(1, 0x12, b"\x00" * 12), "any", "not STREAM"),
        (v2(2, 0x11, b"\x00" * 12), "any", "neither LOCAL"),
        (v2(1, 0x11, b"\x00" * 11), "any", "needs 12"),
        (v2(1, 0x21, b"\x00" * 35), "any", "needs 36"),
        (v2(1, 0x41, b""), "any", "family 4"),
        (V2_SIGNATURE + b"\x31\x11\x00\x00", "any", "version 3"),
        (V2_SIGNATURE + b"\x21\x11" + struct.pack(">H", MAX_V2_HEADER), "any", "longer than kgate accepts"),
    ],
)
def test_malformed(data, mode, problem):
    with pytest.raises(ProxyProtocolError, match=problem):
        read_exactly(data + TRAILER, mode)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=300), mode=st.sampled_from(["v1", "v2", "any"]))
@example(data=V2_SIGNATURE, mode="any")
@example(data=b"PROXY ", mode="any")
def test_arbitrary_bytes_only_ever_raise_protocol_errors(data, mode):
    try:
        got, consumed = read_exactly(data, mode)
    except ProxyProtocolError:
        return
    assert consumed <= len(data) or got is None
    if got is not None:
        assert got.length == consumed


def _mutations() -> st.SearchStrategy[bytes]:
    good = [
        b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n",
        b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n",
        b"PROXY UNKNOWN\r\n",
        v2(1, 0x11, bytes(range(12)) + b"\x03\x00\x04abcd"),
        v2(1, 0x21, bytes(range(36))),
        v2(0, 0x00, b""),
    ]

    def mutate(args: tuple[int, int, int, int]) -> bytes:
        which, pos, byte, cut = args
        h = bytearray(good[which % len(good)])
        h[pos % len(h)] = byte
        return bytes(h[: max(1, len(h) - cut)])

    return st.tuples(st.integers(0, 5), st.integers(0, 300), st.integers(0, 255), st.integers(0, 8)).map(mutate)


@settings(max_examples=500, deadline=None)
@given(data=_mutations())
def test_mutated_headers_never_crash_nor_overread(data):
    stream = data + TRAILER
    try:
        got, consumed = read_exactly(stream, "any")
    except ProxyProtocolError:
        return
    if got is not None:
        assert consumed == got.length <= len(data) + len(TRAILER)
        # never reads into the ClientHello unless the mutated header really extends into it
        assert stream[:consumed].startswith(data[: min(consumed, len(data))])


def test_source_filter():
    f = SourceFilter(("127.0.0.0/8", "::1/128", "10.1.0.0/16"))
    assert f.trusted("127.0.0.1")
    assert f.trusted("::1")
    assert f.trusted("10.1.200.3")
    assert f.trusted("::ffff:10.1.0.9")  # an IPv4 peer on a dual-stack socket
    assert not f.trusted("10.2.0.1")
    assert not f.trusted("2001:db8::1")
    assert not f.trusted("")
    assert not f.trusted("x")
