"""Topic id -> name resolution (KIP-516), as its own package.

* :mod:`kgate.topic_ids.cache` - the cache: pure data, the clock injected (LRU of names,
  names -> ids, negative cache, idle sweep bookkeeping);
* :mod:`kgate.topic_ids.lookup` - kgate's own Metadata lookups: building requests, reading answers;
* :mod:`kgate.topic_ids.observers` - what each api key's response teaches the cache;
* :mod:`kgate.topic_ids.resolver` - the asyncio resolver tying them together (single flight,
  batching, periodic sweep), talking upstream through the small ``Upstream`` protocol;
* :mod:`kgate.topic_ids.metrics` - its Prometheus metrics.

It depends on the codec and :mod:`kgate.api` only, never on the proxy (tests/unit/test_layering.py).
See docs/topic-ids.md.
"""

from kgate.topic_ids.cache import ResolverStats, TopicIdCache
from kgate.topic_ids.lookup import MAX_IDS_PER_REQUEST, RETRIABLE_CODES, ZERO_ID_ERROR
from kgate.topic_ids.observers import OBSERVERS
from kgate.topic_ids.resolver import TopicNameResolver, Upstream

__all__ = [
    "MAX_IDS_PER_REQUEST",
    "OBSERVERS",
    "RETRIABLE_CODES",
    "ZERO_ID_ERROR",
    "ResolverStats",
    "TopicIdCache",
    "TopicNameResolver",
    "Upstream",
]
