"""A filter chain a reload replaced, kept until the last exchange it started has ended.

A reload never closes a connection and never pauses one. From the moment the new chain is
installed, each open connection reads its next request with it (``ConnectionCore.switch_chain``);
every exchange already started keeps the chain that saw its request: its response hooks, its
per-exchange state and its exchange observers (the audit log, per-api metrics) are that chain's.
So a JoinGroup the broker holds for a rebalance, a long-poll Fetch, a pipelining producer's five
Produce requests in flight all finish as they began, while the client's next request already
meets the new filters.

``RetiredChain`` counts what still uses the old chain: each exchange that started on it, each
connection whose request hook is still running on it (it switches once the hook is done), and
the reload itself while it goes over the connections. When the count reaches zero the chain's
filters are closed, exactly once (``Filter.close``). A connection that closes with exchanges of
the old chain still open lets go of them as it closes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kgate.filters.chain import FilterChain
    from kgate.filters.exchanges import ExchangeObserver

log = logging.getLogger("kgate.reload")


class RetiredChain:
    """A replaced chain, its exchange observer, and how many exchanges and connections still use it."""

    __slots__ = ("_on_idle", "chain", "done", "observer", "retired_at", "users")

    def __init__(
        self,
        chain: FilterChain,
        observer: ExchangeObserver | None,
        on_idle: Callable[[RetiredChain], None],
    ) -> None:
        self.chain = chain
        #: the observer the cluster had installed for ``chain``: exchanges it started report to it
        self.observer = observer
        self._on_idle = on_idle
        #: the reload holds it while it goes over the connections (``release`` once it is done)
        self.users = 1
        self.done = False  # on_idle ran: the chain is (being) closed
        self.retired_at = time.monotonic()

    def hold(self) -> None:
        """One more exchange (or a connection mid-hook) uses the chain."""
        self.users += 1

    def release(self) -> None:
        """One user ended; the last one hands the chain to ``on_idle`` (once)."""
        self.users -= 1
        if self.users <= 0 and not self.done:
            self.done = True
            self._on_idle(self)

    def take(self) -> bool:
        """Shutdown closes the chain itself: whether it still had to (``on_idle`` never runs after)."""
        if self.done:
            return False
        self.done = True
        return True
