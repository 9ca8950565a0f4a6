"""The carrier's broker-connection phases (proxy/carrier/carrier_states.py), pair by pair, and on sockets."""

from __future__ import annotations

import itertools

import pytest

from kgate.proxy.carrier.carrier_states import TRANSITIONS, Phase, Step, advance
from kgate.proxy.sansio.states import TransitionError


@pytest.mark.parametrize(("phase", "step"), list(itertools.product(Phase, Step)), ids=lambda v: v.value)
def test_every_pair_is_allowed_or_refused(phase: Phase, step: Step) -> None:
    if (phase, step) in TRANSITIONS:
        assert advance(phase, step) is TRANSITIONS[(phase, step)]
    else:
        with pytest.raises(TransitionError, match=f"{step.value} is not allowed in phase {phase.value}"):
            advance(phase, step)


def test_the_connection_is_made_once_and_torn_down_once() -> None:
    """One connect per client connection (never back to IDLE or CONNECTING), one teardown, final."""
    for (_src, _step), dst in TRANSITIONS.items():
        assert dst not in (Phase.IDLE, Phase.CONNECTING) or _step is Step.FIRST_BYTES
    assert not [pair for pair in TRANSITIONS if pair[0] is Phase.TORN_DOWN]
    for phase in Phase:
        if phase is not Phase.TORN_DOWN:
            assert advance(phase, Step.TEARDOWN) is Phase.TORN_DOWN
