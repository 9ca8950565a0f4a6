"""The public filter API: what a filter author writes against.

A filter is a class with hooks. Each hook declares the api key (and optionally a version
range) and direction it wants, and receives the decoded message::

    class DenyTopics(Filter):
        name = "deny-topics"

        @on_request(ApiKey.PRODUCE)
        def produce(self, ctx: FilterContext, request: Any) -> Result:
            ...
            return FORWARD

Only api keys some filter wants are decoded; every other frame, and every message no filter
changed, goes out as its original bytes.

A hook returns a result (or ``None``, the same as ``FORWARD``):

* ``FORWARD`` - pass the message on unchanged (its original bytes are sent).
* ``forward(message)`` - pass on this message (changed in place or new); kgate re-encodes it.
* ``respond(response)`` - requests only: answer the client directly; nothing goes upstream.
* ``DROP`` - requests only, and only where the protocol allows no answer (Produce acks=0).
* ``close(reason)`` - close the client connection.

A hook may be a plain function or a coroutine. A plain function costs no task or future;
a coroutine suspends only its own message (later messages of that connection wait behind it
so that Kafka's per-connection ordering holds; other connections run on).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol
from uuid import UUID

from kgate.api.services import ClusterServices
from kgate.api.topic_names import TopicNameError
from kgate.codec import api
from kgate.codec.generated.api_keys import ApiKey


class FilterConfigError(ValueError):
    """A filter's configuration is invalid; the message says which key and why."""


# -- results ---------------------------------------------------------------------------------
class Result:
    """Base of every hook result."""

    __slots__ = ()


class Forward(Result):
    __slots__ = ("message",)

    def __init__(self, message: Any = None) -> None:
        self.message = message  # None: unchanged, forward the original bytes

    def __repr__(self) -> str:
        return "FORWARD" if self.message is None else f"forward({type(self.message).__name__})"


class Respond(Result):
    __slots__ = ("message",)

    def __init__(self, message: Any) -> None:
        self.message = message


class Drop(Result):
    __slots__ = ()


class Close(Result):
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


FORWARD = Forward()
DROP = Drop()


def forward(message: Any = None) -> Forward:
    """Forward ``message`` (re-encoded) instead of the original bytes; no argument: unchanged."""
    return FORWARD if message is None else Forward(message)


def respond(message: Any) -> Respond:
    """Answer the client with ``message`` (a response object of the request's api key)."""
    return Respond(message)


def close(reason: str) -> Close:
    return Close(reason)


HookResult = Result | None
Hook = Callable[["FilterContext", Any], HookResult | Awaitable[HookResult]]


# -- hooks -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class HookSpec:
    """What one hook method asked for."""

    direction: str  # "request" or "response"
    api_key: int
    min_version: int
    max_version: int | None  # None: every version kgate's codec knows
    needs_state: bool = False  # response hooks: run only where a request hook stored ctx.state
    peek: bool = False  # Produce request hooks: may decide FORWARD from the topic list alone
    screen: str = ""  # the filter's method that may decide from the message's bytes (see on_request)


def _hook(
    direction: str,
    api_key: int,
    min_version: int,
    max_version: int | None,
    needs_state: bool = False,
    peek: bool = False,
    screen: str = "",
) -> Callable[[Any], Any]:
    if int(api_key) not in api.API_INFO:
        raise ValueError(f"unknown api key {api_key}")

    def mark(fn: Any) -> Any:
        specs = getattr(fn, "__kgate_hooks__", ())
        spec = HookSpec(direction, int(api_key), min_version, max_version, needs_state, peek, screen)
        fn.__kgate_hooks__ = (*specs, spec)
        return fn

    return mark


def on_request(
    api_key: int, *, min_version: int = 0, max_version: int | None = None, peek: bool = False, screen: str = ""
) -> Callable[[Any], Any]:
    """Mark a method as the hook for requests of ``api_key`` (versions inclusive).

    ``peek=True`` (Produce only): the hook may first be called with the request's header fields
    and its topic list but no partition data yet, while the records are still arriving. If it
    returns FORWARD (or None) synchronously, the request streams on without kgate holding it
    whole; any other result, or an awaitable, makes kgate wait for the whole request and call the
    hook again with it. Only for hooks that decide from topics alone and have no side effects
    that must not happen twice. Applies when every request hook for that Produce version peeks,
    and when the request names a single topic (the others' names only come after the records).

    ``screen="method_name"``: a method of the same filter, ``screen(ctx, body) -> Result | None``,
    that kgate may call first with the request body's bytes (after the header; for a peeked Produce
    possibly only its start). ``FORWARD`` says the hook would forward this request unchanged, so
    kgate neither decodes it nor calls the hook (``ctx.request`` is then None in response hooks);
    ``None`` (undecided) or anything else makes kgate decode it and call the hook as usual. Used
    only when every request hook of that message has a screen. A screen must agree with its hook.
    """
    if peek and int(api_key) != ApiKey.PRODUCE:
        raise ValueError("peek is only available for Produce requests")
    return _hook("request", api_key, min_version, max_version, peek=peek, screen=screen)


