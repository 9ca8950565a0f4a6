"""Drive a ``ConnectionCore`` (proxy/sansio/core.py) without sockets or an event loop.

``RecordingActions`` is the carrier the core talks to: it keeps the bytes the core sent each
way, the reasons reading is paused for, the hook runs it asked to await (the test settles them
by calling ``core.hook_done``), the held-bytes reports and the close. A stand-in by design: the
point of the sans-IO core is that its decisions can be observed exactly, which sockets cannot do
(a socket merges writes and hides when they happened). The same core runs on real sockets under
every end-to-end test.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import Any

from kgate.api import ConnectionInfo, Filter
from kgate.config import parse_config
from kgate.filters.chain import Decision, FilterChain, PendingRun
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.cluster_port import Address
from kgate.proxy.sansio.core import ConnectionCore, Suspension
from support.fake_cluster import FakeCluster


class Sink:
    """Bytes sent one way, in order."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.writes = 0

    def write(self, d: Any) -> None:
        self.data += bytes(d)
        self.writes += 1


class RecordingActions:
    def __init__(self, cluster: FakeCluster | None = None) -> None:
        self.cluster = cluster  # binds the listeners the core asks for (open_listener)
        self.client = Sink()
        self.upstream = Sink()
        self.client_paused: set[str] = set()
        self.broker_paused: set[str] = set()
        self.spawned: list[Suspension] = []
        self.held: list[int] = []
        self.close_reason: CloseReason | None = None

    def send_upstream(self, data: bytes | memoryview) -> None:
        assert self.close_reason is None, "sent upstream after close"
        self.upstream.write(data)

    def send_client(self, data: bytes | memoryview) -> None:
        assert self.close_reason is None, "answered after close"
        self.client.write(data)

    def pause_client(self, reason: str) -> None:
        self.client_paused.add(reason)

    def resume_client(self, reason: str) -> None:
        self.client_paused.discard(reason)

    def pause_broker(self, reason: str) -> None:
        self.broker_paused.add(reason)

    def resume_broker(self, reason: str) -> None:
        self.broker_paused.discard(reason)

    def spawn(self, pending: Awaitable[Decision], suspension: Suspension) -> None:
        if isinstance(pending, PendingRun):
            pending.close()
        elif inspect.iscoroutine(pending):
            pending.close()  # the test decides how the run ends (core.hook_done)
        self.spawned.append(suspension)

    def report_held(self, held: int) -> None:
        self.held.append(held)

    def open_listener(self, node_id: int) -> Address | None:
        return None if self.cluster is None else self.cluster.bind(node_id)

    def close_sockets(self, reason: CloseReason) -> None:
        assert self.close_reason is None, "closed twice"
        self.close_reason = reason


def make_core(filters: Sequence[Filter] = (), **proxy: Any) -> tuple[ConnectionCore, RecordingActions]:
    """A core of a one-cluster kgate with ``filters`` and ``proxy`` settings, and its recorder."""
    cfg = parse_config(
        {"proxy": proxy, "virtual_clusters": [{"name": "t", "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]},
        "test",
    )
    cluster = FakeCluster(cfg.proxy, FilterChain(list(filters)))
    actions = RecordingActions(cluster)
    core = ConnectionCore(cluster, ConnectionInfo(client_address="127.0.0.1:1", virtual_cluster="t"), actions)
    return core, actions
