"""A plain counter the data path bumps and a scrape reads: ``count.n += 1``.

The data path holds the counter itself (``Plans.route`` hands out a request label's; the core
keeps Metadata's and ApiVersions' rewrite counters), so counting is one attribute store, not a
dict lookup by label on every request. A named class rather than a one-item list, so what
``cell[0]`` meant is written down; compiled (proxy/runtime/compiled.py) it is a C struct field.
"""

from __future__ import annotations


class Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def __repr__(self) -> str:
        return f"Count({self.n})"
