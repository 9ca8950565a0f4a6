"""``codec/records.py``: kgate's magic-2 record batches, checked three ways.

- round trips through kgate's own writer and reader;
- against independent oracles: the ``crc32c`` package (a C implementation) for the checksum, and
  kafka-python's record code (``DefaultRecordBatch`` reads what kgate writes;
  ``DefaultRecordBatchBuilder`` writes, uncompressed and gzip, what kgate reads);
- against real brokers (Tansu and Apache Kafka): batches librdkafka wrote (uncompressed and gzip)
  are fetched raw and read by kgate, and a batch kgate wrote is accepted by the broker (which
  checks the CRC) and read back by kafka-python.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from uuid import UUID

import pytest
from support.workloads import confluent_create_topic

from kgate.codec import records
from kgate.codec.generated.data.fetch import FetchPartition, FetchRequest, FetchTopic
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.proxy.carrier.upstream_client import UpstreamClient

crc32c_oracle = pytest.importorskip("crc32c")
default_records = pytest.importorskip("kafka.record.default_records")


@pytest.mark.parametrize("data", [b"", b"123456789", bytes(range(256)) * 5])
def test_crc32c_matches_the_c_implementation(data: bytes) -> None:
    assert records.crc32c(data) == crc32c_oracle.crc32c(data)


def test_round_trip_keys_values_tombstones_and_offsets() -> None:
    recs = [(b"k1", b"v1"), (b"k2", None), (None, b"v3"), (b"", b"")]
    batch = records.encode_batch(recs, timestamp_ms=1_700_000_000_123, base_offset=40)
    got = records.decode_batches(batch)
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in got] == [
        (40, b"k1", b"v1", 1_700_000_000_123),
        (41, b"k2", None, 1_700_000_000_123),
        (42, None, b"v3", 1_700_000_000_123),
        (43, b"", b"", 1_700_000_000_123),
    ]
    assert records.next_offset(batch) == 44


def test_kafka_python_reads_what_kgate_writes() -> None:
    batch = records.encode_batch([(b"a" * 300, b"b" * 200), (b"k", None)], timestamp_ms=1_700_000_000_000)
    oracle = default_records.DefaultRecordBatch(batch)
    assert oracle.validate_crc()
    assert oracle.magic == 2
    assert oracle.compression_type == 0
    got = [(r.offset, r.key, r.value, r.timestamp) for r in oracle]
    assert got == [(0, b"a" * 300, b"b" * 200, 1_700_000_000_000), (1, b"k", None, 1_700_000_000_000)]


@pytest.mark.parametrize("compression", [0, 1], ids=["none", "gzip"])
def test_kgate_reads_what_kafka_python_writes(compression: int) -> None:
    def build(base: int) -> bytes:
        b = default_records.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=compression,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        b.append(0, timestamp=1_700_000_000_005, key=b"a", value=b"b" * 100, headers=[("h", b"x")])
        b.append(1, timestamp=1_700_000_000_009, key=None, value=b"c", headers=[])
        data = bytearray(b.build())
        struct.pack_into(">q", data, 0, base)  # the broker assigns base offsets
        return bytes(data)

    two = build(10) + build(12)
    got = records.decode_batches(two)
    assert [(r.offset, r.key, r.value, r.timestamp_ms, r.headers) for r in got] == [
        (10, b"a", b"b" * 100, 1_700_000_000_005, (("h", b"x"),)),
        (11, None, b"c", 1_700_000_000_009, ()),
        (12, b"a", b"b" * 100, 1_700_000_000_005, (("h", b"x"),)),
        (13, None, b"c", 1_700_000_000_009, ()),
    ]
    assert records.next_offset(two) == 14
    # a partial last batch (a broker cuts at the fetch size) is left for the next Fetch
    assert [r.offset for r in records.decode_batches(two[:-5])] == [10, 11]
    assert records.next_offset(two[:-5]) == 12


def test_corrupt_and_unsupported_batches_are_refused() -> None:
    batch = bytearray(records.encode_batch([(b"k", b"v")], timestamp_ms=1))
    bad_crc = bytes(batch[:-1]) + bytes([batch[-1] ^ 0xFF])
    with pytest.raises(records.RecordsError, match="CRC"):
        records.decode_batches(bad_crc)
    snappy = bytearray(batch)
    struct.pack_into(">h", snappy, 21, 2)  # attributes: snappy
    struct.pack_into(">I", snappy, 17, records.crc32c(bytes(snappy[21:])))
    with pytest.raises(records.RecordsError, match="compression codec 2"):
        records.decode_batches(bytes(snappy))
    old = bytearray(batch)
    old[16] = 1
    with pytest.raises(records.RecordsError, match="magic 1"):
        records.decode_batches(bytes(old))
    assert records.decode_batches(None) == []
    assert records.next_offset(b"") is None


def test_control_batches_are_skipped_but_counted_in_next_offset() -> None:
    control = bytearray(records.encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], timestamp_ms=1))
    struct.pack_into(">q", control, 0, 7)
    struct.pack_into(">h", control, 21, 0x20)  # control bit
    struct.pack_into(">I", control, 17, records.crc32c(bytes(control[21:])))
    assert records.decode_batches(bytes(control)) == []
    assert records.next_offset(bytes(control)) == 8


# -- against real brokers -------------------------------------------------------------------
def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _client(port: int) -> UpstreamClient:
    return UpstreamClient(lambda: [("127.0.0.1", port)], client_id="records-test")


def _fetch(port: int, topic: str) -> bytes:
    async def go() -> bytes:
        c = _client(port)
        try:
            req = FetchRequest(
                replica_id=-1,
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                forgotten_topics_data=[],
                rack_id="",
                topics=[
                    FetchTopic(
                        topic=topic,
                        topic_id=UUID(int=0),
                        partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
                    )
                ],
            )
            _v, resp = await c.request(1, req, hi=12)
            (t,) = resp.responses
            (p,) = t.partitions
            assert p.error_code == 0
            return bytes(p.records or b"")
        finally:
            c.close()

    return asyncio.run(go())


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_kgate_reads_batches_a_broker_returns(broker, compression: str) -> None:
    from confluent_kafka import Producer

    topic = _unique(f"records-{compression}")
    confluent_create_topic(broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": compression, "linger.ms": 50})
    sent = [(f"k{i}".encode(), f"value {i} ".encode() * 20) for i in range(30)]
    for k, v in sent:
        p.produce(topic, key=k, value=v, partition=0)
    assert p.flush(30) == 0
    data = _fetch(broker.port, topic)
    got = records.decode_batches(data)
    assert [(r.key, r.value) for r in got] == sent
    assert [r.offset for r in got] == list(range(30))
    assert records.next_offset(data) == 30


def test_a_broker_accepts_and_returns_what_kgate_writes(broker) -> None:
    topic = _unique("records-kgate")
    confluent_create_topic(broker.bootstrap, topic, 1)
    batch = records.encode_batch([(b"k1", b"v1"), (b"k2", b"v2")], timestamp_ms=int(time.time() * 1000))

    async def produce() -> int:
        c = _client(broker.port)
        try:
            req = ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=0, records=batch)])
                ],
            )
            _v, resp = await c.request(0, req, hi=12)
            return int(resp.responses[0].partition_responses[0].error_code)
        finally:
            c.close()

    assert asyncio.run(produce()) == 0  # Kafka checks the CRC-32C on append
    data = _fetch(broker.port, topic)
    oracle = default_records.DefaultRecordBatch(data)  # kafka-python's reader
    assert oracle.validate_crc()
    assert [r.value for r in oracle] == [b"v1", b"v2"]
    assert [(r.key, r.value) for r in records.decode_batches(data)] == [(b"k1", b"v1"), (b"k2", b"v2")]
