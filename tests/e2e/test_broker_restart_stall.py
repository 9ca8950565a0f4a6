"""The broker-restart stall (issue 27, item 5): a fenced broker's Metadata answer through kgate.

Seen with ``tools/restart_soak.py``: an idempotent librdkafka 2.16 producer through kgate in front
of Kafka 4.3.1, broker stopped and started 20 times, stalled for good in about 1 restart of 13.
librdkafka's debug log shows why: at the end of its controlled shutdown a single Kafka broker is
fenced and, for a few milliseconds more, answers Metadata with every topic and **no broker**; the
client then decommissions every broker it knew, and if its connection drops while it handles that
answer (it does: the broker is stopping) it never re-bootstraps again (librdkafka #5301, fixed
after 2.16.0 by #5628). kgate now answers such a Metadata with the nodes it serves: its own
listeners, which outlive the broker's restart, so the client keeps its broker.

Kafka's fenced window is a few milliseconds and cannot be hit on purpose, so the broker here is a
real Tansu behind a small relay (a stand-in for the fencing, in this file) that, while ``fenced``
is set, answers Metadata as the fenced Kafka does (no broker, no leader, no controller) and can
drop every connection as the stopping broker does. The client is the real librdkafka. Without the
change the client's own Metadata call returns no broker (and the soak stalls); with it, kgate's
node, and the producer delivers again once the "broker" is back.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
import uuid

import pytest
from support import wire

from kgate.codec import api
from kgate.codec.headers import response_body_offset

HOST = "127.0.0.1"
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")  # request api key, version, correlation id


class FencingRelay:
    """A byte relay in front of one broker that poses as that broker (its Metadata names the relay)
    and, while ``fenced`` is set, answers Metadata as a fenced Kafka broker does."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.fenced = threading.Event()
        self.fenced_answers = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FencingRelay:
        self._thread.start()
        assert self._ready.wait(10), "the relay did not start"
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def drop_all(self) -> None:
        """Close every connection, both sides: the stopping broker's request processors end."""
        done = threading.Event()

        def drop() -> None:
            for w in list(self._writers):
                w.transport.abort()
            done.set()

        self._loop.call_soon_threadsafe(drop)
        assert done.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, HOST, 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()  # stopped: let go of the port, the connections and the loop
        for w in list(self._writers):
            w.transport.abort()
        tasks = asyncio.all_tasks(self._loop)
        for t in tasks:
            t.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, server.wait_closed(), return_exceptions=True))
        self._loop.close()

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            ureader, uwriter = await asyncio.open_connection(HOST, self.upstream_port)
        except OSError:
            cwriter.transport.abort()
            return
        self._writers.update((cwriter, uwriter))
        asked: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        try:
            await asyncio.gather(self._requests(creader, uwriter, asked), self._answers(ureader, cwriter, asked))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (cwriter, uwriter):
                self._writers.discard(w)
                w.transport.abort()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, asked: dict) -> None:
        while True:
            frame = await _frame(reader)
            key, version, cid = _HEAD.unpack_from(frame, 4)
            asked[cid] = (key, version)
            writer.write(frame)

    async def _answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, asked: dict) -> None:
        while True:
            frame = await _frame(reader)
            cid = _SIZE.unpack_from(frame, 4)[0]
            key, version = asked.pop(cid, (-1, -1))
            if key == wire.METADATA:
                frame = self._metadata(frame, version)
            writer.write(frame)

    def _metadata(self, frame: bytes, version: int) -> bytes:
        offset = response_body_offset(memoryview(frame), api.response_header_version(wire.METADATA, version))
        m = wire.decode_metadata_response(frame[offset:], version)
        if self.fenced.is_set():  # Kafka's answer from a fenced broker: no broker, no leader
            self.fenced_answers += 1
            m["brokers"] = []
            if version >= 1:
                m["controller_id"] = -1
            for t in m["topics"] or []:
                for p in t["partitions"] or []:
                    p["leader_id"] = -1
                    p["isr_nodes"] = []
        else:  # pose as the broker: every node at the relay's address
            m["brokers"] = [dict(b, host=HOST, port=self.port) for b in m["brokers"]]
        body = frame[offset:]
        new = wire.encode_metadata_response(m, version)
        return _SIZE.pack(len(frame) - 4 - len(body) + len(new)) + frame[4:offset] + new


async def _frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    return head + await reader.readexactly(_SIZE.unpack(head)[0])


@pytest.fixture
def relay(tansu):
    r = FencingRelay(tansu.port).start()
    yield r
    r.stop()


def _deliver(producer, topic: str, n: int, timeout: float) -> int:
    """Produce ``n`` records and wait up to ``timeout`` s for them: how many were acked."""
    acked = []
    for i in range(n):
        producer.produce(topic, f"r{i}".encode(), on_delivery=lambda err, _m: acked.append(err is None))
    deadline = time.monotonic() + timeout
    while len(acked) < n and time.monotonic() < deadline:
        producer.poll(0.1)
    return sum(acked)


def test_fenced_metadata_answer_keeps_the_client_on_kgate_and_it_resumes(tansu, relay, kgate_factory) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"stall-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})  # kept: a destroyed handle fails its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    gate = kgate_factory(f"{HOST}:{relay.port}")
    producer = Producer(
        {
            "bootstrap.servers": gate.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": 30000,
            "linger.ms": 5,
        }
    )
    assert _deliver(producer, topic, 20, 30) == 20  # the client knows the broker: kgate's node
    before = producer.list_topics(topic, timeout=10)
    assert [(b.host, b.port) for b in before.brokers.values()] == [(HOST, gate.listen_port)]

    relay.fenced.set()  # the broker is fenced: its Metadata names no broker
    fenced = producer.list_topics(topic, timeout=10)
    assert relay.fenced_answers >= 1
    # before the change: {} (the client forgot its broker; with the connection dropping at that
    # moment, librdkafka 2.16 never connects again)
    assert {b.id: (b.host, b.port) for b in fenced.brokers.values()} == {
        b.id: (b.host, b.port) for b in before.brokers.values()
    }
    assert fenced.topics[topic].partitions[0].leader == -1  # the rest is the broker's answer

    relay.drop_all()  # the broker's request processors stop: every connection drops
    relay.fenced.clear()  # and it is back, unfenced
    assert _deliver(producer, topic, 20, 40) == 20
    assert "a Metadata answer named no broker" in gate.log_text()
    assert producer.flush(10) == 0
