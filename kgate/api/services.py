"""What a filter may use outside any one message: its virtual cluster's services.

A hook's ``FilterContext`` lives for one message. Some filters also need to act on their own,
with no client request in flight: ``internal-topics`` keeps its marks in a topic on the cluster
and polls it, so every kgate instance of a fleet learns a mark another instance wrote. kgate
hands each filter instance its cluster's ``ClusterServices`` once, through ``Filter.start``,
inside the running event loop; the filter may keep it and start background tasks (it cancels
them in ``Filter.close``).

Requests sent here go over kgate's own upstream connections, never a client's: they do not
queue behind a client's long-poll Fetch, and do not disturb a client's correlation ids. They are
not seen by any filter hook, so a filter may read and write a topic it hides from clients.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol
from uuid import UUID

from kgate.api.topic_names import TopicNameError


class ClusterServices(Protocol):
    """One virtual cluster's services, for a filter's own work (see ``Filter.start``)."""

    @property
    def virtual_cluster(self) -> str:
        """The cluster's configured name (for log lines and metric labels)."""

    async def send_request(
        self,
        api_key: int,
        message: Any,
        version: int | None = None,
        *,
        max_version: int | None = None,
        node_id: int | None = None,
    ) -> Any:
        """Send kgate's own request and return the decoded response.

        ``version=None`` picks the highest version the broker and kgate's codec both know, at most
        ``max_version``. ``node_id`` sends it to that broker (a partition's leader, for Produce and
        Fetch) over a connection kgate keeps for that node and for filters only, so a Fetch that
        waits at the broker delays none of kgate's own lookups; ``None``: kgate's own connection to
        a bootstrap broker (keep such requests short). Raises
        ``ConnectionError`` (or a subclass) when no answer came: broker unreachable, timed out.
        """

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        """The name of ``topic_id`` if kgate knows it already; never waits."""

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        """Names of ``topic_ids``, looked up upstream where not cached; an error object per failure."""
