"""Why kgate closes a client connection: one enum, so logs, metrics and tests name reasons alike.

The value is the label of ``kgate_connections_closed_on_error_total{reason}`` for the reasons
that are errors (logged as warnings and counted); the others are the ordinary ends of a
connection (logged at debug, not counted as errors). Each close also carries a detail string
for the log line (the peer's bad size, the filter's own reason, ...).
"""

from __future__ import annotations

import enum


class CloseReason(enum.Enum):
    __hash__ = object.__hash__  # identity hashing in C (see proxy/sansio/states.py)

    # ordinary ends
    CLIENT_LEFT = "client-left"
    BROKER_CLOSED = "broker-closed"
    DRAINED = "drained"
    SHUTDOWN = "shutdown"
    RELOAD = "reload"  # still on a replaced filter chain at the reload deadline (proxy/sansio/chain_handover.py)
    REFUSED = "refused"  # over max_connections: counted by kgate_connections_refused_total instead
    # the client's bytes
    BAD_FRAME = "bad-frame"
    MALFORMED_REQUEST = "malformed-request"
    REFUSED_VERSION = "refused-version"
    UNDECODABLE_REQUEST = "undecodable-request"
    # the broker's bytes
    BAD_UPSTREAM_FRAME = "bad-upstream-frame"
    UNEXPECTED_RESPONSE = "unexpected-response"
    OUT_OF_ORDER = "out-of-order"
    UNDECODABLE_RESPONSE = "undecodable-response"
    UPSTREAM_UNREACHABLE = "upstream-unreachable"
    # filters
    FILTER_ERROR = "filter-error"
    FILTER_CLOSE = "filter-close"
    FILTER_DROP = "filter-drop"
    FILTER_MISUSE = "filter-misuse"
    # time limits (proxy/carrier/timeouts.py) and kgate's own faults
    TIMEOUT = "timeout"
    INTERNAL = "internal"

    @property
    def is_error(self) -> bool:
        """Counted and logged as a warning (the ordinary ends are not)."""
        return self not in _ORDINARY


_ORDINARY = frozenset(
    {
        CloseReason.CLIENT_LEFT,
        CloseReason.BROKER_CLOSED,
        CloseReason.DRAINED,
        CloseReason.SHUTDOWN,
        CloseReason.REFUSED,
        CloseReason.RELOAD,
    }
)
