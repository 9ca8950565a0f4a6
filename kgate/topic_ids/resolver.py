"""Topic-id -> topic-name resolution for one virtual cluster: the asyncio part.

Since KIP-516 clients name topics by 16-byte ids in Fetch (13+), Produce (13+), OffsetCommit /
OffsetFetch (10+) and the new group protocols. Filters that act on topic names (ACLs, prefixes,
routing, metrics) need the name behind each id. ``TopicNameResolver`` answers that:

* **passively**, from traffic the proxy already decodes (``observers.OBSERVERS``: Metadata v10+,
  CreateTopics v7+ and DeleteTopics responses, and any UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION
  seen for an id). This costs no extra request and keeps the cache warm for the common case where
  a client asks for Metadata before it fetches;
* **actively** on a miss, with a Metadata request (``lookup``) over kgate's *own* upstream
  connection, never a client's: kgate's request must not queue behind a client's long-poll Fetch,
  must not consume a client's correlation ids, and must work for an instance of an HA fleet that
  never saw the client's Metadata (the client may have asked another instance).

The cache (``cache.TopicIdCache``) and the request building and parsing (``lookup``) are pure;
this module adds only what needs the event loop: single flight (concurrent misses of one id share
one request), batching (misses within ``batch_window_s`` share one Metadata request), the
periodic sweep, and timeouts. It talks to the cluster through ``Upstream``, a small protocol that
kgate's ``UpstreamClient`` implements. Everything runs on the event loop thread; there are no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from uuid import UUID

from kgate.api.topic_names import LOOKUP_FAILED, TopicNameError
from kgate.codec import api
from kgate.codec.generated.api_keys import API_VERSIONS, METADATA
from kgate.codec.generated.data.metadata import MetadataRequest
from kgate.topic_ids import lookup, observers
from kgate.topic_ids import metrics as _m
from kgate.topic_ids.cache import TopicIdCache
from kgate.topic_ids.lookup import MAX_IDS_PER_REQUEST, UNKNOWN_TOPIC_ID, ZERO_ID_ERROR

log = logging.getLogger("kgate.topic_names")


class Upstream(Protocol):
    """What the resolver needs of a connection to the cluster (kgate's ``UpstreamClient``).

    ``request`` raises on failure (any ``Exception``: the lookup then fails retriably).
    """

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        """The broker's version range per api key; empty until the first connection."""

    def pick_version(self, api_key: int, lo: int = 0, hi: int | None = None) -> int | None: ...

    async def request(
        self,
        api_key: int,
        message: Any,
        version: int | None = None,
        *,
        lo: int = 0,
        hi: int | None = None,
        timeout_s: float = ...,
    ) -> tuple[int, Any]: ...


class _LookupFailed(Exception):
    pass


class TopicNameResolver:
    """Cache of topic id -> name for one virtual cluster, shared by all its connections.

    ``cached`` and ``get_cached`` are the cache's own methods (one call on the Fetch hot path);
    ``resolve`` adds the upstream lookup for misses.
    """

    def __init__(
        self,
        client: Upstream,
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
        self.sweep_interval_s = sweep_interval_s
        self.lookup_timeout_s = lookup_timeout_s
        self._metrics = _m.ResolverMetrics(cluster)
        self.cache = TopicIdCache(
            max_entries=max_entries,
            negative_ttl_s=negative_ttl_s,
            idle_revalidate_s=idle_revalidate_s,
            on_evict=self._metrics.evicted,
        )
        self.stats = self.cache.stats
        self.cached = self.cache.cached
        self.get_cached = self.cache.get_cached
        self._inflight: dict[int, asyncio.Future[str | TopicNameError]] = {}
        self._pending: dict[int, asyncio.Future[str | TopicNameError]] = {}
        self._flush_handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        _m.register(self)

    @property
    def max_entries(self) -> int:
        return self.cache.max_entries

    @property
    def negative_ttl_s(self) -> float:
        return self.cache.negative_ttl_s

    @property
    def idle_revalidate_s(self) -> float:
        return self.cache.idle_revalidate_s

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
        return len(self.cache)

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
        cache = self.cache
        entries, stats = cache.entries, cache.stats
        for tid in ids:
            key = tid.int
            e = entries.get(key)
            if e is not None:
                stats.hits += 1
                if e.epoch != cache.epoch:
                    e.epoch = cache.epoch
                    entries.move_to_end(key)
                out[tid] = e.name
                continue
            if tid in out or tid in waits:
                continue
            stats.misses += 1
            if key == 0:
                out[tid] = ZERO_ID_ERROR
                continue
            if key in cache.negative:
                if now is None:
                    now = cache.clock()
                err = cache.negative_error(key, now)
                if err is not None:
                    out[tid] = err
                    continue
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
        cache = self.cache
        started = cache.clock()
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
            if isinstance(r, str) and len(cache.entries) < cache.max_entries and key not in cache.entries:
                cache.learn(key, r)
        for key in batch:
            got = results.get(key)
            r = TopicNameError(LOOKUP_FAILED, "no answer for this id", True) if got is None else got
            if isinstance(r, str):
                since = cache.negative_since(key)
                if since is not None and since >= started:
                    r = cache.negative[key].error  # seen dead (e.g. DeleteTopics) while the lookup was in flight
                else:
                    cache.learn(key, r)
            elif r.code == UNKNOWN_TOPIC_ID:
                cache.evict(key, "unknown_id")
                cache.remember_negative(key, r)
            elif not r.retriable:
                cache.remember_negative(key, r)
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
                if client.pick_version(METADATA, *lookup.BY_ID_VERSIONS) is not None:
                    out: dict[int, str | TopicNameError] = {}
                    for chunk, req in lookup.by_id_requests(keys):
                        version, resp = await self._request(req, *lookup.BY_ID_VERSIONS)
                        out.update(lookup.parse_by_id(chunk, version, resp))
                    return out
                if client.pick_version(METADATA, *lookup.ALL_TOPICS_VERSIONS) is not None:
                    _version, resp = await self._request(lookup.all_topics_request(), *lookup.ALL_TOPICS_VERSIONS)
                    return lookup.parse_all(keys, resp)
        except TimeoutError as exc:
            raise _LookupFailed(f"no answer within {self.lookup_timeout_s}s") from exc
        except Exception as exc:  # the upstream's failure (UpstreamError, OSError, ...): retriable
            raise _LookupFailed(str(exc) or type(exc).__name__) from exc
        return dict.fromkeys(keys, lookup.NO_TOPIC_IDS)

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
        idle = self.cache.begin_sweep()
        if not idle:
            return 0
        try:
            results = await self._query(idle)
        except _LookupFailed as exc:
            log.warning("cluster %s: topic-name sweep could not re-validate %d ids: %s", self.cluster, len(idle), exc)
            return 0
        evicted = self.cache.finish_sweep(idle, results)
        if evicted:
            log.info("cluster %s: sweep evicted %d dead topic ids", self.cluster, evicted)
        return evicted

    # ------------------------------------------------------------------ learning and forgetting
    def learn(self, topic_id: UUID, name: str) -> None:
        """Record that ``topic_id`` names ``name`` (seen in a response the cluster just sent)."""
        key = topic_id.int
        if key and name:
            self.cache.learn(key, name)

    def forget(self, topic_id: UUID, reason: str) -> None:
        """Drop ``topic_id`` from the cache (not negative-cached: a later resolve asks again)."""
        self.cache.evict(topic_id.int, reason)

    def observe(self, api_key: int, version: int, msg: Any, request: Any = None) -> None:
        """Let the cache learn from a decoded response passing by (``observers.OBSERVERS``)."""
        observer = observers.OBSERVERS.get(api_key)
        if observer is not None:
            observer(self.cache, version, msg, request)

    def observe_unknown_id(self, topic_id: UUID) -> None:
        """The cluster answered "no such topic" for this id in some response (see observers)."""
        observers.observe_unknown_id(self.cache, topic_id)

    def observe_metadata_response(self, version: int, msg: Any) -> None:
        observers.metadata(self.cache, version, msg)

    def observe_create_topics_response(self, version: int, msg: Any, *, validate_only: bool = False) -> None:
        if not validate_only:
            observers.create_topics(self.cache, version, msg)

    def observe_delete_topics_response(self, version: int, msg: Any) -> None:
        observers.delete_topics(self.cache, version, msg)
