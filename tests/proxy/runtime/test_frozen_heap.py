"""proxy/runtime/frozen_heap.py: a reload's retired filter chain is collected although it was built before
``gc.freeze()`` (frozen objects are never collected: without the refreeze, every reload would leave
the old chain's reference cycles in memory for good).

The first tests pin the collector's behaviour the module relies on; the last one runs the real
reload path (``VirtualCluster.replace_chain`` -> hand-over -> the old chain's ``close``) in an
in-process kgate in front of Tansu, with the test process's heap frozen as the CLI freezes kgate's.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from support.inproc_kgate import InprocKgate, make_config

from kgate.api import Filter
from kgate.filters.chain import FilterChain
from kgate.filters.registry import register_filter
from kgate.proxy.runtime import frozen_heap


class Cyclic(Filter):
    """A filter in a reference cycle with itself: only the cycle collector can free it."""

    name = "test-cyclic"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config or {})
        self.me = self


register_filter("test-cyclic", Cyclic)


@pytest.fixture
def frozen() -> Iterator[None]:
    """The CLI's frozen heap, for one test; the test runner's heap is unfrozen again after it."""
    frozen_heap.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        frozen_heap._frozen = False


def test_release_does_nothing_where_the_heap_was_never_frozen() -> None:
    assert not frozen_heap.frozen()
    before = gc.get_freeze_count()
    assert frozen_heap.release_retired() == 0
    assert gc.get_freeze_count() == before


def test_a_cycle_frozen_then_dropped_is_collected_only_after_release(frozen: None) -> None:
    del frozen
    obj = Cyclic()
    ref = weakref.ref(obj)
    frozen_heap.freeze()  # obj is now in the permanent generation, as the startup chain is
    del obj
    gc.collect()
    assert ref() is not None, "the collector freed a frozen object: the refreeze would be pointless"
    assert frozen_heap.release_retired() > 0
    assert ref() is None
    assert gc.get_freeze_count() > 0, "the heap must be frozen again after the release"


def test_a_reloaded_chain_built_before_the_freeze_is_freed(tansu: Any) -> None:
    k = InprocKgate(make_config(tansu.bootstrap, filters=[{"name": "test-cyclic"}])).start()
    try:
        (old,) = k.call(lambda: list(k.cluster.chain.filters))
        ref = weakref.ref(old)
        del old
        k.call(frozen_heap.freeze)  # as run() does once kgate is ready
        k.call(lambda: k.cluster.replace_chain(FilterChain([])))
        deadline = time.monotonic() + 10
        while ref() is not None:  # no connection holds the old chain: it closes at once
            assert time.monotonic() < deadline, "the replaced chain's filter was never collected"
            time.sleep(0.02)
        # read on kgate's loop: the release runs there, and from this thread the moment between its
        # unfreeze and its freeze can be seen
        assert k.call(gc.get_freeze_count) > 0, "the heap must be frozen again after the release"
    finally:
        k.stop()
        gc.unfreeze()
        frozen_heap._frozen = False
