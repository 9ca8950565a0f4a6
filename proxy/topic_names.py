"""Topic-id -> topic-name resolution for one virtual cluster.

Since KIP-516 clients name topics by 16-byte ids in Fetch (13+), Produce (13+), OffsetCommit /
OffsetFetch (10+) and the new group protocols. Filters that act on topic names (ACLs, prefixes,
routing, metrics) need the name behind each id. ``TopicNameResolver`` answers that:

* **passively**, from traffic the proxy already decodes: Metadata v10+ responses, CreateTopics v7+
  responses, DeleteTopics responses and any UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION seen for
  an id. This costs no extra request and keeps the cache warm for the common case where a client
  asks for Metadata before it fetches;
* **actively** on a miss, with a Metadata request over kgate's *own* upstream connection
  (``UpstreamClient``), never a client's: kgate's request must not queue behind a client's
  long-poll Fetch, must not consume a client's correlation ids, and must work for an instance of an
  HA fleet that never saw the client's Metadata (the client may have asked another instance).

Lookup by id uses Metadata **v12+** (the spec forbids ids in v10/v11 requests, and Tansu answers
such a request with a malformed response). Against a broker without v12, kgate asks v10/v11 for
all topics and matches ids. Tansu answers an unknown id at v12 with error 3 instead of 100, so
both mean "does not exist".

Ids never change meaning (a deleted-and-recreated topic gets a new id, topics cannot be renamed),
so a cached entry can only become *dead*, never wrong. That is why entries have no TTL: a bounded
LRU plus a periodic sweep that re-validates idle entries is enough, and a dead entry can at worst
make kgate treat a dead id as a name the broker will reject anyway.

Everything runs on the event loop thread; there are no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kgate.api.topic_names import LOOKUP_FAILED, TopicNameError
from kgate.codec import api
from kgate.codec.error_codes import RETRIABLE_CODES as _KAFKA_RETRIABLE
from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import ApiKey
from kgate.codec.generated.metadata import MetadataRequest, MetadataRequestTopic
from kgate.proxy import topic_names_metrics as _m
from kgate.proxy.upstream_client import UpstreamError

log = logging.getLogger("kgate.topic_names")

METADATA = ApiKey.METADATA
API_VERSIONS = ApiKey.API_VERSIONS

UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID

#: Broker error codes for which asking again soon may give another answer: the ones Kafka marks
#: retriable, plus REBOOTSTRAP_REQUIRED (kgate's next lookup reconnects, which is the rebootstrap),
#: less "does not exist" (an id never comes back, so that answer is final).
RETRIABLE_CODES = (_KAFKA_RETRIABLE | {ErrorCode.REBOOTSTRAP_REQUIRED}) - {UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID}
#: Ids per Metadata request; more are split into several requests.
MAX_IDS_PER_REQUEST = 1000

_ZERO = UUID(int=0)


ZERO_ID_ERROR = TopicNameError(UNKNOWN_TOPIC_ID, "the zero topic id names no topic", False)


@dataclass(slots=True)
class ResolverStats:
    """Plain counters (exact, cheap); the prometheus metrics carry the same numbers per cluster."""

    hits: int = 0
    misses: int = 0
    lookups: int = 0  # upstream Metadata requests made (resolve batches and sweeps)
    lookup_failures: int = 0  # of those, requests that got no usable answer
    negative_hits: int = 0  # resolve() answered from the negative cache
    coalesced: int = 0  # resolve() waits that joined a lookup already pending or in flight
    sweeps: int = 0
    evictions: dict[str, int] = field(default_factory=dict)


class _Entry:
    """A cached name. ``epoch`` orders entries for LRU and marks when they were last used."""

    __slots__ = ("epoch", "name")

    def __init__(self, name: str, epoch: int) -> None:
        self.name = name
        self.epoch = epoch


class _Negative:
    __slots__ = ("error", "expires", "since")

    def __init__(self, error: TopicNameError, since: float, expires: float) -> None:
        self.error = error
        self.since = since
        self.expires = expires


class _LookupFailed(Exception):
    pass


class TopicNameResolver:
    """Cache of topic id -> name for one virtual cluster, shared by all its connections.

    Internally ids are keyed by ``UUID.int``: ``uuid.UUID.__hash__`` is Python code (~120 ns),
    ``int`` hashing is C, and ``cached()`` runs per partition of every Fetch.

    LRU order and idleness share one integer clock, ``_epoch``, bumped on every insertion and
    every sweep. A hit moves its entry to the MRU end only when the entry's epoch is older than
    the clock, so a hot id costs one dict lookup and a compare per hit. The order is LRU except
    that entries hit between the same two insertions keep the order of their first hit there;
    every entry used since the last insertion still outlives every entry that was not.
    Entries are therefore sorted by epoch, and the sweep walks idle ones from the LRU end.
    """

    def __init__(
        self,
        client: Any,
        *,
        cluster: str = "default",
        batch_window_s: float = 0.002,
        negative_ttl_s: float = 5.0,
        max_entries: int = 100_000,
        idle_revalidate_s: float = 300.0,
        sweep_interval_s: float = 60.0,
        lookup_timeout_s: float = 10.0,
    ) -> None:
        self._client = client
        self.cluster = cluster
        self.batch_window_s = batch_window_s
        self.negative_ttl_s = negative_ttl_s
        self.max_entries = max(1, max_entries)
        self.idle_revalidate_s = idle_revalidate_s
        self.sweep_interval_s = sweep_interval_s
        self.lookup_timeout_s = lookup_timeout_s
        self.stats = ResolverStats()
        self._metrics = _m.ResolverMetrics(cluster)
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._by_name: dict[str, set[int]] = {}
        self._negative: dict[int, _Negative] = {}
        self._epoch = 0
        self._marks: deque[tuple[float, int]] = deque()  # (time, epoch) at each sweep
        self._inflight: dict[int, asyncio.Future[str | TopicNameError]] = {}
        self._pending: dict[int, asyncio.Future[str | TopicNameError]] = {}
        self._flush_handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        _m.register(self)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the periodic sweep (inside a running loop). Idempotent."""
        if self._sweeper is None and not self._closed:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def close(self) -> None:
        """Stop the sweep and any lookup; waiters get a retriable error. The client is not closed:
        it belongs to the virtual cluster."""
        self._closed = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        tasks = [t for t in (self._sweeper, *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._sweeper = None
        err = TopicNameError(LOOKUP_FAILED, "topic name resolver closed", True)
        for fut in (*self._pending.values(), *self._inflight.values()):
            if not fut.done():
                fut.set_result(err)
        self._pending.clear()
        self._inflight.clear()
        _m.retire(self)

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------------ sync cache access
    def cached(self, topic_id: UUID) -> str | None:
        """The cached name of ``topic_id`` or None. O(1), never does I/O; counts a hit or a miss."""
        key = topic_id.int
        e = self._entries.get(key)
        if e is None:
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        if e.epoch != self._epoch:
            e.epoch = self._epoch
            self._entries.move_to_end(key)
        return e.name

    def get_cached(self, ids: Iterable[UUID]) -> tuple[dict[UUID, str], list[UUID]]:
        """Names found in the cache, and the ids that are not (each once, in first-seen order)."""
        found: dict[UUID, str] = {}
        missing: list[UUID] = []
        entries, epoch, stats = self._entries, self._epoch, self.stats
        seen_missing: set[int] = set()
        for tid in ids:
            key = tid.int
            e = entries.get(key)
            if e is None:
                stats.misses += 1
                if key not in seen_missing:
                    seen_missing.add(key)
                    missing.append(tid)
                continue
            stats.hits += 1
            if e.epoch != epoch:
                e.epoch = epoch
                entries.move_to_end(key)
            found[tid] = e.name
        return found, missing

    # ------------------------------------------------------------------ async resolution
    async def resolve(self, ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        """Name (or the reason there is none) for every id.

        Cache first, then the negative cache, then one batched upstream lookup for the rest:
        misses from all callers within ``batch_window_s`` share one Metadata request, and an id
        already pending or in flight is waited for, not asked again (single flight). Never
        raises for lookup failures: those come back as retriable ``TopicNameError``s.
        """
        out: dict[UUID, str | TopicNameError] = {}
        waits: dict[UUID, asyncio.Future[str | TopicNameError]] = {}
        now: float | None = None
        entries, stats = self._entries, self.stats
        for tid in ids:
            key = tid.int
            e = entries.get(key)
            if e is not None:
                stats.hits += 1
                if e.epoch != self._epoch:
                    e.epoch = self._epoch
                    entries.move_to_end(key)
                out[tid] = e.name
                continue
            if tid in out or tid in waits:
                continue
            stats.misses += 1
            if key == 0:
                out[tid] = ZERO_ID_ERROR
                continue
            neg = self._negative.get(key)
            if neg is not None:
                if now is None:
                    now = time.monotonic()
                if neg.expires > now:
                    stats.negative_hits += 1
                    out[tid] = neg.error
                    continue
                del self._negative[key]
            if self._closed:
                out[tid] = TopicNameError(LOOKUP_FAILED, "topic name resolver closed", True)
                continue
            fut = self._inflight.get(key)
            if fut is None:
                fut = self._enqueue(key)
            else:
                stats.coalesced += 1
            waits[tid] = fut
        if waits:
            # asyncio.wait, not gather: a cancelled caller must not cancel a lookup others share.
            await asyncio.wait(set(waits.values()))
            for tid, fut in waits.items():
                out[tid] = fut.result()
        return out

    def _enqueue(self, key: int) -> asyncio.Future[str | TopicNameError]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str | TopicNameError] = loop.create_future()
        self._inflight[key] = fut
        self._pending[key] = fut
        if len(self._pending) >= MAX_IDS_PER_REQUEST:
            self._flush()
        elif self._flush_handle is None:
            # Nothing in flight: ask on the next loop turn, which still gathers every miss of the
            # current burst (all frames of one read, all connections served in this turn) without
            # adding latency to a cold id. A lookup in flight: wait up to the window for company.
            delay = self.batch_window_s if self._tasks else 0.0
            self._flush_handle = loop.call_later(delay, self._flush)
        return fut

    def _flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        batch, self._pending = self._pending, {}
        if batch:
            task = asyncio.get_running_loop().create_task(self._run_batch(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_batch(self, batch: dict[int, asyncio.Future[str | TopicNameError]]) -> None:
        started = time.monotonic()
        try:
            results = await self._query(list(batch))
        except _LookupFailed as exc:
            err = TopicNameError(LOOKUP_FAILED, f"topic id lookup failed: {exc}", True)
            results = dict.fromkeys(batch, err)
        except asyncio.CancelledError:
            err = TopicNameError(LOOKUP_FAILED, "topic name resolver closed", True)
            self._settle(batch, dict.fromkeys(batch, err))
            raise
        for key, r in results.items():
            if key in batch:
                continue
            # Extra names from an all-topics answer (v10/v11): free knowledge, kept while it fits
            # without evicting anything a client asked for.
            if isinstance(r, str) and len(self._entries) < self.max_entries and key not in self._entries:
                self._learn(key, r)
        for key in batch:
            got = results.get(key)
            r = TopicNameError(LOOKUP_FAILED, "no answer for this id", True) if got is None else got
            if isinstance(r, str):
                neg = self._negative.get(key)
                if neg is not None and neg.since >= started:
                    r = neg.error  # seen dead (e.g. DeleteTopics) while the lookup was in flight
                else:
                    self._learn(key, r)
            elif r.code == UNKNOWN_TOPIC_ID:
                self._evict(key, "unknown_id")
                self._remember_negative(key, r)
            elif not r.retriable:
                self._remember_negative(key, r)
            results[key] = r
        self._settle(batch, results)

    def _settle(self, batch: dict[int, asyncio.Future[Any]], results: dict[int, Any]) -> None:
        for key, fut in batch.items():
            if self._inflight.get(key) is fut:
                del self._inflight[key]
            if not fut.done():
                fut.set_result(results[key])

    # ------------------------------------------------------------------ upstream
    async def _query(self, keys: list[int]) -> dict[int, str | TopicNameError]:
        """Ask the cluster about ``keys``; may answer about more ids. Raises _LookupFailed."""
        client = self._client
        try:
            async with asyncio.timeout(self.lookup_timeout_s):
                if not client.versions:
                    # The broker's version ranges are learnt on connect; an ApiVersions request
                    # connects through the client's public API (once per process).
                    await client.request(
                        API_VERSIONS,
                        api.API_INFO[API_VERSIONS].request_class(),
                        0,
                        timeout_s=self.lookup_timeout_s,
                    )
                if client.pick_version(METADATA, 12) is not None:
                    out: dict[int, str | TopicNameError] = {}
                    for i in range(0, len(keys), MAX_IDS_PER_REQUEST):
                        chunk = keys[i : i + MAX_IDS_PER_REQUEST]
                        req = MetadataRequest(
                            topics=[MetadataRequestTopic(topic_id=UUID(int=k), name=None) for k in chunk],
                            allow_auto_topic_creation=False,
                        )
                        version, resp = await self._request(req, 12, None)
                        out.update(self._parse_by_id(chunk, version, resp))
                    return out
                if client.pick_version(METADATA, 10, 11) is not None:
                    # Never an id in a v10/v11 request (spec; Tansu answers garbage): all topics.
                    req = MetadataRequest(topics=None, allow_auto_topic_creation=False)
                    _version, resp = await self._request(req, 10, 11)
                    return self._parse_all(keys, resp)
        except TimeoutError as exc:
            raise _LookupFailed(f"no answer within {self.lookup_timeout_s}s") from exc
        except UpstreamError as exc:
            raise _LookupFailed(str(exc)) from exc
        err = TopicNameError(UNKNOWN_TOPIC_ID, "the cluster has no topic ids (no Metadata v10+)", False)
        return dict.fromkeys(keys, err)

    async def _request(self, req: MetadataRequest, lo: int, hi: int | None) -> tuple[int, Any]:
        self.stats.lookups += 1
        self._metrics.lookups.inc()
        t0 = time.perf_counter()
        try:
            return await self._client.request(METADATA, req, lo=lo, hi=hi, timeout_s=self.lookup_timeout_s)
        except BaseException:
            self.stats.lookup_failures += 1
            raise
        finally:
            self._metrics.lookup_seconds.observe(time.perf_counter() - t0)

    @staticmethod
    def _topic_result(t: Any) -> str | TopicNameError:
        code = t.error_code
        if code == ErrorCode.NONE:
            if t.name and t.topic_id.int:
                return t.name
            return TopicNameError(LOOKUP_FAILED, "broker answered without a name for this id", True)
        if code in (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION):
            return TopicNameError(UNKNOWN_TOPIC_ID, f"topic id does not exist (broker error {code})", False)
        return TopicNameError(code, f"broker error {code} for this topic id", code in RETRIABLE_CODES)

    def _parse_by_id(self, keys: list[int], version: int, resp: Any) -> dict[int, str | TopicNameError]:
        top = getattr(resp, "error_code", 0) if version >= 13 else 0
        if top:
            err = TopicNameError(top, f"broker error {top} for the whole Metadata request", True)
            return dict.fromkeys(keys, err)
        want = set(keys)
        out: dict[int, str | TopicNameError] = {}
        for t in resp.topics:
            k = t.topic_id.int
            if k in want and k not in out:
                out[k] = self._topic_result(t)
        if len(out) < len(keys) and len(resp.topics) == len(keys):
            # A broker that zeroes the id of an unknown topic (Tansu does in Fetch): by position.
            for k, t in zip(keys, resp.topics, strict=True):
                if k not in out and t.topic_id.int in (0, k):
                    out[k] = self._topic_result(t)
        return out

    @staticmethod
    def _parse_all(keys: list[int], resp: Any) -> dict[int, str | TopicNameError]:
        out: dict[int, str | TopicNameError] = {}
        for t in resp.topics:
            if t.error_code == ErrorCode.NONE and t.name and t.topic_id.int:
                out[t.topic_id.int] = t.name
        gone = TopicNameError(UNKNOWN_TOPIC_ID, "topic id not among the cluster's topics", False)
        for k in keys:
            out.setdefault(k, gone)
        return out

    # ------------------------------------------------------------------ sweep
    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cluster %s: topic-name sweep failed", self.cluster)

    async def sweep_once(self) -> int:
        """Re-validate entries idle for ``idle_revalidate_s`` with batched lookups; evict the ids the
        cluster no longer has, drop expired negative entries. Returns how many were evicted.
        Called by the periodic task; public so that operators and tests can force one."""
        now = time.monotonic()
        self.stats.sweeps += 1
        for key in [k for k, n in self._negative.items() if n.expires <= now]:
            del self._negative[key]
        self._epoch += 1
        self._marks.append((now, self._epoch))
        horizon = now - self.idle_revalidate_s
        while len(self._marks) >= 2 and self._marks[1][0] <= horizon:
            self._marks.popleft()
        if self._marks[0][0] > horizon:
            return 0
        threshold = self._marks[0][1]  # entries used since that mark have epoch >= threshold
        idle: list[int] = []
        for key, e in self._entries.items():
            if e.epoch >= threshold:
                break  # entries are sorted by epoch
            idle.append(key)
        if not idle:
            return 0
        try:
            results = await self._query(idle)
        except _LookupFailed as exc:
            log.warning("cluster %s: topic-name sweep could not re-validate %d ids: %s", self.cluster, len(idle), exc)
            return 0
        evicted = 0
        for key in idle:
            r = results.get(key)
            entry = self._entries.get(key)
            if entry is None:
                continue
            if isinstance(r, str):
                entry.epoch = self._epoch  # validated: not asked again for idle_revalidate_s
                self._entries.move_to_end(key)
            elif r is not None and r.code == UNKNOWN_TOPIC_ID:
                self._evict(key, "sweep")
                self._remember_negative(key, r)
                evicted += 1
        if evicted:
            log.info("cluster %s: sweep evicted %d dead topic ids", self.cluster, evicted)
        return evicted

    # ------------------------------------------------------------------ learning and forgetting
    def learn(self, topic_id: UUID, name: str) -> None:
        """Record that ``topic_id`` names ``name`` (seen in a response the cluster just sent)."""
        key = topic_id.int
        if key and name:
            self._learn(key, name)

    def forget(self, topic_id: UUID, reason: str) -> None:
        """Drop ``topic_id`` from the cache (not negative-cached: a later resolve asks again)."""
        self._evict(topic_id.int, reason)

    def observe_unknown_id(self, topic_id: UUID) -> None:
        """The cluster answered UNKNOWN_TOPIC_ID (100) or UNKNOWN_TOPIC_OR_PARTITION (3) for this id
        in some response: evict it and negative-cache it. The caller matches Fetch partitions to
        request ids by position, because Tansu zeroes the id of an unknown topic in its answer."""
        key = topic_id.int
        if key:
            self._kill(key, "unknown_id", UNKNOWN_TOPIC_OR_PARTITION)

    def observe_metadata_response(self, version: int, msg: Any) -> None:
        """Learn (id, name) of every healthy topic of a v10+ answer; evict ids (or, for a lookup by
        name, every id of that name) the answer says do not exist."""
        if version < 10:
            return  # no ids before v10
        for t in msg.topics:
            code = t.error_code
            key = t.topic_id.int
            if code == ErrorCode.NONE:
                if key and t.name:
                    self._learn(key, t.name)
            elif code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
                if key:
                    self._kill(key, "unknown_id", code)
                elif t.name:
                    self._kill_name(t.name, "unknown_id", code)

    def observe_create_topics_response(self, version: int, msg: Any, *, validate_only: bool = False) -> None:
        """Learn the ids of created topics (v7+). A validate-only request creates nothing, yet a
        broker may still put an id in the answer: pass ``validate_only`` to ignore it."""
        if version < 7 or validate_only:
            return
        for t in msg.topics:
            if t.error_code == ErrorCode.NONE and t.topic_id.int and t.name:
                self._learn(t.topic_id.int, t.name)

    def observe_delete_topics_response(self, version: int, msg: Any) -> None:
        """Evict deleted topics by id (v6+) and by name (all ids that name had)."""
        for r in msg.responses:
            code = r.error_code
            if code == ErrorCode.NONE:
                reason = "deleted"
            elif code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
                reason = "unknown_id"
            else:
                continue
            key = r.topic_id.int if version >= 6 else 0
            if key:
                self._kill(key, reason, code)
            if r.name:
                self._kill_name(r.name, reason, code)

    # ------------------------------------------------------------------ internals
    def _learn(self, key: int, name: str) -> None:
        e = self._entries.get(key)
        if e is not None:
            if e.name != name:  # only possible if Kafka ever allows renames (KIP-...); follow it
                self._unindex(key, e.name)
                e.name = name
                self._by_name.setdefault(name, set()).add(key)
            e.epoch = self._epoch
            self._entries.move_to_end(key)
            return
        self._negative.pop(key, None)
        self._epoch += 1
        self._entries[key] = _Entry(name, self._epoch)
        self._by_name.setdefault(name, set()).add(key)
        if len(self._entries) > self.max_entries:
            old, oe = self._entries.popitem(last=False)
            self._unindex(old, oe.name)
            self._count_eviction("lru")

    def _evict(self, key: int, reason: str) -> bool:
        e = self._entries.pop(key, None)
        if e is None:
            return False
        self._unindex(key, e.name)
        self._count_eviction(reason)
        return True

    def _kill(self, key: int, reason: str, code: int) -> None:
        self._evict(key, reason)
        msg = f"topic id does not exist (seen {reason}, error {code})"
        self._remember_negative(key, TopicNameError(UNKNOWN_TOPIC_ID, msg, False))

    def _kill_name(self, name: str, reason: str, code: int) -> None:
        for key in list(self._by_name.get(name, ())):
            self._kill(key, reason, code)

    def _unindex(self, key: int, name: str) -> None:
        keys = self._by_name.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_name[name]

    def _count_eviction(self, reason: str) -> None:
        ev = self.stats.evictions
        ev[reason] = ev.get(reason, 0) + 1
        self._metrics.evicted(reason)

    def _remember_negative(self, key: int, error: TopicNameError) -> None:
        if self.negative_ttl_s <= 0:
            return
        now = time.monotonic()
        self._negative.pop(key, None)  # re-insert at the end: the dict's order is its age order
        self._negative[key] = _Negative(error, now, now + self.negative_ttl_s)
        if len(self._negative) > self.max_entries:
            del self._negative[next(iter(self._negative))]
