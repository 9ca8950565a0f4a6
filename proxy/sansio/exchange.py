"""What one client connection keeps per request, and the refusal kgate raises for a version."""

from __future__ import annotations

from typing import Any, Final

from kgate.codec.headers import HeaderError
from kgate.proxy.sansio.plans import ResponsePlan

RAW_SASL: Final = -1  # api key marker of a bare SASL token after SaslHandshake v0


class VersionRefused(HeaderError):
    """A request version outside what the filters that must see it handle (fail closed)."""


class Exchange:
    """A request that expects an answer, the plan for that answer, and the answer once it is ready.

    The header-only path builds its exchanges with ``tracked_exchange`` (below), which sets the
    same attributes without calling ``__init__``: an attribute added here goes there too.
    """

    # ``t0_ns``, ``sent_ns``, ``up_ns``, ``req`` and ``req_bytes`` are set only while an exchange
    # observer is installed (filters/exchanges.py): unobserved exchanges never assign them, so they
    # cost nothing.
    __slots__ = (
        "api_key",
        "api_version",
        "cid",
        "plan",
        "req",
        "req_bytes",
        "request",
        "response",
        "sent_ns",
        "state",
        "t0_ns",
        "up_ns",
        "wait",
    )
    t0_ns: int  # time.monotonic_ns() when kgate read the request's header
    sent_ns: int  # when its last byte went to the broker (later than t0_ns if it waited on a hook or came in pieces)
    up_ns: int  # when the broker's answer was in kgate's hands; 0: none came (kgate answered, acks=0)
    req: bytes | memoryview | list[bytes | memoryview]  # the request frame, or the pieces it streamed in
    req_bytes: int  # the request frame's size, size prefix included
    # ``wait`` is set only by the header-only path, for requests that ask the broker to hold them
    # (proxy/sansio/deadlines.py): a Produce's timeout_ms, or the small request frame itself, read by the
    # timeout sweep only if the broker is slower than the margin. Others never assign it.
    wait: int | bytes

    def __init__(
        self,
        cid: int,
        api_key: int,
        api_version: int,
        request: Any = None,
        state: dict[str, Any] | None = None,
        plan: ResponsePlan = ResponsePlan.PASS,
    ) -> None:
        self.cid = cid
        self.api_key = api_key
        self.api_version = api_version
        self.request = request  # decoded request, when a request hook decoded it
        self.state = state  # the request hooks' per-exchange scratch space, for the response hooks
        self.plan = plan  # what to do with the answer (proxy/sansio/plans.py), fixed when the request went out
        self.response: bytes | memoryview | None = None


def _maker() -> Any:
    """``object.__new__`` when an ``Exchange`` can be made without its ``__init__``; None compiled."""
    try:
        object.__new__(Exchange)
    except TypeError:  # compiled (tools/compile_hot.py): a native class is built by its __init__ only
        return None
    return object.__new__


_new: Final[Any] = _maker()


def tracked_exchange(cid: int, api_key: int, api_version: int, request: Any, plan: ResponsePlan) -> Exchange:
    """``Exchange(cid, api_key, api_version, request, None, plan)`` for the header-only path, made the
    cheapest way this build allows."""
    if _new is None:
        return Exchange(cid, api_key, api_version, request, None, plan)  # compiled: a direct C call
    # pure Python: without the class call, which runs __init__ through type.__call__ (the cost is in
    # docs/performance.md); the same attributes (tests/proxy/test_core_answer_fast_path.py checks)
    ex: Exchange = _new(Exchange)
    ex.cid = cid
    ex.api_key = api_key
    ex.api_version = api_version
    ex.request = request
    ex.state = None
    ex.plan = plan
    ex.response = None
    return ex
