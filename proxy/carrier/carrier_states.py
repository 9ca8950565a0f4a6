"""The carrier's side of a connection: its broker connection's phases, in one table (as states.py).

``ClientConnection`` (proxy/carrier/connection.py) connects upstream on the first bytes for the broker,
not at accept (a client that never sends costs no broker connection), and tears down once. What
it does with the core's upstream writes follows from the phase alone (``ClientConnection._bind_writes``):

| phase | the core's ``write_up`` |
|---|---|
| IDLE: no bytes for the broker yet | ``_first_write``: hold them, pause reading, connect |
| CONNECTING | ``send_upstream``: held until the broker is there |
| CONNECTED | the upstream transport's ``write`` (no wrapper call per request) |
| UPSTREAM_GONE: the broker closed | ``send_upstream`` (the core closes at once) |
| TORN_DOWN (final) | nothing: the core is detached (``ConnectionCore.detach``) |

An event the table does not list for a phase is a bug in kgate: ``advance`` raises.
"""

from __future__ import annotations

import enum

from kgate.proxy.sansio.states import TransitionError


class Phase(enum.Enum):
    __hash__ = object.__hash__  # identity hashing in C (see states.py)

    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    UPSTREAM_GONE = "upstream-gone"
    TORN_DOWN = "torn-down"


class Step(enum.Enum):
    __hash__ = object.__hash__

    FIRST_BYTES = "first-bytes"  # the core wrote its first bytes for the broker
    ADOPTED = "adopted"  # a target accepted and the connection is kept
    UPSTREAM_LOST = "upstream-lost"  # the broker closed the adopted connection
    TEARDOWN = "teardown"  # both sockets let go of; the core detached


P = Phase

TRANSITIONS: dict[tuple[Phase, Step], Phase] = {
    (P.IDLE, Step.FIRST_BYTES): P.CONNECTING,
    (P.CONNECTING, Step.ADOPTED): P.CONNECTED,
    (P.CONNECTED, Step.UPSTREAM_LOST): P.UPSTREAM_GONE,
    **{(p, Step.TEARDOWN): P.TORN_DOWN for p in (P.IDLE, P.CONNECTING, P.CONNECTED, P.UPSTREAM_GONE)},
}


def advance(phase: Phase, step: Step) -> Phase:
    """The phase after ``step``; raises ``TransitionError`` for a pair the table does not list."""
    try:
        return TRANSITIONS[(phase, step)]
    except KeyError:
        raise TransitionError(f"step {step.value} is not allowed in phase {phase.value}") from None
