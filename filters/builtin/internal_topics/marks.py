"""The fleet-wide store of user-defined internal-topic marks: a compacted topic on the cluster.

Why a topic on the cluster: every kgate instance in front of the cluster can reach it (no extra
service to run), it survives kgate restarts, and Apache Kafka refuses the unknown topic config
``internal`` (INVALID_CONFIG), so the mark cannot live in the topic's own configs there. See
docs/internal-topics.md for the alternatives and the trade-offs.

**Record format** (version 1):

- key: ``b"\\x01" + topic_id.bytes`` (17 bytes). Keyed by topic **id**, not name: a topic deleted
  and created again under the same name has a new id, so it does not inherit the old mark, and
  compaction keeps one record per id.
- value: UTF-8 JSON ``{"name": ..., "internal": true, "at_ms": ..., "by": ...}``; ``name`` lets a
  name-only RPC (Metadata below v10, DescribeConfigs, Produce by name) find the mark.
- a tombstone (null value) removes the mark: set ``internal=false``, or the topic was deleted.

Records with another key version or an unreadable value are skipped (logged once), so a newer
kgate may extend the format without breaking an older instance of the same fleet.

**Reading.** Each instance reads the topic from the start when it starts (the filter's hooks
that depend on marks wait for that first read, up to ``ready_timeout_s``), then keeps one long-poll
Fetch waiting at the partition's leader (``max_wait_ms = poll_interval_s``, ``min_bytes = 1``),
on a connection of its own so that kgate's topic-id lookups never queue behind it. A broker
answers such a Fetch as soon as a record arrives (Kafka does), so a mark written through another
instance is normally honoured here within a round trip, and at worst within one poll interval
plus a round trip. Marks are written with ``acks=-1`` to the partition's leader over kgate's own
connection and applied locally at once, so the instance that wrote one honours it immediately.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from uuid import UUID

from kgate.api import ApiKey, ClusterServices, ErrorCode, TopicNameError
from kgate.codec.generated.admin.create_topics import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kgate.codec.generated.data.fetch import FetchPartition, FetchRequest, FetchTopic
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.codec.generated.data.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kgate.codec.records import RecordsError, decode_batches, encode_batch, next_offset

log = logging.getLogger("kgate.filters.internal_topics")

DEFAULT_TOPIC = "__kgate_internal_topics"
KEY_VERSION = 1
_ZERO = UUID(int=0)
_LOAD_WAIT_MS = 100
_SWEEP_MIN_AGE_MS = 60_000
_NAMES_VERSION = 12  # Produce and Fetch by topic name (v13+ name topics by id only)
_RETRY_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


# -- record format (pure) ---------------------------------------------------------------------
def mark_key(topic_id: UUID) -> bytes:
    return bytes((KEY_VERSION,)) + topic_id.bytes


def mark_value(name: str, *, at_ms: int, by: str) -> bytes:
    return json.dumps({"name": name, "internal": True, "at_ms": at_ms, "by": by}, separators=(",", ":")).encode()


def parse_mark(key: bytes | None, value: bytes | None) -> tuple[UUID, str | None] | None:
    """``(topic id, name)`` for a mark, ``(topic id, None)`` for a tombstone, None if not readable."""
    if key is None or len(key) != 17 or key[0] != KEY_VERSION:
        return None
    topic_id = UUID(bytes=bytes(key[1:]))
    if value is None:
        return topic_id, None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or not doc["name"]:
        return None
    return (topic_id, doc["name"]) if doc.get("internal", True) is True else (topic_id, None)


class MarkTable:
    """The marks one instance knows: topic id -> name, and the reverse for name-only checks."""

    def __init__(self) -> None:
        self.by_id: dict[UUID, str] = {}
        self._by_name: dict[str, set[UUID]] = {}

    def apply(self, topic_id: UUID, name: str | None) -> None:
        old = self.by_id.pop(topic_id, None)
        if old is not None:
            ids = self._by_name.get(old)
            if ids is not None:
                ids.discard(topic_id)
                if not ids:
                    del self._by_name[old]
        if name is not None:
            self.by_id[topic_id] = name
            self._by_name.setdefault(name, set()).add(topic_id)

    def marked_id(self, topic_id: UUID) -> bool:
        return topic_id in self.by_id

    def marked_name(self, name: str, current_id: UUID | None = None) -> bool:
        """Whether the topic called ``name`` is marked.

        ``current_id``: the topic's id where kgate knows it (from Metadata passing through); then
        only a mark on that id counts, so a recreated topic does not inherit the old one's mark.
        Without it, a mark on any id of that name counts (the dead ids are swept, see
        ``MarksStore.forget_dead``).
        """
        ids = self._by_name.get(name)
        if not ids:
            return False
        return current_id is None or current_id in ids

    def ids_of(self, name: str) -> set[UUID]:
        return set(self._by_name.get(name, ()))


class MarkWriteError(Exception):
    """A mark could not be written within the write timeout."""


@dataclass
class _Partition:
    topic_id: UUID
    leader: int | None


# -- the store (asyncio) ------------------------------------------------------------------------
class MarksStore:
    """Reads, polls and writes the marks topic for one virtual cluster."""

    def __init__(
        self,
        topic: str = DEFAULT_TOPIC,
        *,
        poll_interval_s: float = 1.0,
        write_timeout_s: float = 5.0,
        sweep_interval_s: float = 300.0,
        instance: str = "kgate",
    ) -> None:
        self.topic = topic
        self.poll_interval_s = poll_interval_s
        self.write_timeout_s = write_timeout_s
        self.sweep_interval_s = sweep_interval_s
        self.instance = instance
        self.table = MarkTable()
        self.ready = asyncio.Event()
        self.topic_id: UUID | None = None  # of the marks topic, once known
        self._services: ClusterServices | None = None
        self._partition: _Partition | None = None
        self._position = 0
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._skipped = 0
        self._written_ms: dict[UUID, int] = {}  # mark -> when it was written (record timestamp)
        self.polls = 0

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, services: ClusterServices) -> None:
        self._services = services
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"internal-topics marks {self.topic}")

    async def close(self) -> None:
        """Stop the reader; never hangs kgate's shutdown.

        One ``cancel()`` is not enough on Python 3.11: ``asyncio.wait_for`` (under every request
        kgate sends) swallows a cancellation that arrives as its inner request completes, and the
        loop would run on, holding shutdown forever (seen with a reader that polled in a tight
        loop). So the loop also stops at the ``_closing`` flag, and the cancel is repeated.
        """
        self._closing = True
        task, self._task = self._task, None
        if task is None:
            return
        for _ in range(100):
            task.cancel()
            done, _pending = await asyncio.wait({task}, timeout=0.05)
            if done:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    task.result()
                return
        log.error("internal-topics: the marks reader did not stop; leaving it behind")

    async def _run(self) -> None:
        backoff = 0.2
        last_sweep = time.monotonic()
        while not self._closing:
            try:
                if self._partition is None:
                    await self._ensure_topic()
                started = time.monotonic()
                # Until the first read is complete: short waits (a broker that has nothing waits
                # max_wait_ms). Then one long poll per interval, answered as soon as a mark arrives.
                wait_ms = int(self.poll_interval_s * 1000) if self.ready.is_set() else _LOAD_WAIT_MS
                caught_up = await self.poll_once(wait_ms)
                backoff = 0.2
                if caught_up and not self.ready.is_set():
                    self.ready.set()
                    log.info("internal-topics: %d marks loaded from %s", len(self.table.by_id), self.topic)
                    await self.forget_dead()
                elif caught_up and time.monotonic() - last_sweep >= self.sweep_interval_s:
                    last_sweep = time.monotonic()
                    await self.forget_dead()
                elapsed = time.monotonic() - started
                if caught_up and elapsed < wait_ms / 2000:
                    # a broker that did not wait (or answered an empty poll at once): no busy loop
                    await asyncio.sleep(self.poll_interval_s - elapsed)
            except asyncio.CancelledError:
                raise
            except (ConnectionError, MarkWriteError) as exc:
                log.warning("internal-topics: reading %s failed (%s); retrying in %.1fs", self.topic, exc, backoff)
                self._partition = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    # -- reading ----------------------------------------------------------------------------
    async def _ensure_topic(self) -> None:
        """Find the marks topic's leader and id; create the topic (compacted) where it is missing."""
        services = self._require()
        for attempt in range(2):
            req = MetadataRequest(
                topics=[MetadataRequestTopic(name=self.topic, topic_id=_ZERO)], allow_auto_topic_creation=False
            )
            resp = await services.send_request(ApiKey.METADATA, req)
            topic = next((t for t in resp.topics if t.name == self.topic), None)
            if topic is not None and topic.error_code == ErrorCode.NONE and topic.partitions:
                part = next(p for p in topic.partitions if p.partition_index == 0)
                self._partition = _Partition(getattr(topic, "topic_id", _ZERO), part.leader_id)
                if self._partition.topic_id.int:
                    self.topic_id = self._partition.topic_id
                return
            if attempt == 0 and (topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                await self._create_topic()
                continue
            break
        raise MarkWriteError(f"marks topic {self.topic} is not available")

    async def _create_topic(self) -> None:
        req = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=self.topic,
                    num_partitions=1,
                    replication_factor=-1,  # the broker's default replication
                    assignments=[],
                    configs=[CreatableTopicConfig(name="cleanup.policy", value="compact")],
                )
            ],
            timeout_ms=10_000,
        )
        resp = await self._require().send_request(ApiKey.CREATE_TOPICS, req)
        for t in resp.topics:
            if t.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise MarkWriteError(f"creating {self.topic}: error {t.error_code} {t.error_message or ''}".strip())
        log.info("internal-topics: created the marks topic %s", self.topic)
        await asyncio.sleep(0.1)  # the new partition's leader takes a moment to appear in Metadata

    async def poll_once(self, max_wait_ms: int = 0) -> bool:
        """Read what is new in the marks topic; True when caught up with its high watermark.

        The Fetch goes to the partition's leader over a connection of its own (``node_id``), so
        while it waits at the broker (up to ``max_wait_ms``) kgate's topic-id lookups do not
        queue behind it. (Tansu answers a Fetch with ``max_wait_ms=0, min_bytes=0`` with no
        partitions at all, so kgate always asks for one byte and a wait.)
        """
        part = self._partition
        if part is None:
            raise MarkWriteError("marks topic not located yet")
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=4 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchTopic(
                    topic=self.topic,
                    topic_id=_ZERO,
                    partitions=[FetchPartition(partition=0, fetch_offset=self._position, partition_max_bytes=4 << 20)],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        resp = await self._require().send_request(ApiKey.FETCH, req, max_version=_NAMES_VERSION, node_id=part.leader)
        self.polls += 1
        if resp.error_code:
            raise MarkWriteError(f"Fetch of {self.topic}: error {resp.error_code}")
        for topic in resp.responses:
            for p in topic.partitions:
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._position = max(p.log_start_offset, 0)
                    return False
                if p.error_code:
                    raise MarkWriteError(f"Fetch of {self.topic}: partition error {p.error_code}")
                self._apply_records(p.records)
                end = next_offset(p.records)
                if end is not None and end > self._position:
                    self._position = end
                    return False  # there may be more: ask again at once
                return self._position >= p.high_watermark
        return max_wait_ms > 0  # no partition in the answer: nothing new arrived within the wait

    def _apply_records(self, records: bytes | memoryview | None) -> None:
        try:
            found = decode_batches(records)
        except RecordsError as exc:
            # One bad batch must not stop every instance from reading marks: skip past it.
            log.error("internal-topics: unreadable batch in %s skipped: %s", self.topic, exc)
            return
        for rec in found:
            if rec.offset < self._position:
                continue
            parsed = parse_mark(rec.key, rec.value)
            if parsed is None:
                if self._skipped == 0:
                    log.warning(
                        "internal-topics: skipping unreadable mark records in %s (offset %d)", self.topic, rec.offset
                    )
                self._skipped += 1
                continue
            self.table.apply(*parsed)
            self._written_ms[parsed[0]] = rec.timestamp_ms

    async def forget_dead(self) -> None:
        """Drop marks whose topic no longer exists (deleted behind kgate's back): tombstones.

        Only marks older than ``_SWEEP_MIN_AGE_MS``: a topic created a moment ago may not be in
        every broker's metadata yet, and "unknown" must not remove its fresh mark.
        """
        old_enough = int(time.time() * 1000) - _SWEEP_MIN_AGE_MS
        ids = [tid for tid in self.table.by_id if self._written_ms.get(tid, 0) < old_enough]
        if not ids:
            return
        found = await self._require().topic_names(ids)
        dead = [
            tid
            for tid, name in found.items()
            if isinstance(name, TopicNameError) and name.code == ErrorCode.UNKNOWN_TOPIC_ID
        ]
        if dead:
            log.info("internal-topics: %d marks of deleted topics removed", len(dead))
            await self.write([(tid, None) for tid in dead])

    # -- writing ----------------------------------------------------------------------------
    async def write(self, entries: Sequence[tuple[UUID, str | None]]) -> None:
        """Write marks (name) and removals (None), acks=-1; retried until ``write_timeout_s``."""
        if not entries:
            return
        now = int(time.time() * 1000)
        batch = encode_batch(
            [
                (mark_key(tid), None if name is None else mark_value(name, at_ms=now, by=self.instance))
                for tid, name in entries
            ],
            timestamp_ms=now,
        )
        deadline = time.monotonic() + self.write_timeout_s
        delay = 0.05
        last = "no attempt"
        while True:
            try:
                if self._partition is None:
                    await self._ensure_topic()
                code, message = await self._produce(batch)
                if code == ErrorCode.NONE:
                    for tid, name in entries:
                        self.table.apply(tid, name)
                        self._written_ms[tid] = now
                    return
                last = f"error {code} {message or ''}".strip()
                if code not in _RETRY_CODES:
                    raise MarkWriteError(f"writing to {self.topic}: {last}")
                self._partition = None  # leader moved, or the topic is new: locate it again
            except (ConnectionError, MarkWriteError) as exc:
                if isinstance(exc, MarkWriteError) and str(exc).startswith("writing to"):
                    raise
                last = str(exc)
                self._partition = None
            if time.monotonic() + delay > deadline:
                raise MarkWriteError(f"writing to {self.topic} failed for {self.write_timeout_s:g}s: {last}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _produce(self, batch: bytes) -> tuple[int, str | None]:
        part = self._partition
        assert part is not None
        req = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=int(self.write_timeout_s * 1000),
            topic_data=[
                TopicProduceData(name=self.topic, partition_data=[PartitionProduceData(index=0, records=batch)])
            ],
        )
        resp = await self._require().send_request(ApiKey.PRODUCE, req, max_version=_NAMES_VERSION, node_id=part.leader)
        for topic in resp.responses:
            for p in topic.partition_responses:
                return p.error_code, getattr(p, "error_message", None)
        return ErrorCode.UNKNOWN_SERVER_ERROR, "empty Produce answer"

    async def wait_ready(self, timeout_s: float) -> bool:
        if self.ready.is_set():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self.ready.wait()), timeout_s)
        except TimeoutError:
            return False
        return True

    def _require(self) -> ClusterServices:
        if self._services is None:
            raise MarkWriteError("the marks store has not been started")
        return self._services

    def known(self, ids: Iterable[UUID]) -> dict[UUID, str]:
        return {tid: self.table.by_id[tid] for tid in ids if tid in self.table.by_id}
