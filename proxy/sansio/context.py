"""The ``FilterContext`` kgate hands to every hook: message facts plus cluster services."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kgate.api import ConnectionInfo

if TYPE_CHECKING:
    from kgate.api import TopicNameError
    from kgate.proxy.sansio.cluster_port import HookServices


class MessageContext:
    """One per decoded message that some hook wants; cheap to make (slots, no I/O)."""

    __slots__ = (
        "_cluster",
        "_state",
        "api_key",
        "api_version",
        "connection",
        "correlation_id",
        "frame_bytes",
        "request",
    )

    def __init__(
        self,
        cluster: HookServices,
        connection: ConnectionInfo,
        api_key: int,
        api_version: int,
        correlation_id: int,
        request: Any = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        self._cluster = cluster
        self.connection = connection
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.request = request
        self._state = state
        #: a request's frame size on the wire (size prefix included), set by the core; 0 for a response.
        #: Internal (not ``kgate.api``): the quotas filter charges Produce bytes when the request is read.
        self.frame_bytes = 0

    @property
    def state(self) -> dict[str, Any]:
        """Per-exchange scratch space (made on first use; shared with the response's hooks)."""
        if self._state is None:
            self._state = {}
        return self._state

    async def send_request(self, api_key: int, message: Any, version: int | None = None) -> Any:
        """kgate's own request over its own upstream connection (never the client's)."""
        _version, response = await self._cluster.own_client.request(api_key, message, version)
        return response

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        return self._cluster.topic_names.cached(topic_id)

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        return await self._cluster.topic_names.resolve(topic_ids)
