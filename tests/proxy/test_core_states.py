"""The connection lifecycle table (proxy/states.py), driven pair by pair.

Every (state, event) pair is either in the table, and ``advance`` returns its target, or not,
and ``advance`` raises ``TransitionError``: an event the table does not list is a bug in kgate,
and must be loud rather than leave a connection in a state nothing expects.
"""

from __future__ import annotations

import itertools

import pytest

from kgate.proxy.states import (
    CLIENT_GONE_STATES,
    SUSPENDED_STATES,
    TRANSITIONS,
    Event,
    State,
    TransitionError,
    advance,
)

ALL_PAIRS = list(itertools.product(State, Event))


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=lambda v: v.value)
def test_every_pair_is_allowed_or_refused(state: State, event: Event) -> None:
    if (state, event) in TRANSITIONS:
        assert advance(state, event) is TRANSITIONS[(state, event)]
    else:
        with pytest.raises(TransitionError, match=f"{event.value} is not allowed in state {state.value}"):
            advance(state, event)


def test_closed_is_final_and_absorbs_every_event() -> None:
    for event in Event:
        assert advance(State.CLOSED, event) is State.CLOSED


def test_every_state_but_closed_can_be_closed_by_kgate() -> None:
    """A timeout, a filter or shutdown must be able to end a connection whatever it is doing."""
    for state in State:
        assert advance(state, Event.CLOSE) is State.CLOSED


def test_every_state_reaches_closed() -> None:
    """No state is a trap: from each one some path of events ends the connection."""
    for start in State:
        seen, frontier = {start}, [start]
        while frontier:
            state = frontier.pop()
            for (src, _), dst in TRANSITIONS.items():
                if src is state and dst not in seen:
                    seen.add(dst)
                    frontier.append(dst)
        assert State.CLOSED in seen, start


def test_a_departed_client_never_comes_back() -> None:
    """Once the client left, no event returns to a state that reads from it."""
    for (src, _), dst in TRANSITIONS.items():
        if src in CLIENT_GONE_STATES:
            assert dst in CLIENT_GONE_STATES or dst is State.CLOSED, (src, dst)


def test_only_suspend_enters_a_suspended_state() -> None:
    for (src, event), dst in TRANSITIONS.items():
        if dst in SUSPENDED_STATES and src not in SUSPENDED_STATES:
            assert event is Event.SUSPEND, (src, event)


def test_a_hook_cannot_end_twice() -> None:
    """HOOK_DONE is only legal while suspended (or after close): a second hook_done for one
    suspension would release a request out of order."""
    for state in (State.OPEN, State.CLIENT_GONE):
        with pytest.raises(TransitionError):
            advance(state, Event.HOOK_DONE)
