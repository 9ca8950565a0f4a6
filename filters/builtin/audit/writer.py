"""The audit log's writer thread: a bounded queue in, JSON lines out, never blocking the event loop.

The event loop's whole share of an audit event is ``offer_exchange``: a length test and a deque
append of a tuple (references to the exchange and the frames kgate already had), small against
a whole round trip through kgate (docs/performance.md, the core-only A/B at the end of "The audit
log"); everything else costs the writer thread. When
the queue holds ``queue_size`` events or ``max_queue_bytes`` of frames, the event is dropped and
counted (``kgate_audit_events_dropped_total{reason="queue_full"}``): a slow or full disk costs
audit events, never client latency. The thread takes what is queued in chunks, asks the event
loop once per chunk for the topic names it does not know yet (kgate's resolver lives there),
builds the events (event.py), and writes them with one ``write`` per chunk. A failed write
(disk full, read-only) drops that chunk's events with ``reason="write_error"`` and the thread
carries on. The loop never signals the thread (a ``call_soon_threadsafe`` or ``Event.set`` per
event would cost more than the event): the thread polls every ``POLL_S`` when it finds nothing.

The frames stay referenced until the thread has read them (up to ``POLL_S``); freed in bursts,
their memory was handed back to the OS and faulted in again by the event loop's next reads, which
cost the event-loop thread several times the writer's own CPU (docs/performance.md, "where the
cost was, what was cut"): the filter therefore keeps freed heap for reuse (memory.py).

Counters are plain ints, each written by one thread only (the loop: queue drops; the writer:
the rest), exported at scrape time (filter.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol
from uuid import UUID

from kgate.api import LOOKUP_FAILED, ConnectionInfo, TopicNameError
from kgate.filters.builtin.audit.event import Captured, Offered, event_line, topic_ids_of
from kgate.filters.builtin.audit.files import AuditFiles
from kgate.filters.exchanges import Answer, FinishedExchange

log = logging.getLogger("kgate.audit")

POLL_S = 0.05  # the writer looks for events this often when it finds none
CHUNK = 2000  # events built and written per write() at most
MEMO_MAX = 100_000  # topic id -> name memo entries (a name of an id never changes; ids can only die)
NEGATIVE_S = 30.0  # an id that did not resolve is asked again after this
YIELD_EVERY = 32  # events built between voluntary GIL releases (well under a switch interval of work)


class LineSink(Protocol):
    """A second destination for the JSON lines (the Kafka sink): must not block."""

    def offer_lines(self, lines: list[bytes]) -> None: ...


class AuditCounters:
    """Plain-int counters; each attribute is written by one thread only."""

    def __init__(self) -> None:
        self.queue_full = 0  # loop thread
        self.sampled_out = 0  # loop thread
        self.written = 0  # writer thread
        self.write_errors = 0  # writer thread: events lost to a failed write
        self.build_errors = 0  # writer thread: events kgate could not build (a bug; logged)
        self.kafka_written = 0  # kafka sink (loop thread)
        self.kafka_queue_full = 0  # writer thread
        self.kafka_errors = 0  # loop thread


class AuditWriter:
    """The bounded queue and the thread that drains it into ``AuditFiles`` (and an optional sink)."""

    def __init__(
        self,
        files: AuditFiles,
        *,
        instance: str,
        cluster: str,
        queue_size: int,
        max_queue_bytes: int,
        resolve: Callable[[list[UUID]], dict[UUID, str | TopicNameError]],
        counters: AuditCounters,
        sink: LineSink | None = None,
    ) -> None:
        self.files = files
        self.instance = instance
        self.cluster = cluster
        self.queue_size = queue_size
        self.max_queue_bytes = max_queue_bytes
        self._resolve = resolve
        self.counters = counters
        self.sink = sink
        self._q: deque[Captured | Offered] = deque()
        self._in_bytes = 0  # bytes of frames queued so far (loop thread)
        self._out_bytes = 0  # bytes of frames taken so far (writer thread)
        self._stop = False
        self._busy = False  # the thread holds a chunk it has not finished writing
        self._names: dict[UUID, str] = {}
        self._unknown: dict[UUID, tuple[TopicNameError, float]] = {}
        self._wall_offset_ns = time.time_ns() - time.monotonic_ns()
        self._thread = threading.Thread(target=self._run, name=f"kgate-audit-{cluster}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- event loop side -----------------------------------------------------------------------
    def offer(self, c: Captured) -> None:
        """Queue an event, or drop and count it when the queue is full (never blocks)."""
        if len(self._q) >= self.queue_size or self._in_bytes - self._out_bytes + c.held > self.max_queue_bytes:
            self.counters.queue_full += 1
            return
        self._in_bytes += c.held
        self._q.append(c)

    def offer_exchange(
        self, ex: FinishedExchange, info: ConnectionInfo, answer: Answer | None, answer_bytes: int | None, end_ns: int
    ) -> None:
        """``offer`` for the event loop: an ``ExchangeObserver`` that queues a plain tuple."""
        held = ex.req_bytes + (answer_bytes or 0)
        if len(self._q) >= self.queue_size or self._in_bytes - self._out_bytes + held > self.max_queue_bytes:
            self.counters.queue_full += 1
            return
        self._in_bytes += held
        self._q.append((ex, info.client_address, info.client_id, info.principal, answer, answer_bytes, end_ns))

    # -- writer thread -------------------------------------------------------------------------
    def _run(self) -> None:
        # no decoder warm-up: whole Produce/Fetch/Metadata frames are walked (walk.py), and
        # compiling the 64 decoders the walkers replaced cost this thread's CPU at start, on a loaded
        # machine inside the first traffic (docs/performance.md, "where the cost was, what was cut")
        q = self._q
        while True:
            if not q:
                if self._stop:
                    break
                try:
                    self.files.tick()
                except OSError as exc:
                    log.error("audit: cannot rotate %s: %s", self.files.directory, exc)
                time.sleep(POLL_S)
                continue
            self._busy = True
            chunk: list[Captured] = []
            while q and len(chunk) < CHUNK:
                item = q.popleft()
                chunk.append(item if isinstance(item, Captured) else Captured.of(item))
            self._out_bytes += sum(c.held for c in chunk)
            try:
                self._write(chunk)
            except Exception:  # a bug must cost these events, not the log: the thread goes on
                self.counters.build_errors += len(chunk)
                log.exception("audit: %d events lost", len(chunk))
            self._busy = False
        try:
            self.files.close()
        except OSError as exc:
            log.error("audit: cannot close %s: %s", self.files.directory, exc)

    def _write(self, chunk: list[Captured]) -> None:
        names = self._names_for(chunk)
        lines: list[bytes] = []
        for i, c in enumerate(chunk):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                time.sleep(0)  # hand the GIL back to the event loop (else it may wait a whole switch interval)
            try:
                lines.append(
                    event_line(
                        c,
                        instance=self.instance,
                        cluster=self.cluster,
                        wall_offset_ns=self._wall_offset_ns,
                        names=names,
                    )
                )
            except Exception:  # a bug in building one event must not stop the log
                self.counters.build_errors += 1
                log.exception("audit: cannot build the event of api key %d", c.ex.api_key)
        if not lines:
            return
        try:
            self.files.write(lines)
            self.counters.written += len(lines)
        except OSError as exc:
            self.counters.write_errors += len(lines)
            if self.counters.write_errors == len(lines) or self.counters.write_errors % 10_000 < len(lines):
                log.error("audit: cannot write to %s: %s (events dropped and counted)", self.files.directory, exc)
            try:
                self.files.rotate()  # a fresh file next time (the old one may be gone or broken)
            except OSError:
                pass
        if self.sink is not None:
            self.sink.offer_lines(lines)

    def _names_for(self, chunk: Iterable[Captured]) -> dict[UUID, str | TopicNameError]:
        """Names for every topic id in the chunk: the memo, then one round trip to the event loop."""
        found: dict[UUID, str | TopicNameError] = {}
        missing: list[UUID] = []
        now = time.monotonic()
        for c in chunk:
            for tid in topic_ids_of(c):
                if tid in found:
                    continue
                name = self._names.get(tid)
                if name is not None:
                    found[tid] = name
                    continue
                neg = self._unknown.get(tid)
                if neg is not None and neg[1] > now:
                    found[tid] = neg[0]
                    continue
                found[tid] = TopicNameError(LOOKUP_FAILED, "not looked up", True)
                missing.append(tid)
        if missing:
            for tid, got in self._resolve(missing).items():
                found[tid] = got
                if isinstance(got, str):
                    if len(self._names) >= MEMO_MAX:
                        self._names.clear()
                    self._names[tid] = got
                    self._unknown.pop(tid, None)
                elif got.code != LOOKUP_FAILED:
                    if len(self._unknown) >= MEMO_MAX:
                        self._unknown.clear()
                    self._unknown[tid] = (got, now + NEGATIVE_S)
        return found

    # -- control -------------------------------------------------------------------------------
    def drained(self) -> bool:
        """Everything offered so far was written (or dropped); for tests and shutdown."""
        return not self._q and not self._busy

    def wait_drained(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.drained():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout_s: float = 10.0) -> None:
        """Write what is queued (up to ``timeout_s``), publish the current file, end the thread."""
        self._stop = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("audit: writer did not finish within %.0fs; %d events not written", timeout_s, len(self._q))


def loop_resolver(
    loop: asyncio.AbstractEventLoop,
    cached: Callable[[UUID], str | None],
    lookup: Callable[[list[UUID]], Any],
    timeout_s: float,
) -> Callable[[list[UUID]], dict[UUID, str | TopicNameError]]:
    """Resolve ids from the writer thread by running the lookup on the event loop (where the
    resolver and its cache live: touching them from another thread would race their LRU order)."""

    async def on_loop(ids: list[UUID]) -> dict[UUID, str | TopicNameError]:
        out: dict[UUID, str | TopicNameError] = {}
        missing = []
        for tid in ids:
            name = cached(tid)
            if name is None:
                missing.append(tid)
            else:
                out[tid] = name
        if missing:
            out.update(await lookup(missing))
        return out

    def resolve(ids: list[UUID]) -> dict[UUID, str | TopicNameError]:
        try:
            future = asyncio.run_coroutine_threadsafe(on_loop(ids), loop)
        except RuntimeError:  # the loop is closed (shutdown)
            return {tid: TopicNameError(LOOKUP_FAILED, "event loop closed", True) for tid in ids}
        try:
            return future.result(timeout_s)
        except (FutureTimeout, Exception) as exc:
            future.cancel()
            return {tid: TopicNameError(LOOKUP_FAILED, f"lookup failed: {exc!r}", True) for tid in ids}

    return resolve
