"""A tiny hand-written Kafka wire codec for tests.

Enough to build requests by hand (ApiVersions, Metadata, raw frames with any header) and to
decode/re-encode the responses that carry broker addresses (Metadata v0-12,
FindCoordinator v0-6, DescribeCluster v0-2) for the fake multi-node relay. It is written
independently of kgate's codec on purpose: the tests must not share the proxy's bugs.
Unknown tagged fields are kept as raw bytes and written back unchanged.
"""

from __future__ import annotations

import builtins
import socket
import struct

# api keys by hand too, not from kgate.codec: this codec is independent on purpose (above)
API_VERSIONS, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 18, 3, 10, 60
# first flexible version of each decoded api (requests and responses)
FLEXIBLE_FROM = {METADATA: 9, FIND_COORDINATOR: 3, DESCRIBE_CLUSTER: 0, API_VERSIONS: 3}


class Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data = memoryview(data)
        self.pos = pos

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"truncated: need {n} bytes at {self.pos} of {len(self.data)}")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def int8(self):
        return struct.unpack(">b", self._take(1))[0]

    def int16(self):
        return struct.unpack(">h", self._take(2))[0]

    def int32(self):
        return struct.unpack(">i", self._take(4))[0]

    def int64(self):
        return struct.unpack(">q", self._take(8))[0]

    def bool(self):
        return self._take(1) != b"\0"

    def uuid(self):
        return self._take(16)

    def uvarint(self):
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, flexible: builtins.bool):
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            return None
        return self._take(n).decode()

    def array_len(self, flexible: builtins.bool):
        return self.uvarint() - 1 if flexible else self.int32()

    def array(self, flexible: builtins.bool, item):
        n = self.array_len(flexible)
        if n < 0:
            return None
        return [item() for _ in range(n)]

    def tags(self, flexible: builtins.bool):
        if not flexible:
            return []
        return [(self.uvarint(), self._take(self.uvarint())) for _ in range(self.uvarint())]

    def rest(self) -> bytes:
        return self._take(len(self.data) - self.pos)


class Writer:
    def __init__(self):
        self.parts: list[bytes] = []

    def raw(self, b: bytes | bytearray):
        self.parts.append(bytes(b))
        return self

    def int8(self, v):
        return self.raw(struct.pack(">b", v))

    def int16(self, v):
        return self.raw(struct.pack(">h", v))

    def int32(self, v):
        return self.raw(struct.pack(">i", v))

    def int64(self, v):
        return self.raw(struct.pack(">q", v))

    def bool(self, v):
        return self.raw(b"\1" if v else b"\0")

    def uvarint(self, v):
        out = bytearray()
        while True:
            if v < 0x80:
                out.append(v)
                return self.raw(out)
            out.append((v & 0x7F) | 0x80)
            v >>= 7

    def string(self, s, flexible: builtins.bool):
        if s is None:
            return self.uvarint(0) if flexible else self.int16(-1)
        b = s.encode()
        if flexible:
            self.uvarint(len(b) + 1)
        else:
            self.int16(len(b))
        return self.raw(b)

    def array(self, items, flexible: builtins.bool, write_item):
        if items is None:
            return self.uvarint(0) if flexible else self.int32(-1)
        if flexible:
            self.uvarint(len(items) + 1)
        else:
            self.int32(len(items))
        for it in items:
            write_item(it)
        return self

    def tags(self, tags, flexible: builtins.bool):
        if not flexible:
            return self
        self.uvarint(len(tags))
        for tag, data in tags:
            self.uvarint(tag).uvarint(len(data)).raw(data)
        return self

    def bytes(self) -> bytes:
        return b"".join(self.parts)


# ------------------------------------------------------------------ requests
def request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None = "kgate-e2e",
    flexible: builtins.bool = False,
) -> bytes:
    w = Writer().int16(api_key).int16(api_version).int32(correlation_id).string(client_id, False)
    if flexible:
        w.uvarint(0)
    return w.bytes()


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_request(correlation_id: int, version: int = 0) -> bytes:
    flexible = version >= 3
    body = b""
    if flexible:
        body = Writer().string("kgate-e2e", True).string("1.0", True).uvarint(0).bytes()
    return frame(request_header(API_VERSIONS, version, correlation_id, flexible=flexible) + body)


def metadata_request(correlation_id: int, topics: list[str] | None = None, version: int = 1) -> bytes:
    """Metadata v1..v8 (non-flexible) request; topics None = all topics."""
    assert 1 <= version <= 8
    w = Writer()
    w.array(topics, False, lambda t: w.string(t, False))
    if version >= 4:
        w.bool(False)  # allow_auto_topic_creation
    if version >= 8:
        w.bool(False).bool(False)
    return frame(request_header(METADATA, version, correlation_id) + w.bytes())