def on_response(
    api_key: int,
    *,
    min_version: int = 0,
    max_version: int | None = None,
    needs_state: bool = False,
    screen: str = "",
) -> Callable[[Any], Any]:
    """Mark a method as the hook for responses of ``api_key`` (versions inclusive).

    ``needs_state=True``: call the hook only for exchanges where a request hook stored something
    in ``ctx.state``. Responses nobody else needs are then never decoded (they stream through),
    which matters for Fetch: a policy that only patches the responses of requests it changed
    should not cost every Fetch response a decode.

    ``screen="method_name"`` (Metadata only, for now): a method of the same filter, ``screen(ctx,
    body) -> Result | None``, that kgate calls first with the response body's bytes: ``FORWARD``
    (the hook would forward it unchanged) or ``forward(new_body_bytes)`` (the body the hook's
    change encodes to) decides without a decode; ``None`` makes kgate decode it and call the hook.
    Used only when every response hook of that message has a screen; the screens run in chain
    order, each on the body the previous one returned. A screen must agree with its hook byte for
    byte.
    """
    if screen and int(api_key) != ApiKey.METADATA:
        raise ValueError("response screens are only available for Metadata")
    return _hook("response", api_key, min_version, max_version, needs_state, screen=screen)


# -- context ---------------------------------------------------------------------------------
@dataclass(slots=True)
class ConnectionInfo:
    """Facts about the client connection a message came from."""

    client_address: str  # "host:port" of the peer, or the original client a PROXY protocol header names
    virtual_cluster: str
    client_id: str | None = None  # from the latest request header
    principal: str | None = None  # mTLS certificate subject (Kafka's form), replaced by SASL's once it succeeds


class FilterContext(Protocol):
    """What a hook can see and do besides its message."""

    @property
    def api_key(self) -> int: ...
    @property
    def api_version(self) -> int: ...
    @property
    def correlation_id(self) -> int: ...
    @property
    def connection(self) -> ConnectionInfo: ...

    @property
    def request(self) -> Any:
        """In a response hook: the decoded request it answers, if a request hook decoded it."""

    @property
    def state(self) -> dict[str, Any]:
        """Scratch space of this exchange, shared by a request hook and its response's hooks."""

    async def send_request(self, api_key: int, message: Any, version: int | None = None) -> Any:
        """Send kgate's own request upstream (not on the client's connection) and return the response."""

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        """The name of ``topic_id`` if kgate knows it already; never waits."""

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        """Names of ``topic_ids``, looked up upstream where not cached; an error object per failure."""


# -- filter base -----------------------------------------------------------------------------
class Filter:
    """Base class of every filter; one instance per virtual cluster.

    Subclasses set ``name`` (the name used in YAML) and decorate hook methods with
    ``on_request`` / ``on_response``. ``validate_config`` checks and normalises the YAML
    mapping before any instance is made, so that a bad config stops kgate before it binds.
    """

    name: ClassVar[str] = ""
    hooks: ClassVar[tuple[tuple[str, HookSpec], ...]] = ()
    #: True: while this filter is in a cluster's chain, requests of api keys kgate's codec does not know
    #: (so no filter can see them) close the connection, and ApiVersions does not advertise them. For
    #: filters that must see every request (an authorizer): fail closed rather than let one pass unseen.
    refuses_unknown_api_keys: ClassVar[bool] = False
    #: False: this filter never asks for topic names (``ctx.topic_names``, ``ctx.cached_topic_name``), so
    #: it gives kgate no reason to learn names from passing Metadata and Fetch answers (decoding them
    #: costs every client). A chain learns names while any filter with hooks leaves this True.
    uses_topic_names: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found: list[tuple[str, HookSpec]] = []
        for attr in dir(cls):
            fn = getattr(cls, attr, None)
            for spec in getattr(fn, "__kgate_hooks__", ()):
                found.append((attr, spec))
        cls.hooks = tuple(found)

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        """Return the config to construct with; raise FilterConfigError. Default: no keys allowed."""
        if config:
            raise FilterConfigError(f"takes no configuration, got keys {sorted(config)}")
        return config

    def start(self, services: ClusterServices) -> None:
        """Called once per instance when its virtual cluster starts, inside the running event loop.

        ``services`` (kgate.api.ClusterServices) is the cluster's: kgate's own upstream requests
        and its topic-name service, usable outside any hook. A filter that keeps state on the
        cluster (``internal-topics``) keeps it here and may start background tasks, which it
        cancels in ``close``. Default: nothing. Must not block; a raise stops kgate's start-up.
        """

    async def close(self) -> None:
        """Release resources at shutdown."""
