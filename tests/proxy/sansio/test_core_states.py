"""The connection lifecycle table (proxy/sansio/states.py), driven pair by pair.

Every (state, event) pair is either in the table, and ``advance`` returns its target, or not,
and ``advance`` raises ``TransitionError``: an event the table does not list is a bug in kgate,
and must be loud rather than leave a connection in a state nothing expects.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from support.core_driver import make_core

from kgate.api import ApiKey, Filter, FilterContext, on_request
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataResponse
from kgate.codec.headers import parse_request_header, response_frame
from kgate.filters.chain import Decision, Verdict
from kgate.proxy.sansio import states
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.states import (
    CLIENT_GONE_STATES,
    HALF_CLOSED_STATES,
    SUSPENDED_STATES,
    TRANSITIONS,
    Event,
    State,
    TransitionError,
    advance,
)
from kgate.testing.frames import request_bytes

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


def test_a_half_closed_client_never_sends_again() -> None:
    """After the client's FIN no event returns to a state that reads from it: half-closed states
    lead only to half-closed ones, to the departed ones (its socket gone for good) or to CLOSED."""
    for (src, _), dst in TRANSITIONS.items():
        if src in HALF_CLOSED_STATES:
            assert dst in HALF_CLOSED_STATES | CLIENT_GONE_STATES or dst is State.CLOSED, (src, dst)


def test_only_suspend_enters_a_suspended_state() -> None:
    for (src, event), dst in TRANSITIONS.items():
        if dst in SUSPENDED_STATES and src not in SUSPENDED_STATES:
            assert event is Event.SUSPEND, (src, event)


def test_a_hook_cannot_end_twice() -> None:
    """HOOK_DONE is only legal while suspended (or after close): a second hook_done for one
    suspension would release a request out of order."""
    for state in (State.OPEN, State.HALF_CLOSED, State.CLIENT_GONE):
        with pytest.raises(TransitionError):
            advance(state, Event.HOOK_DONE)


# -- every edge of the table is one the core fires (no dead edge) ------------------------------
class _SlowMetadata(Filter):
    """A Metadata request hook that awaits: the test ends each run itself (``hook_done``)."""

    name = "test-slow-metadata"

    @on_request(ApiKey.METADATA)
    async def metadata(self, ctx: FilterContext, request: Any) -> Any:
        await asyncio.sleep(0)
        return None


def _metadata(cid: int) -> bytes:
    return request_bytes(int(ApiKey.METADATA), 12, MetadataRequest(topics=[]), correlation_id=cid)


class _Recording(dict[tuple[State, Event], State]):
    """The table, remembering each pair ``advance`` looked up (proxy/sansio/states.py reads it per event)."""

    def __init__(self, table: dict[tuple[State, Event], State]) -> None:
        super().__init__(table)
        self.fired: set[tuple[State, Event]] = set()

    def __getitem__(self, key: tuple[State, Event]) -> State:
        self.fired.add(key)
        return super().__getitem__(key)


def _walk(steps: list[str], table: _Recording) -> None:
    """Drive a core through ``steps`` (the table records every transition taken)."""
    core, out = make_core([_SlowMetadata({})])
    cid = 0
    for step in steps:
        if step == "request":
            cid += 1
            core.receive_client(_metadata(cid))
        elif step == "hook-done":
            s = out.spawned.pop(0)
            core.hook_done(s, Decision(Verdict.FORWARD, s.message))
        elif step == "unreadable":  # a Metadata request whose body does not decode
            cid += 1
            head = _metadata(cid)
            head = head[: parse_request_header(head, 2).body_offset] + b"\xff"  # the body: one stray byte
            core.receive_client((len(head) - 4).to_bytes(4, "big") + head[4:])
        elif step == "client-closed":
            core.client_closed()
        elif step == "eof":  # the client half-closed (its FIN)
            core.client_eof()
        elif step == "answer":  # the broker answers the oldest request it has
            head = core.upstream_waiting[0]
            core.receive_broker(response_frame(head.cid, 1, MetadataResponse().encode(12)))
        else:
            core.close(CloseReason.SHUTDOWN)


def test_the_core_fires_every_edge_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each transition the table lists is one some sequence of events takes: an edge nothing fires
    is a state machine that says more than the code does (OPEN + CLIENT_CLOSED was one)."""
    table = _Recording(states.TRANSITIONS)
    monkeypatch.setattr(states, "TRANSITIONS", table)
    walks = [
        ["request", "hook-done", "close"],  # OPEN -> SUSPENDED -> OPEN -> CLOSED
        ["request", "close"],  # SUSPENDED -> CLOSED
        ["request", "client-closed", "close"],  # SUSPENDED -> GONE_SUSPENDED -> CLOSED
        # GONE_SUSPENDED -> CLIENT_GONE -> (the backlog suspends again) GONE_SUSPENDED -> ... FINISHED
        ["request", "request", "client-closed", "hook-done", "hook-done"],
        # CLIENT_GONE -> CLOSED (CLOSE): the backlog's next request cannot be read
        ["request", "unreadable", "client-closed", "hook-done"],
        # OPEN -> HALF_CLOSED (an answer owed) -> FINISHED once it went
        ["request", "hook-done", "eof", "answer"],
        ["request", "hook-done", "eof", "close"],  # HALF_CLOSED -> CLOSED
        # SUSPENDED -> HALF_SUSPENDED -> HALF_CLOSED -> (the backlog suspends) HALF_SUSPENDED -> ...
        ["request", "request", "eof", "hook-done", "hook-done", "answer", "answer"],
        ["request", "eof", "close"],  # HALF_SUSPENDED -> CLOSED
        # HALF_SUSPENDED -> GONE_SUSPENDED: the client's socket went for good (a reset) after its FIN
        ["request", "eof", "client-closed", "hook-done"],
    ]
    for walk in walks:
        _walk(walk, table)
    live = {pair for pair in TRANSITIONS if pair[0] is not State.CLOSED}
    assert live - table.fired == set(), "edges nothing fires"