# ------------------------------------------------------------------ responses
def parse_api_versions_response(body: bytes, version: int = 0) -> dict:
    """Body after the (always v0) response header."""
    flexible = version >= 3
    r = Reader(body)
    out = {"error_code": r.int16()}

    def key():
        k = (r.int16(), r.int16(), r.int16())
        r.tags(flexible)
        return k

    out["api_keys"] = {k: (lo, hi) for k, lo, hi in r.array(flexible, key)}
    if version >= 1:
        out["throttle_time_ms"] = r.int32()
    return out


def decode_metadata_response(body: bytes, version: int) -> dict:
    flex = version >= 9
    r = Reader(body)
    m: dict = {}
    if version >= 3:
        m["throttle_time_ms"] = r.int32()

    def broker():
        b = {"node_id": r.int32(), "host": r.string(flex), "port": r.int32()}
        b["rack"] = r.string(flex) if version >= 1 else None
        b["_tags"] = r.tags(flex)
        return b

    m["brokers"] = r.array(flex, broker)
    if version >= 2:
        m["cluster_id"] = r.string(flex)
    if version >= 1:
        m["controller_id"] = r.int32()

    def int32s():
        return r.array(flex, r.int32)

    def partition():
        p = {"error_code": r.int16(), "partition_index": r.int32(), "leader_id": r.int32()}
        if version >= 7:
            p["leader_epoch"] = r.int32()
        p["replica_nodes"] = int32s()
        p["isr_nodes"] = int32s()
        if version >= 5:
            p["offline_replicas"] = int32s()
        p["_tags"] = r.tags(flex)
        return p

    def topic():
        t = {"error_code": r.int16(), "name": r.string(flex)}
        if version >= 10:
            t["topic_id"] = r.uuid()
        if version >= 1:
            t["is_internal"] = r.bool()
        t["partitions"] = r.array(flex, partition)
        if version >= 8:
            t["topic_authorized_operations"] = r.int32()
        t["_tags"] = r.tags(flex)
        return t

    m["topics"] = r.array(flex, topic)
    if 8 <= version <= 10:
        m["cluster_authorized_operations"] = r.int32()
    if version >= 13:
        m["error_code"] = r.int16()
    m["_tags"] = r.tags(flex)
    m["_trailing"] = r.rest()
    return m


def encode_metadata_response(m: dict, version: int) -> bytes:  # noqa: C901 - a branch per version's fields
    flex = version >= 9
    w = Writer()
    if version >= 3:
        w.int32(m["throttle_time_ms"])

    def broker(b):
        w.int32(b["node_id"]).string(b["host"], flex).int32(b["port"])
        if version >= 1:
            w.string(b.get("rack"), flex)
        w.tags(b.get("_tags", []), flex)

    w.array(m["brokers"], flex, broker)
    if version >= 2:
        w.string(m.get("cluster_id"), flex)
    if version >= 1:
        w.int32(m["controller_id"])

    def int32s(xs):
        w.array(xs, flex, w.int32)

    def partition(p):
        w.int16(p["error_code"]).int32(p["partition_index"]).int32(p["leader_id"])
        if version >= 7:
            w.int32(p["leader_epoch"])
        int32s(p["replica_nodes"])
        int32s(p["isr_nodes"])
        if version >= 5:
            int32s(p["offline_replicas"])
        w.tags(p.get("_tags", []), flex)

    def topic(t):
        w.int16(t["error_code"]).string(t["name"], flex)
        if version >= 10:
            w.raw(t["topic_id"])
        if version >= 1:
            w.bool(t["is_internal"])
        w.array(t["partitions"], flex, partition)
        if version >= 8:
            w.int32(t["topic_authorized_operations"])
        w.tags(t.get("_tags", []), flex)

    w.array(m["topics"], flex, topic)
    if 8 <= version <= 10:
        w.int32(m["cluster_authorized_operations"])
    if version >= 13:
        w.int16(m["error_code"])
    w.tags(m.get("_tags", []), flex)
    w.raw(m.get("_trailing", b""))
    return w.bytes()


def decode_find_coordinator_response(body: bytes, version: int) -> dict:
    flex = version >= 3
    r = Reader(body)
    m: dict = {}
    if version >= 1:
        m["throttle_time_ms"] = r.int32()
    if version <= 3:
        m["error_code"] = r.int16()
        if version >= 1:
            m["error_message"] = r.string(flex)
        m["node_id"], m["host"], m["port"] = r.int32(), r.string(flex), r.int32()
    else:

        def coord():
            c = {
                "key": r.string(flex),
                "node_id": r.int32(),
                "host": r.string(flex),
                "port": r.int32(),
                "error_code": r.int16(),
                "error_message": r.string(flex),
            }
            c["_tags"] = r.tags(flex)
            return c

        m["coordinators"] = r.array(flex, coord)
    m["_tags"] = r.tags(flex)
    m["_trailing"] = r.rest()
    return m


