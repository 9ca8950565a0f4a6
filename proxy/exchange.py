"""What one client connection keeps per request, and the refusal kgate raises for a version."""

from __future__ import annotations

from typing import Any, Final

from kgate.codec.headers import HeaderError
from kgate.proxy.plans import ResponsePlan

RAW_SASL: Final = -1  # api key marker of a bare SASL token after SaslHandshake v0


class VersionRefused(HeaderError):
    """A request version outside what the filters that must see it handle (fail closed)."""


class Exchange:
    """A request that expects an answer, the plan for that answer, and the answer once it is ready.

    The header-only path (``ConnectionCore._track``) builds its exchanges without calling
    ``__init__``, setting the same attributes itself: an attribute added here goes there too.
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
    # (proxy/deadlines.py): a Produce's timeout_ms, or the small request frame itself, read by the
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
        self.plan = plan  # what to do with the answer (proxy/plans.py), fixed when the request went out
        self.response: bytes | memoryview | None = None
