"""The topic id -> name cache: pure data, no asyncio, the clock injected.

Ids are keyed by ``UUID.int``: ``uuid.UUID.__hash__`` is Python code, ``int`` hashing is C, and
``cached()`` runs per partition of every Fetch a name-needing filter sees (docs/performance.md,
"Figures moved out of code comments").

Ids never change meaning (a deleted-and-recreated topic gets a new id, topics cannot be
renamed), so an entry can only become *dead*, never wrong. Hence no TTL on names: a bounded LRU
plus a periodic sweep that re-validates idle entries (``begin_sweep`` / ``finish_sweep``; the
resolver does the asking). "Does not exist" answers are kept in a negative cache for
``negative_ttl_s`` so a hot dead id does not cost a lookup per request.

LRU order and idleness share one integer clock, ``epoch``, bumped on every insertion and every
sweep. A hit moves its entry to the MRU end only when the entry's epoch is older than the clock,
so a hot id costs one dict lookup and a compare per hit. The order is LRU except that entries hit
between the same two insertions keep the order of their first hit there; every entry used since
the last insertion still outlives every entry that was not. Entries are therefore sorted by
epoch, and the sweep walks idle ones from the LRU end.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from uuid import UUID

from kgate.api.topic_names import TopicNameError
from kgate.codec.error_codes import ErrorCode

UNKNOWN_TOPIC_ID = int(ErrorCode.UNKNOWN_TOPIC_ID)


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


class Entry:
    """A cached name. ``epoch`` orders entries for LRU and marks when they were last used."""

    __slots__ = ("epoch", "name")

    def __init__(self, name: str, epoch: int) -> None:
        self.name = name
        self.epoch = epoch


class Negative:
    """A remembered "no name": the error, when it was learnt, when it expires."""

    __slots__ = ("error", "expires", "since")

    def __init__(self, error: TopicNameError, since: float, expires: float) -> None:
        self.error = error
        self.since = since
        self.expires = expires


class TopicIdCache:
    """Names by id (LRU, bounded), ids by name, and a negative cache; see the module doc."""

    def __init__(
        self,
        *,
        max_entries: int = 100_000,
        negative_ttl_s: float = 5.0,
        idle_revalidate_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[str], None] | None = None,
    ) -> None:
        self.max_entries = max(1, max_entries)
        self.negative_ttl_s = negative_ttl_s
        self.idle_revalidate_s = idle_revalidate_s
        self.clock = clock
        self._on_evict = on_evict
        self.stats = ResolverStats()
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        self.by_name: dict[str, set[int]] = {}
        self.negative: dict[int, Negative] = {}
        self.epoch = 0
        self._marks: deque[tuple[float, int]] = deque()  # (time, epoch) at each sweep

    def __len__(self) -> int:
        return len(self.entries)

    # -- reading -------------------------------------------------------------------------------
    def cached(self, topic_id: UUID) -> str | None:
        """The cached name of ``topic_id`` or None. O(1); counts a hit or a miss."""
        key = topic_id.int
        e = self.entries.get(key)
        if e is None:
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        if e.epoch != self.epoch:
            e.epoch = self.epoch
            self.entries.move_to_end(key)
        return e.name

    def get_cached(self, ids: Iterable[UUID]) -> tuple[dict[UUID, str], list[UUID]]:
        """Names found in the cache, and the ids that are not (each once, in first-seen order)."""
        found: dict[UUID, str] = {}
        missing: list[UUID] = []
        entries, epoch, stats = self.entries, self.epoch, self.stats
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

    def negative_error(self, key: int, now: float) -> TopicNameError | None:
        """The remembered error for ``key`` if it has not expired at ``now`` (expired: dropped)."""
        neg = self.negative.get(key)
        if neg is None:
            return None
        if neg.expires > now:
            self.stats.negative_hits += 1
            return neg.error
        del self.negative[key]
        return None

    def negative_since(self, key: int) -> float | None:
        """When ``key`` was last learnt dead, if it is in the negative cache."""
        neg = self.negative.get(key)
        return None if neg is None else neg.since

    # -- learning and forgetting ---------------------------------------------------------------
    def learn(self, key: int, name: str) -> None:
        """``key`` names ``name`` (seen in an answer the cluster just sent, or looked up)."""
        e = self.entries.get(key)
        if e is not None:
            if e.name != name:  # only possible if Kafka ever allows renames; follow it
                self._unindex(key, e.name)
                e.name = name
                self.by_name.setdefault(name, set()).add(key)
            e.epoch = self.epoch
            self.entries.move_to_end(key)
            return
        self.negative.pop(key, None)
        self.epoch += 1
        self.entries[key] = Entry(name, self.epoch)
        self.by_name.setdefault(name, set()).add(key)
        if len(self.entries) > self.max_entries:
            old, oe = self.entries.popitem(last=False)
            self._unindex(old, oe.name)
            self._count_eviction("lru")

    def evict(self, key: int, reason: str) -> bool:
        """Drop ``key``'s name (not negative-cached: a later resolve asks again)."""
        e = self.entries.pop(key, None)
        if e is None:
            return False
        self._unindex(key, e.name)
        self._count_eviction(reason)
        return True

    def kill(self, key: int, reason: str, code: int) -> None:
        """The cluster says ``key`` does not exist (error ``code``): evict and negative-cache it."""
        self.evict(key, reason)
        msg = f"topic id does not exist (seen {reason}, error {code})"
        self.remember_negative(key, TopicNameError(UNKNOWN_TOPIC_ID, msg, False))

    def kill_name(self, name: str, reason: str, code: int) -> None:
        """Every id ``name`` had is dead (the topic was deleted by name)."""
        for key in list(self.by_name.get(name, ())):
            self.kill(key, reason, code)

    def remember_negative(self, key: int, error: TopicNameError) -> None:
        if self.negative_ttl_s <= 0:
            return
        now = self.clock()
        self.negative.pop(key, None)  # re-insert at the end: the dict's order is its age order
        self.negative[key] = Negative(error, now, now + self.negative_ttl_s)
        if len(self.negative) > self.max_entries:
            del self.negative[next(iter(self.negative))]

    # -- sweeping ------------------------------------------------------------------------------
    def begin_sweep(self) -> list[int]:
        """Start a sweep: drop expired negatives, bump the clock, return the keys idle for
        ``idle_revalidate_s`` (LRU end first), which the caller re-validates upstream."""
        now = self.clock()
        self.stats.sweeps += 1
        for key in [k for k, n in self.negative.items() if n.expires <= now]:
            del self.negative[key]
        self.epoch += 1
        self._marks.append((now, self.epoch))
        horizon = now - self.idle_revalidate_s
        while len(self._marks) >= 2 and self._marks[1][0] <= horizon:
            self._marks.popleft()
        if self._marks[0][0] > horizon:
            return []
        threshold = self._marks[0][1]  # entries used since that mark have epoch >= threshold
        idle: list[int] = []
        for key, e in self.entries.items():
            if e.epoch >= threshold:
                break  # entries are sorted by epoch
            idle.append(key)
        return idle

    def finish_sweep(self, idle: Iterable[int], results: dict[int, str | TopicNameError]) -> int:
        """Apply the cluster's answers for the idle keys; how many were evicted as dead."""
        evicted = 0
        for key in idle:
            r = results.get(key)
            entry = self.entries.get(key)
            if entry is None:
                continue
            if isinstance(r, str):
                entry.epoch = self.epoch  # validated: not asked again for idle_revalidate_s
                self.entries.move_to_end(key)
            elif r is not None and r.code == UNKNOWN_TOPIC_ID:
                self.evict(key, "sweep")
                self.remember_negative(key, r)
                evicted += 1
        return evicted

    # -- internals -----------------------------------------------------------------------------
    def _unindex(self, key: int, name: str) -> None:
        keys = self.by_name.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.by_name[name]

    def _count_eviction(self, reason: str) -> None:
        ev = self.stats.evictions
        ev[reason] = ev.get(reason, 0) + 1
        if self._on_evict is not None:
            self._on_evict(reason)
