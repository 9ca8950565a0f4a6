"""The connection core's lifecycle: its states and every allowed transition, in one table.

A connection is OPEN until a request hook awaits (SUSPENDED: later requests wait in the backlog,
since forwarding them first would reorder them at the broker). A client that leaves while a
request is suspended does not lose what it sent: the connection finishes the requests it has
read (GONE_SUSPENDED, then CLIENT_GONE while the backlog replays), because a broker processes
what it has read from a client that left and acks=0 data must not be lost. CLOSED is final.

A client that half-closes its socket (a FIN: ``shutdown(SHUT_WR)``, or the first sign of a full
close) sends nothing more but may still read, as against a broker, which answers what it has
read: the connection goes on (HALF_CLOSED, HALF_SUSPENDED while a hook awaits) until every
request read from it has gone upstream and every answer has gone to the client, and then ends
(FINISHED, logged as the client leaving). A client whose socket is gone for good (a reset, a
failed write) after a half-close is one that left: HALF_SUSPENDED + CLIENT_CLOSED is
GONE_SUSPENDED; a HALF_CLOSED one is closed at once, as an OPEN one is.

| state | SUSPEND | HOOK_DONE | CLIENT_EOF | CLIENT_CLOSED | FINISHED | CLOSE |
|---|---|---|---|---|---|---|
| OPEN | SUSPENDED | - | HALF_CLOSED | - | - | CLOSED |
| SUSPENDED | - | OPEN | HALF_SUSPENDED | GONE_SUSPENDED | - | CLOSED |
| HALF_CLOSED | HALF_SUSPENDED | - | - | - | CLOSED | CLOSED |
| HALF_SUSPENDED | - | HALF_CLOSED | - | GONE_SUSPENDED | - | CLOSED |
| GONE_SUSPENDED | - | CLIENT_GONE | - | - | - | CLOSED |
| CLIENT_GONE | GONE_SUSPENDED | - | - | - | CLOSED | CLOSED |
| CLOSED | CLOSED | CLOSED | CLOSED | CLOSED | CLOSED | CLOSED |

Framing within a state (a request or response streaming through, a header held until it is
whole) is not lifecycle: it is the byte counts in ``ConnectionCore`` (``_req_skip``,
``_req_stream_left``, ``_stream_left``, ``_held``), see docs/architecture.md.

A client that leaves an OPEN (or HALF_CLOSED) connection is a CLOSE, not CLIENT_CLOSED: nothing
it sent is left to finish, so ``ConnectionCore.client_closed`` closes (the table once listed OPEN +
CLIENT_CLOSED too, an edge nothing fired; tests/proxy/sansio/test_core_states.py checks every edge
is fired). A second EOF (a transport that reads again after a resume) is no event:
``ConnectionCore.client_eof`` ignores it.

An event the table does not list for a state is a bug in kgate, not in a peer's bytes:
``advance`` raises, and the tests (tests/proxy/sansio/test_core_states.py) drive every pair.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    # identity hashing in C: Enum's own __hash__ is a Python call, and every transition hashes
    # twice (the table's key) and more (the state sets); ~10 such calls per connection
    __hash__ = object.__hash__

    OPEN = "open"
    SUSPENDED = "suspended"
    HALF_CLOSED = "half-closed"  # the client sends no more; answers still go to it
    HALF_SUSPENDED = "half-suspended"  # half-closed while a request hook awaits
    GONE_SUSPENDED = "gone-suspended"
    CLIENT_GONE = "client-gone"
    CLOSED = "closed"


class Event(enum.Enum):
    __hash__ = object.__hash__

    SUSPEND = "suspend"  # a request hook returned an awaitable
    HOOK_DONE = "hook-done"  # that hook run ended (any verdict)
    CLIENT_EOF = "client-eof"  # the client half-closed: it sends no more, it may still read
    CLIENT_CLOSED = "client-closed"  # the client's socket closed
    FINISHED = "finished"  # nothing read from a departed (or half-closed) client is left to send (or answer)
    CLOSE = "close"  # kgate closes (an error, a filter, a timeout, shutdown, the broker left)


S, E = State, Event

TRANSITIONS: dict[tuple[State, Event], State] = {
    (S.OPEN, E.SUSPEND): S.SUSPENDED,
    (S.OPEN, E.CLIENT_EOF): S.HALF_CLOSED,
    (S.OPEN, E.CLOSE): S.CLOSED,
    (S.SUSPENDED, E.HOOK_DONE): S.OPEN,
    (S.SUSPENDED, E.CLIENT_EOF): S.HALF_SUSPENDED,
    (S.SUSPENDED, E.CLIENT_CLOSED): S.GONE_SUSPENDED,
    (S.SUSPENDED, E.CLOSE): S.CLOSED,
    (S.HALF_CLOSED, E.SUSPEND): S.HALF_SUSPENDED,
    (S.HALF_CLOSED, E.FINISHED): S.CLOSED,
    (S.HALF_CLOSED, E.CLOSE): S.CLOSED,
    (S.HALF_SUSPENDED, E.HOOK_DONE): S.HALF_CLOSED,
    (S.HALF_SUSPENDED, E.CLIENT_CLOSED): S.GONE_SUSPENDED,
    (S.HALF_SUSPENDED, E.CLOSE): S.CLOSED,
    (S.GONE_SUSPENDED, E.HOOK_DONE): S.CLIENT_GONE,
    (S.GONE_SUSPENDED, E.CLOSE): S.CLOSED,
    (S.CLIENT_GONE, E.SUSPEND): S.GONE_SUSPENDED,
    (S.CLIENT_GONE, E.FINISHED): S.CLOSED,
    (S.CLIENT_GONE, E.CLOSE): S.CLOSED,
    # once closed, late events (a hook finishing, the other socket's loss) change nothing
    **{(S.CLOSED, e): S.CLOSED for e in Event},
}

SUSPENDED_STATES = frozenset({S.SUSPENDED, S.HALF_SUSPENDED, S.GONE_SUSPENDED})
HALF_CLOSED_STATES = frozenset({S.HALF_CLOSED, S.HALF_SUSPENDED})
CLIENT_GONE_STATES = frozenset({S.GONE_SUSPENDED, S.CLIENT_GONE})


class TransitionError(RuntimeError):
    """An event the state table does not allow: a bug in kgate."""


def advance(state: State, event: Event) -> State:
    """The state after ``event``; raises ``TransitionError`` for a pair the table does not list."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise TransitionError(f"event {event.value} is not allowed in state {state.value}") from None
