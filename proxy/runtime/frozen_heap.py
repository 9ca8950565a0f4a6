"""The CLI process's frozen heap: ``gc.freeze()`` once ready, and a refreeze when a reload retires objects.

Why freeze: the modules, codec schemas and config (~34,000 objects) live as long as the process,
yet every full collection walked them all again; frozen, a full collection skips them.
Connections are what make full collections happen: each holds ~130 tracked objects (transports,
core, readers, deques, exchanges), and with clients connecting over and over the collections'
share is a cost per connection that the relay, with a tenth of the heap, does not pay
(docs/performance.md, "Frozen startup heap", and "Figures moved out of code comments").

Why refreeze: frozen objects are never collected. A configuration reload retires a filter chain
(or a whole virtual cluster) built before the freeze; whatever of it sits in a reference cycle
(filters holding their services, bound methods in observer lists, loggers' records) would stay in
memory for good, a little more on every reload. Once the retired objects are closed,
``release_retired()`` unfreezes, collects once and freezes again: one full collection per reload
(a few ms; reloads are rare), and the heap is frozen as before.

Only for the CLI process: an embedding application or a test keeps its heap as it is (nothing is
frozen, and ``release_retired()`` then does nothing).
"""

from __future__ import annotations

import gc

__all__ = ["freeze", "frozen", "release_retired"]

_frozen = False


def freeze() -> None:
    """Collect once, then freeze what is left (the process is ready to serve)."""
    global _frozen
    gc.collect()
    gc.freeze()
    _frozen = True


def frozen() -> bool:
    """Whether this process froze its heap (``freeze()`` ran)."""
    return _frozen


def release_retired() -> int:
    """After a reload's retired objects are closed: let the collector see them; what it freed.

    Does nothing (returns 0) where ``freeze()`` never ran.
    """
    if not _frozen:
        return 0
    gc.unfreeze()
    freed = gc.collect()
    gc.freeze()
    return freed
