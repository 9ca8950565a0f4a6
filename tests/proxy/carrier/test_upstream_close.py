"""How kgate closes a broker connection once its client has left.

A broker may still be working on what the client sent just before leaving (an acks=0 Produce
above all), and some brokers (Tansu) drop it if the peer closes fully; so kgate half-closes such
a connection and closes it after a grace period (proxy/carrier/gentle_close.py). When everything
sent upstream has been answered there is nothing to finish: the connection closes at once, which
spares every short-lived client a half-close, a second read and a grace timer.

A real kgate in-process in front of Tansu; the grace queue is read from the running cluster.
"""

from __future__ import annotations

import time

from support.inproc_kgate import InprocKgate, kgate_in_process  # noqa: F401  (the kgate fixture)
from support.wire import RawClient, produce_request


def _in_grace_after_the_client_left(k: InprocKgate) -> int:
    """Broker connections in the grace queue once kgate has let go of the one client connection."""
    deadline = time.monotonic() + 5
    while k.call(lambda: len(k.cluster.connections)):
        assert time.monotonic() < deadline, "kgate kept the connection after its client left"
        time.sleep(0.01)
    return k.call(lambda: len(k.cluster.gentle._waiting))  # type: ignore[no-any-return]


def test_a_client_whose_requests_were_all_answered_leaves_no_broker_connection_behind(kgate: InprocKgate) -> None:
    with RawClient(kgate.port) as c:
        c.api_versions()
        c.metadata()
    in_grace = _in_grace_after_the_client_left(kgate)
    assert in_grace == 0, "the broker connection was half-closed although the broker owed nothing"


def test_a_client_that_sent_acks0_data_gets_the_grace_period(kgate: InprocKgate) -> None:
    """The broker sends nothing back for acks=0, so kgate cannot know it is done: half-close, then wait."""
    with RawClient(kgate.port) as c:
        c.api_versions()
        c.send(produce_request(3, "gentle-close-acks0", 0, [b"v"], acks=0))
    in_grace = _in_grace_after_the_client_left(kgate)
    assert in_grace == 1, "a connection that carried acks=0 data was closed without the grace period"
