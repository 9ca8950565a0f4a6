"""What a connection's core needs from its virtual cluster, as a protocol (no I/O, no asyncio).

``ConnectionCore`` (proxy/sansio/core.py) depends on this, not on ``VirtualCluster`` (proxy/runtime/cluster.py,
which owns listeners and sockets): its tests drive it with a small fake (tests/support/
fake_cluster.py), and the sans-IO side of proxy/ never imports the asyncio side. Learning a node
address is split the same way: ``learn_node`` is bookkeeping, and a node whose listener is not
bound yet comes back as ``OPEN_LISTENER``, which the core turns into an action its carrier
carries out (``Actions.open_listener``: the carrier binds the port).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol
from uuid import UUID

if TYPE_CHECKING:
    from kgate.api import TopicNameError
    from kgate.config import ProxySettings
    from kgate.filters.chain import FilterChain
    from kgate.filters.exchanges import ExchangeObserver
    from kgate.proxy.control.metrics import ClusterMetrics
    from kgate.proxy.sansio.answer_memo import AnswerMemo
    from kgate.proxy.sansio.plans import Plans

Address = tuple[str, int]


class OpenListener:
    """``learn_node``'s answer for a node kgate routes but serves on no listener yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OPEN_LISTENER"


OPEN_LISTENER: Final = OpenListener()


class TopicNames(Protocol):
    """The cluster's topic-id resolver, as hooks and the core use it (kgate/topic_ids)."""

    def cached(self, topic_id: UUID) -> str | None: ...
    async def resolve(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]: ...
    def observe(self, api_key: int, version: int, msg: Any, request: Any = None) -> None: ...


class OwnClient(Protocol):
    """kgate's own upstream connection, for a hook's ``send_request`` (proxy/carrier/upstream_client.py)."""

    async def request(self, api_key: int, message: Any, version: int | None = None) -> tuple[int, Any]: ...


class HookServices(Protocol):
    """What a hook's ``FilterContext`` reaches beyond its message (proxy/sansio/context.py)."""

    @property
    def own_client(self) -> OwnClient: ...
    @property
    def topic_names(self) -> TopicNames: ...


class ClusterPort(HookServices, Protocol):
    """Everything ``ConnectionCore`` asks of its cluster.

    The chain-derived tables (``chain``, ``plans``, ``answers``, ``filter_limits``; see
    proxy/sansio/chain_tables.py) are read when a core starts and when a reload hands it the new chain.
    """

    @property
    def name(self) -> str: ...
    @property
    def settings(self) -> ProxySettings: ...
    @property
    def metrics(self) -> ClusterMetrics: ...
    @property
    def chain(self) -> FilterChain: ...
    @property
    def plans(self) -> Plans: ...
    @property
    def answers(self) -> AnswerMemo: ...
    @property
    def filter_limits(self) -> dict[int, tuple[int, int]]: ...
    @property
    def exchange_observer(self) -> ExchangeObserver | None: ...

    def learn_node(self, node_id: int, host: str, port: int) -> Address | OpenListener | None:
        """Learn a node's broker address from a response; its client-facing address, ``OPEN_LISTENER``
        when that address needs a listener bound first, or None when kgate cannot serve it."""

    def mapped_address(self, node_id: int, host: str, port: int) -> Address | None:
        """The client-facing address of a node already routed, learning nothing."""

    def nodes_for_empty_answer(self) -> Sequence[tuple[int, str, int]]:
        """Called when a Metadata answer names no broker (proxy/sansio/rewrite.py, ``fill_brokers``):
        every node kgate routes, as (node id, client-facing host, port), to complete it with. An
        event as much as a query: the cluster counts and logs such answers here."""

    def observe_response(self, api_key: int, version: int, msg: Any, request: Any = None) -> None:
        """A decoded response passing by (topic names to learn)."""