def encode_find_coordinator_response(m: dict, version: int) -> bytes:
    flex = version >= 3
    w = Writer()
    if version >= 1:
        w.int32(m["throttle_time_ms"])
    if version <= 3:
        w.int16(m["error_code"])
        if version >= 1:
            w.string(m["error_message"], flex)
        w.int32(m["node_id"]).string(m["host"], flex).int32(m["port"])
    else:

        def coord(c):
            w.string(c["key"], flex).int32(c["node_id"]).string(c["host"], flex).int32(c["port"])
            w.int16(c["error_code"]).string(c["error_message"], flex).tags(c["_tags"], flex)

        w.array(m["coordinators"], flex, coord)
    w.tags(m["_tags"], flex)
    w.raw(m["_trailing"])
    return w.bytes()


def decode_describe_cluster_response(body: bytes, version: int) -> dict:
    r = Reader(body)
    m = {"throttle_time_ms": r.int32(), "error_code": r.int16(), "error_message": r.string(True)}
    if version >= 1:
        m["endpoint_type"] = r.int8()
    m["cluster_id"] = r.string(True)
    m["controller_id"] = r.int32()

    def broker():
        b = {"broker_id": r.int32(), "host": r.string(True), "port": r.int32(), "rack": r.string(True)}
        if version >= 2:
            b["is_fenced"] = r.bool()
        b["_tags"] = r.tags(True)
        return b

    m["brokers"] = r.array(True, broker)
    m["cluster_authorized_operations"] = r.int32()
    m["_tags"] = r.tags(True)
    m["_trailing"] = r.rest()
    return m


def encode_describe_cluster_response(m: dict, version: int) -> bytes:
    w = Writer().int32(m["throttle_time_ms"]).int16(m["error_code"]).string(m["error_message"], True)
    if version >= 1:
        w.int8(m["endpoint_type"])
    w.string(m["cluster_id"], True).int32(m["controller_id"])

    def broker(b):
        w.int32(b["broker_id"]).string(b["host"], True).int32(b["port"]).string(b["rack"], True)
        if version >= 2:
            w.bool(b["is_fenced"])
        w.tags(b["_tags"], True)

    w.array(m["brokers"], True, broker)
    w.int32(m["cluster_authorized_operations"]).tags(m["_tags"], True).raw(m["_trailing"])
    return w.bytes()


def response_header_len(api_key: int, version: int) -> int:
    """Bytes of the response header *before* the body: 4 (correlation id) + tagged fields."""
    flex_from = FLEXIBLE_FROM.get(api_key)
    if api_key == API_VERSIONS or flex_from is None or version < flex_from:
        return 4
    return -1  # flexible: correlation id + tagged fields (caller parses)


# ------------------------------------------------------------------ blocking socket client
class RawClient:
    """A blocking socket speaking size-prefixed frames, for hand-built requests."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes):
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def closed_by_peer(self, timeout: float = 5) -> bool:
        """True if the peer closes (EOF or reset) within ``timeout`` without sending data."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return data == b""

    def api_versions(self, correlation_id: int = 1) -> dict:
        self.send(api_versions_request(correlation_id))
        resp = self.recv_frame()
        (corr,) = struct.unpack(">i", resp[:4])
        assert corr == correlation_id, (corr, correlation_id)
        return parse_api_versions_response(resp[4:], 0)

    def metadata(self, correlation_id: int = 2, topics: list[str] | None = None, version: int = 1) -> dict:
        self.send(metadata_request(correlation_id, topics, version))
        resp = self.recv_frame()
        (corr,) = struct.unpack(">i", resp[:4])
        assert corr == correlation_id, (corr, correlation_id)
        return decode_metadata_response(resp[4:], version)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------ produce / fetch by hand
PRODUCE, FETCH = 0, 1


def record_batch(values: list[bytes]) -> bytes:
    """A magic-2 record batch (kafka-python's builder computes the CRC32C)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v, headers=[])
    return bytes(b.build())


def produce_request(
    correlation_id: int,
    topic: str,
    partition: int,
    values: list[bytes],
    acks: int,
    version: int = 7,
    timeout_ms: int = 10000,
) -> bytes:
    """Produce v3..v8 (non-flexible)."""
    assert 3 <= version <= 8
    batch = record_batch(values)
    w = Writer().string(None, False).int16(acks).int32(timeout_ms)
    w.int32(1).string(topic, False).int32(1).int32(partition).int32(len(batch)).raw(batch)
    return frame(request_header(PRODUCE, version, correlation_id) + w.bytes())


def fetch_request(
    correlation_id: int, topic: str, partition: int, offset: int, max_wait_ms: int, min_bytes: int = 1, version: int = 4
) -> bytes:
    """Fetch v4 (non-flexible, no log_start_offset)."""
    assert version == 4
    w = Writer().int32(-1).int32(max_wait_ms).int32(min_bytes).int32(1 << 20).int8(0)
    w.int32(1).string(topic, False).int32(1).int32(partition).int64(offset).int32(1 << 20)
    return frame(request_header(FETCH, version, correlation_id) + w.bytes())


def produce_acks(payload: bytes, version: int) -> int:
    """acks of a Produce request frame (payload = frame without its size prefix)."""
    flexible = version >= 9
    r = Reader(payload, 8)
    r.string(False)  # client_id: never compact
    r.tags(flexible)
    if version >= 3:
        r.string(flexible)  # transactional_id
    return r.int16()
