"""PROXY protocol v1/v2 on kgate's client listeners, against Tansu: the header's source address
reaches a filter (``ctx.connection.client_address``), a bad header closes only its own connection,
and a peer outside ``trusted_sources`` is refused. The test client plays the load balancer: it
sends the header, then Kafka requests (and with TLS, the handshake) on the same socket."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.certs import TestCA
from support.inproc_kgate import InprocKgate
from support.ports import HOST, free_port, free_port_range

from kgate.api import FORWARD, ApiKey, Filter, FilterContext, on_request
from kgate.codec import api
from kgate.codec.generated.api_keys import METADATA
from kgate.codec.headers import request_frame
from kgate.config import parse_config
from kgate.filters.registry import register_filter
from kgate.proxy.carrier.proxy_protocol import V2_SIGNATURE

pytestmark = pytest.mark.timeout(120)

SEEN: list[tuple[str, str | None]] = []


class AddressRecorder(Filter):
    name = "test-pp-address"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        SEEN.append((ctx.connection.client_address, ctx.connection.principal))
        return FORWARD


register_filter("test-pp-address", AddressRecorder)


def metadata_request(cid: int = 7) -> bytes:
    req = api.API_INFO[METADATA].request_class(topics=[], allow_auto_topic_creation=False)
    return request_frame(METADATA, 4, cid, "pp-test", api.request_header_version(METADATA, 4), req.encode(4))


def v1(src: str, sport: int, dst: str = "127.0.0.1", dport: int = 9092) -> bytes:
    fam = "TCP6" if ":" in src else "TCP4"
    return f"PROXY {fam} {src} {dst} {sport} {dport}\r\n".encode()


def v2(src: str | None, sport: int = 0, *, local: bool = False, tlvs: bytes = b"") -> bytes:
    import ipaddress

    if local:
        return V2_SIGNATURE + bytes([0x20, 0x00]) + struct.pack(">H", len(tlvs)) + tlvs
    assert src is not None
    ip = ipaddress.ip_address(src)
    if ip.version == 4:
        body = ip.packed + ipaddress.ip_address("127.0.0.1").packed + struct.pack(">HH", sport, 9092)
        fam = 0x11
    else:
        body = ip.packed + ipaddress.ip_address("::1").packed + struct.pack(">HH", sport, 9092)
        fam = 0x21
    body += tlvs
    return V2_SIGNATURE + bytes([0x21, fam]) + struct.pack(">H", len(body)) + body


def make_kgate(upstream: str, proxy_protocol: Any, tls: dict | None = None) -> InprocKgate:
    vc: dict[str, Any] = {
        "name": "default",
        "listen": f"{HOST}:{free_port()}",
        "advertised_host": HOST,
        "upstream": [upstream],
        "node_ports": {"base": free_port_range(256), "count": 256},
        "proxy_protocol": proxy_protocol,
    }
    if tls:
        vc["tls"] = tls
    cfg = parse_config(
        {
            "log_level": "debug",
            "proxy": {"drain_timeout_s": 2, "frame_timeout_s": 3},
            "virtual_clusters": [vc],
            "filters": [{"name": "test-pp-address"}],
        },
        "test",
    )
    return InprocKgate(cfg).start()


@pytest.fixture
def kgate_any(tansu):
    k = make_kgate(tansu.bootstrap, "any")
    yield k
    k.stop()


def exchange(sock: socket.socket, payload: bytes, *, trickle: bool = False) -> bytes:
    """Send, then read one response frame (b'' if kgate closed or reset the connection)."""
    try:
        return _exchange(sock, payload, trickle)
    except (ConnectionResetError, BrokenPipeError):
        return b""


def _exchange(sock: socket.socket, payload: bytes, trickle: bool) -> bytes:
    if trickle:
        for i in range(len(payload)):
            sock.sendall(payload[i : i + 1])
            time.sleep(0.002)
    else:
        sock.sendall(payload)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return b""
        body += chunk
    return head + body


def connect(port: int) -> socket.socket:
    s = socket.create_connection((HOST, port), timeout=10)
    return s


def test_v1_address_reaches_filter_even_byte_by_byte(kgate_any):
    SEEN.clear()
    with connect(kgate_any.port) as s:
        assert exchange(s, v1("203.0.113.7", 40000) + metadata_request(), trickle=True)
    assert SEEN == [("203.0.113.7:40000", None)]


def test_v2_ipv4_ipv6_tlvs_and_local(kgate_any):
    SEEN.clear()
    aws_tlv = b"\xea" + struct.pack(">H", 23) + b"\x01" + b"vpce-0123456789abcdef0"  # AWS NLB's VPC endpoint id
    with connect(kgate_any.port) as s:
        assert exchange(s, v2("198.51.100.9", 1234, tlvs=aws_tlv) + metadata_request())
    with connect(kgate_any.port) as s:
        assert exchange(s, v2("2001:db8::1", 5555) + metadata_request())
    with connect(kgate_any.port) as s:  # LOCAL (a balancer's health check): the real address
        own = f"{HOST}:{s.getsockname()[1]}"
        assert exchange(s, v2(None, local=True) + metadata_request())
    assert SEEN == [("198.51.100.9:1234", None), ("[2001:db8::1]:5555", None), (own, None)]


def test_malformed_header_closes_only_that_connection(kgate_any):
    SEEN.clear()
    bystander = connect(kgate_any.port)
    assert exchange(bystander, v1("192.0.2.1", 1) + metadata_request())
    bad = [
        b"PROXY TCP4 999.1.1.1 10.0.0.1 1 2\r\n",
        b"PROXY TCP4 1.1.1.1 10.0.0.1 1\r\n",
        b"PROXY TCP9 1.1.1.1 10.0.0.1 1 2\r\n",
        b"PROXY " + b"A" * 200,
        V2_SIGNATURE + bytes([0x21, 0x12]) + struct.pack(">H", 12) + b"\x00" * 12,  # DGRAM
        V2_SIGNATURE + bytes([0x31, 0x11]) + struct.pack(">H", 12) + b"\x00" * 12,  # version 3
        V2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack(">H", 60000),  # over the size bound
        metadata_request(),  # no header at all from a source that must send one
    ]
    for payload in bad:
        with connect(kgate_any.port) as s:
            assert exchange(s, payload + metadata_request()) == b"", payload
    assert exchange(bystander, metadata_request(8)), "a bad header on another connection hurt this one"
    bystander.close()
    assert [a for a, _ in SEEN] == ["192.0.2.1:1", "192.0.2.1:1"]
    assert kgate_any.call(lambda: len(kgate_any.cluster.doors)) == 0


def test_stalled_header_is_closed_after_frame_timeout(kgate_any):
    with connect(kgate_any.port) as s:
        s.sendall(b"PROXY TCP4 1.2.3.4")
        s.settimeout(10)
        t0 = time.monotonic()
        assert s.recv(10) == b""
        assert 2 < time.monotonic() - t0 < 8


def test_untrusted_source_is_refused(tansu):
    SEEN.clear()
    k = make_kgate(tansu.bootstrap, {"mode": "v1", "trusted_sources": ["10.0.0.0/8"]})
    try:
        with connect(k.port) as s:
            assert exchange(s, v1("203.0.113.7", 40000) + metadata_request()) == b""
        assert SEEN == []
    finally:
        k.stop()


def test_proxy_protocol_then_mtls(tansu, tmp_path):
    """Header in clear, then the TLS handshake on the same socket: address and principal both arrive."""
    ca = TestCA(tmp_path)
    server = ca.issue("kgate", "kgate.test", server=True)
    alice = ca.issue("alice", "alice")
    SEEN.clear()
    k = make_kgate(
        tansu.bootstrap,
        "v2",
        tls={
            "cert_file": str(server.cert),
            "key_file": str(server.key),
            "client_ca_file": str(ca.cert_path),
            "client_auth": "required",
        },
    )
    try:
        ctx = ssl.create_default_context(cafile=str(ca.cert_path))
        ctx.load_cert_chain(str(alice.cert), str(alice.key))
        with connect(k.port) as raw:
            raw.sendall(v2("198.51.100.20", 777))
            with ctx.wrap_socket(raw, server_hostname=HOST) as s:
                assert exchange(s, metadata_request())
        nocert = ssl.create_default_context(cafile=str(ca.cert_path))
        with connect(k.port) as raw:
            raw.sendall(v2("198.51.100.21", 778))
            try:
                with nocert.wrap_socket(raw, server_hostname=HOST) as s:
                    assert exchange(s, metadata_request()) == b""
            except (ssl.SSLError, OSError):
                pass
        assert SEEN == [("198.51.100.20:777", "CN=alice,O=kgate tests")]
    finally:
        k.stop()


@pytest.fixture(scope="module")
def kgate_v2_module(tansu):
    k = make_kgate(tansu.bootstrap, "any")
    yield k
    k.stop()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    garbage=st.one_of(
        st.binary(min_size=1, max_size=120),
        st.binary(max_size=40).map(lambda b: b"PROXY " + b),
        st.binary(max_size=60).map(lambda b: V2_SIGNATURE + b),
    )
)
def test_live_garbage_headers_close_only_their_connection(kgate_v2_module, garbage):
    """Whatever a peer sends instead of a header, kgate closes that connection (or serves it, if it
    happens to be a valid header) and keeps serving others."""
    k = kgate_v2_module
    with connect(k.port) as s:
        s.settimeout(5)
        try:
            s.sendall(garbage + metadata_request())
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass
    with connect(k.port) as s:
        assert exchange(s, v1("192.0.2.9", 9) + metadata_request()), "kgate stopped serving"


def test_header_and_client_hello_in_one_segment(tansu, tmp_path):
    """A balancer that passes TLS through sends the header and the client's ClientHello back to back,
    often in one segment: kgate must read the header exactly and leave the ClientHello to TLS."""
    ca = TestCA(tmp_path)
    server = ca.issue("kgate", "kgate.test", server=True)
    SEEN.clear()
    k = make_kgate(tansu.bootstrap, "any", tls={"cert_file": str(server.cert), "key_file": str(server.key)})
    try:
        ctx = ssl.create_default_context(cafile=str(ca.cert_path))
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname=HOST)
        with connect(k.port) as raw:
            with pytest.raises(ssl.SSLWantReadError):
                tls.do_handshake()
            raw.sendall(v1("203.0.113.50", 5050) + outgoing.read())  # one write: header + ClientHello
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if outgoing.pending:
                        raw.sendall(outgoing.read())
                    data = raw.recv(65536)
                    assert data, "kgate closed the connection during the handshake"
                    incoming.write(data)
            tls.write(metadata_request())
            raw.sendall(outgoing.read())
            answer = b""
            while len(answer) < 4:
                try:
                    answer += tls.read(65536)
                except ssl.SSLWantReadError:
                    data = raw.recv(65536)
                    assert data
                    incoming.write(data)
        assert SEEN == [("203.0.113.50:5050", None)]
    finally:
        k.stop()
