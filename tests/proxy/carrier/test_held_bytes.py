"""The process-wide held-bytes account (proxy/carrier/held_bytes.py): pure, with recording holders."""

from __future__ import annotations

from kgate.proxy.carrier.held_bytes import HeldBytes


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.paused = False

    def held_cap_pause(self) -> None:
        self.paused = True

    def held_cap_resume(self) -> None:
        self.paused = False

    def __repr__(self) -> str:
        return self.name


def test_under_the_cap_nobody_pauses() -> None:
    h = HeldBytes(100)
    a, b = Conn("a"), Conn("b")
    h.update(a, 40)
    h.update(b, 60)
    assert h.total == 100
    assert not a.paused
    assert not b.paused


def test_over_the_cap_all_but_the_oldest_holder_pause_and_resume_in_order() -> None:
    h = HeldBytes(100)
    a, b, c = Conn("a"), Conn("b"), Conn("c")
    h.update(a, 60)
    h.update(b, 30)
    h.update(c, 20)  # 110 > 100: c pauses
    assert c.paused
    assert not a.paused
    assert not b.paused
    h.update(b, 45)  # b grows while over the cap: pauses too
    assert b.paused
    h.update(a, 90)  # the oldest holder always keeps reading (its frame must complete)
    assert not a.paused
    assert h.total == 155
    h.update(a, 0)  # a's frame completed
    assert h.total == 65
    assert not b.paused
    assert not c.paused
    assert h.peak == 155


def test_new_oldest_holder_resumes_even_while_over_the_cap() -> None:
    h = HeldBytes(50)
    a, b, c = Conn("a"), Conn("b"), Conn("c")
    h.update(a, 40)
    h.update(b, 30)
    h.update(c, 30)
    assert b.paused
    assert c.paused
    h.release(a)  # 60 > 50 still, but b now holds the longest: it must progress
    assert not b.paused
    assert c.paused
    h.release(b)
    assert not c.paused
    assert h.total == 30
    assert h.paused == 0


def test_a_closed_connection_never_reenters_the_account() -> None:
    """A connection torn down while its read was processed (its bytes already released) must not be
    counted again by the report at the end of that read: the account would keep it forever."""
    from kgate.config import parse_config
    from kgate.filters.chain import FilterChain
    from kgate.proxy.carrier.connection import ClientConnection
    from kgate.proxy.carrier.held_bytes import HELD
    from kgate.proxy.runtime.cluster import VirtualCluster
    from kgate.proxy.sansio.close_reason import CloseReason

    cfg = parse_config(
        {"virtual_clusters": [{"name": "t", "listen": "127.0.0.1:19998", "upstream": "127.0.0.1:9"}]}, "test"
    )
    cluster = VirtualCluster(cfg.virtual_clusters[0], cfg.proxy, FilterChain([]), cfg.topic_names)
    before = HELD.total
    closed = ClientConnection(cluster, None)
    closed.close(CloseReason.CLIENT_LEFT)
    closed.report_held(1000)  # what the end of the read being processed would report
    assert HELD.total == before
    live = ClientConnection(cluster, None)
    live.report_held(1000)
    assert HELD.total == before + 1000
    HELD.release(live)
    assert HELD.total == before
