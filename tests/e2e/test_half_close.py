"""A client that half-closes (``shutdown(SHUT_WR)``) gets its answers through kgate, as it does from
the broker itself (proxy/carrier/connection.py ``eof_received``, proxy/sansio/core.py ``client_eof``).

Raw sockets against Tansu and Apache Kafka 4.3.1, each case first straight to the broker (the
control: what a client gets without kgate), then through kgate:

- (a) ApiVersions answered, then Metadata and the FIN at once: the Metadata answer arrives (with
  kgate's address in it), then the connection closes;
- (b) a fresh connection, one request and the FIN at once (kgate is still connecting upstream);
- acks=0 Produce frames, a Metadata request and the FIN: the one answer arrives, every record is
  stored;
- a request cut short by the FIN (half a large Produce): the answer before it arrives, and the
  connection closes at once, not when a timeout gives up on the cut one;
- a plain full close still closes at once.

Before the fix kgate took the FIN for the client leaving: cases (a), (b) and the cut request got
0 bytes, and acks=0 answers aside, nothing was answered.
"""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest
from support import wire
from support import workloads as w

API_VERSIONS, METADATA = 18, 3


def _read_to_eof(sock: socket.socket, timeout: float = 15) -> tuple[bytes, bool]:
    """Everything the peer sends until it closes; (bytes, whether it closed within ``timeout``)."""
    sock.settimeout(timeout)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return bytes(out), True
        except TimeoutError:
            break
        if not chunk:
            return bytes(out), True
        out += chunk
    return bytes(out), False


def _frames(data: bytes) -> list[bytes]:
    """The whole size-prefixed frames in ``data`` (without their size prefix)."""
    frames, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        if pos + 4 + size > len(data):
            break
        frames.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(data), f"{len(data) - pos} trailing bytes: a cut answer"
    return frames


def _cids(frames: list[bytes]) -> list[int]:
    return [struct.unpack_from(">i", f)[0] for f in frames]


def _one_frame(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    (size,) = struct.unpack(">i", head)
    return sock.recv(size, socket.MSG_WAITALL)


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


@pytest.fixture(scope="module")
def kgate_for(broker, tmp_path_factory):
    """kgate in front of the module's broker (Tansu or Kafka 4.3.1), its node on the bootstrap port."""
    from support.procs import Kgate

    k = Kgate(tmp_path_factory.mktemp("kgate"), [broker.bootstrap], bootstrap_serves_node=True)
    k.start()
    yield k
    rc = k.stop_and_check()
    assert rc == 0, f"kgate exited with {rc}"
    assert "Traceback (most recent call last)" not in k.log_text(tail=10_000_000)


def _answered_then_fin(port: int) -> tuple[list[bytes], bool]:
    """Case (a): ApiVersions v0 answered, then Metadata v1 and the FIN at once."""
    with _connect(port) as s:
        s.sendall(wire.api_versions_request(1))
        assert _cids([_one_frame(s)]) == [1]
        s.sendall(wire.metadata_request(2, None, 1))
        s.shutdown(socket.SHUT_WR)
        data, closed = _read_to_eof(s)
    return _frames(data), closed


@pytest.mark.timeout(120)
def test_answer_after_half_close(broker, kgate_for) -> None:
    direct, _ = _answered_then_fin(broker.port)
    assert _cids(direct) == [2], "control: the broker answers a request sent with the FIN"
    got, closed = _answered_then_fin(kgate_for.listen_port)
    assert _cids(got) == [2], f"through kgate: {len(got)} answer(s) after the half-close"
    md = wire.decode_metadata_response(got[0][4:], 1)
    assert [b["port"] for b in md["brokers"]] == [kgate_for.listen_port], "the answer is kgate's, rewritten"
    assert closed, "kgate kept the connection open after its last answer"


def _first_request_then_fin(port: int) -> tuple[list[bytes], bool]:
    """Case (b): a fresh connection, ApiVersions and the FIN at once."""
    with _connect(port) as s:
        s.sendall(wire.api_versions_request(7))
        s.shutdown(socket.SHUT_WR)
        data, closed = _read_to_eof(s)
    return _frames(data), closed


@pytest.mark.timeout(120)
def test_first_request_with_the_fin_on_a_fresh_connection(broker, kgate_for) -> None:
    direct, _ = _first_request_then_fin(broker.port)
    assert _cids(direct) == [7], "control: the broker answers"
    got, closed = _first_request_then_fin(kgate_for.listen_port)
    assert _cids(got) == [7], "the answer to a request that arrived while kgate connected upstream"
    assert wire.parse_api_versions_response(got[0][4:], 0)["error_code"] == 0
    assert closed


@pytest.mark.timeout(180)
def test_acks0_records_and_the_answer_after_half_close(broker, kgate_for) -> None:
    topic = w.unique("halfclose")
    w.confluent_create_topic(kgate_for.bootstrap, topic, 1)
    values = [f"half-{i}".encode() for i in range(20)]
    with _connect(kgate_for.listen_port) as s:
        s.sendall(
            b"".join(wire.produce_request(10 + i, topic, 0, [v], acks=0) for i, v in enumerate(values))
            + wire.metadata_request(99, [topic], 1)
        )
        s.shutdown(socket.SHUT_WR)
        data, closed = _read_to_eof(s)
    assert _cids(_frames(data)) == [99], "exactly the Metadata answer (none for acks=0 Produce)"
    assert closed
    w.assert_exact(values, w.confluent_read_all(kgate_for.bootstrap, topic, len(values), timeout=30))


@pytest.mark.timeout(120)
def test_a_request_cut_by_the_fin_is_not_waited_for(broker, kgate_for) -> None:
    """Metadata, then half of a 1 MiB Produce (more than one read: kgate streams it upstream as it
    arrives), then the FIN: the Metadata answer arrives and the connection closes at once."""
    topic = w.unique("halfcut")
    big = wire.produce_request(5, topic, 0, [b"x" * (1 << 20)], acks=1)
    with _connect(kgate_for.listen_port) as s:
        s.sendall(wire.metadata_request(4, None, 1) + big[: len(big) // 2])
        s.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        data, closed = _read_to_eof(s, timeout=20)
        took = time.monotonic() - t0
    assert _cids(_frames(data)) == [4]
    assert closed
    assert took < 5, f"closed after {took:.1f}s: kgate waited for an answer to the cut request"


@pytest.mark.timeout(60)
def test_a_full_close_still_closes_at_once(kgate_for) -> None:
    """A client that closes its socket (no request owed) ends its kgate connection at once."""
    with _connect(kgate_for.listen_port) as s:
        s.sendall(wire.api_versions_request(1))
        assert _cids([_one_frame(s)]) == [1]
        local = s.getsockname()[1]
    line = re.compile(rf"connection from 127\.0\.0\.1:{local} closed after [0-9.]+s .*client-left")
    deadline = time.monotonic() + 3
    while not line.search(kgate_for.log_text(tail=200_000)):
        assert time.monotonic() < deadline, "kgate did not close the connection of a client that closed"
        time.sleep(0.05)
