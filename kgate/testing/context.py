"""A scripted :class:`kgate.api.FilterContext` for unit tests of filter hooks.

A hook only sees its message and its context, so a hook is unit-tested by calling it with a
decoded message and a ``FakeContext``: no socket, no broker, no event loop unless the hook is a
coroutine. What the context knows is scripted up front:

* ``cache``: the names kgate already holds (``cached_topic_name`` answers from it, and
  ``topic_names`` answers from it without counting a lookup, as kgate's cache does);
* ``cluster``: what "the cluster" answers when ``topic_names`` has to look an id up; an id in
  neither mapping is answered ``UNKNOWN_TOPIC_ID`` (the cluster says it does not exist), and a
  ``TopicNameError`` value is returned as scripted (e.g. a failed lookup);
* ``upstream``: ``send_request``'s answers, by api key: a response object, or a function of the
  request, or an exception to raise.

Every lookup and request is recorded (``lookups``, ``sent``) so a test can assert that a hook
did, or did not, wait for the cluster.

A ``FakeContext`` is also a :class:`kgate.api.ClusterServices` (``virtual_cluster``, and
``send_request`` takes ``max_version`` and ``node_id``), so a filter's ``start`` can be given one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kgate.api import ConnectionInfo, ErrorCode, TopicNameError

if TYPE_CHECKING:
    from kgate.api import ClusterServices, FilterContext

UpstreamAnswer = Any | Callable[[Any], Any] | BaseException


class FakeContext:
    """Implements :class:`kgate.api.FilterContext` from scripted answers (see the module doc)."""

    def __init__(
        self,
        api_key: int,
        api_version: int,
        *,
        request: Any = None,
        correlation_id: int = 1,
        connection: ConnectionInfo | None = None,
        client_id: str | None = "test-client",
        principal: str | None = None,
        cache: Mapping[UUID, str] | None = None,
        cluster: Mapping[UUID, str | TopicNameError] | None = None,
        upstream: Mapping[int, UpstreamAnswer] | None = None,
    ) -> None:
        self.api_key = int(api_key)
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.request = request
        self.connection = connection or ConnectionInfo(
            client_address="127.0.0.1:50000", virtual_cluster="test", client_id=client_id, principal=principal
        )
        self.state: dict[str, Any] = {}
        self.cache: dict[UUID, str] = dict(cache or {})
        self.cluster: dict[UUID, str | TopicNameError] = dict(cluster or {})
        self.upstream: dict[int, UpstreamAnswer] = {int(k): v for k, v in (upstream or {}).items()}
        #: every ``topic_names`` call that had to ask "the cluster": the ids it asked for
        self.lookups: list[list[UUID]] = []
        #: every ``send_request``: (api_key, message, version)
        self.sent: list[tuple[int, Any, int | None]] = []

    def for_response(self, request: Any = None) -> FakeContext:
        """The context a response hook of this exchange sees: same state, connection and scripts.

        ``request`` defaults to this context's ``request`` (what a request hook decoded).
        """
        other = FakeContext(
            self.api_key,
            self.api_version,
            request=self.request if request is None else request,
            correlation_id=self.correlation_id,
            connection=self.connection,
        )
        other.state = self.state
        other.cache, other.cluster, other.upstream = self.cache, self.cluster, self.upstream
        other.lookups, other.sent = self.lookups, self.sent
        return other

    @property
    def virtual_cluster(self) -> str:
        """As :class:`kgate.api.ClusterServices`: the connection's cluster name."""
        return self.connection.virtual_cluster

    async def send_request(
        self,
        api_key: int,
        message: Any,
        version: int | None = None,
        *,
        max_version: int | None = None,
        node_id: int | None = None,
    ) -> Any:
        """The scripted answer for ``api_key`` (``max_version`` and ``node_id`` are accepted and ignored)."""
        self.sent.append((int(api_key), message, version))
        if int(api_key) not in self.upstream:
            raise AssertionError(f"FakeContext: no scripted upstream answer for api key {int(api_key)}")
        answer = self.upstream[int(api_key)]
        if isinstance(answer, BaseException):
            raise answer
        return answer(message) if callable(answer) else answer

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        return self.cache.get(topic_id)

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        ids = list(dict.fromkeys(topic_ids))
        out: dict[UUID, str | TopicNameError] = {t: self.cache[t] for t in ids if t in self.cache}
        missing = [t for t in ids if t not in out]
        if missing:
            self.lookups.append(missing)
        for t in missing:
            found = self.cluster.get(t)
            if found is None:
                out[t] = TopicNameError(ErrorCode.UNKNOWN_TOPIC_ID, "topic id does not exist", False)
            else:
                out[t] = found
                if isinstance(found, str):
                    self.cache[t] = found  # kgate caches what a lookup taught it
        return out


if TYPE_CHECKING:  # mypy checks that the fake still implements both protocols

    def _as_context(fake: FakeContext) -> FilterContext:
        return fake

    def _as_services(fake: FakeContext) -> ClusterServices:
        return fake
