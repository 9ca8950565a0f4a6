"""The ``ConnectionInfo`` of a client connection kgate serves, with kgate's own throttle action.

A module of its own, outside the compiled hot modules (proxy/runtime/compiled.py): mypyc refuses a class
with ``__slots__`` in a module it compiles, and this class needs them (its parent is a slots
dataclass, and a connection must not grow a ``__dict__``).
"""

from __future__ import annotations

import asyncio

from kgate.api import ConnectionInfo
from kgate.proxy.carrier.flow import THROTTLED, ReadGate


class ClientInfo(ConnectionInfo):
    """A client connection's ``ConnectionInfo``, plus the one action kgate's own quota filter needs.

    ``pause_reading_for(seconds)`` stops reading this client for that long (the ``ReadGate``'s
    timed pause), as a Kafka broker mutes a throttled channel (filters/builtin/quotas/filter.py). It is
    internal: not part of ``kgate.api``. It holds the gate, never the connection, so it makes no
    reference cycle (a finished connection is freed by reference counting), and costs a
    connection one slot store, no bound method or partial. ``quota_client`` is the quota filter's
    cache of this connection's budgets, unset until it first sees the connection.

    A throttled connection torn down while its throttle runs keeps its gate (not the connection)
    until the throttle's timer ends, at most ``max_throttle_ms``: cancelling it in every teardown
    would cost every connection a call for the rare throttled one.
    """

    __slots__ = ("gate", "quota_client")
    gate: ReadGate
    quota_client: object  # the quota filter's budgets for this connection (filters/builtin/quotas/filter.py)

    def pause_reading_for(self, seconds: float) -> None:
        self.gate.pause_for(seconds, asyncio.get_running_loop(), THROTTLED)
