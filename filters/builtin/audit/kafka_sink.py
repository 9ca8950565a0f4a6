"""The audit log's optional second sink: the same JSON lines, produced to a Kafka topic.

A fleet collects its instances' events centrally this way. The writer thread hands finished
lines to ``offer_lines`` (a bounded deque: when it is full the lines are dropped and counted,
``reason="kafka_queue_full"``); a task on the event loop feeds them to an aiokafka producer,
which batches them (``linger_ms``, ``max_batch_bytes``). A broker that is down costs events,
never client traffic: the producer's own buffer is bounded too, and a failed send is counted
(``reason="kafka_error"``). aiokafka is an optional dependency (``pip install kgate-proxy[audit-kafka]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from kgate.filters.builtin.audit.writer import AuditCounters

log = logging.getLogger("kgate.audit")

POLL_S = 0.05
RETRY_S = (0.5, 1, 2, 5, 10, 30)


class KafkaSink:
    """Lines in from the writer thread, produced by an aiokafka producer on the event loop."""

    def __init__(self, config: Mapping[str, Any], counters: AuditCounters) -> None:
        self.config = config
        self.topic: str = config["topic"]
        self.queue_size: int = config["queue_size"]
        self.counters = counters
        self._q: deque[bytes] = deque()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._producer: Any = None

    # -- writer thread -------------------------------------------------------------------------
    def offer_lines(self, lines: list[bytes]) -> None:
        room = self.queue_size - len(self._q)
        if room < len(lines):
            self.counters.kafka_queue_full += len(lines) - max(room, 0)
            lines = lines[: max(room, 0)]
        self._q.extend(lines)

    # -- event loop ----------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._run(), name=f"kgate-audit-kafka-{self.topic}")

    async def _start_producer(self) -> Any:
        from aiokafka import AIOKafkaProducer  # optional, checked at config load (no types: pyproject)

        c = self.config
        attempt = 0
        while not self._stopping:
            producer = AIOKafkaProducer(
                bootstrap_servers=c["bootstrap"],
                client_id=c["client_id"],
                acks=c["acks"],
                linger_ms=c["linger_ms"],
                max_batch_size=c["max_batch_bytes"],
                compression_type=c["compression"],
            )
            try:
                await producer.start()
                return producer
            except Exception as exc:
                with contextlib.suppress(Exception):
                    await producer.stop()
                delay = RETRY_S[min(attempt, len(RETRY_S) - 1)]
                attempt += 1
                log.warning("audit: Kafka sink cannot reach %s (%s); retrying in %gs", c["bootstrap"], exc, delay)
                await asyncio.sleep(delay)
        return None

    async def _run(self) -> None:
        self._producer = producer = await self._start_producer()
        if producer is None:
            return
        q = self._q
        while True:
            if not q:
                if self._stopping:
                    break
                await asyncio.sleep(POLL_S)
                continue
            line = q.popleft()
            try:
                fut = await producer.send(self.topic, line[:-1])  # without the newline
            except Exception as exc:
                self._failed(exc)
                continue
            fut.add_done_callback(self._sent)
        with contextlib.suppress(Exception):
            await producer.flush()

    def _sent(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._failed(fut.exception() if not fut.cancelled() else None)
        else:
            self.counters.kafka_written += 1

    def _failed(self, exc: BaseException | None) -> None:
        self.counters.kafka_errors += 1
        if self.counters.kafka_errors == 1 or self.counters.kafka_errors % 10_000 == 0:
            log.error("audit: Kafka sink could not deliver an event to %s: %r", self.topic, exc)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Produce what is queued (up to ``timeout_s``), then stop the producer."""
        self._stopping = True
        task = self._task
        if task is not None and self._producer is None:
            task.cancel()  # never reached the broker: nothing to deliver, no reason to wait
            with contextlib.suppress(BaseException):
                await task
        elif task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout_s)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
