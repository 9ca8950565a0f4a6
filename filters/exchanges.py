"""Finished exchanges, reported by the connection core to whoever observes them.

An *exchange* is one request and its answer. Observers (the ``audit-log`` filter, the
per-exchange Prometheus metrics in proxy/control/exchange_metrics.py) want one report per exchange:
when the request was read, its bytes, the answer handed to the client and when. The core calls
one ``ExchangeObserver`` per finished exchange, on the event loop, so an observer must be cheap
(the audit log only appends to a bounded queue; decoding happens on its writer thread).

Zero cost when nobody observes: the core holds ``None`` instead of an observer, and every
observation point is one ``is not None`` test (the exchanges themselves get no extra attribute
writes; see proxy/sansio/exchange.py). This module is internal (filter runtime), not ``kgate.api``:
it exposes kgate's per-exchange plumbing, which plugins must not come to depend on.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from uuid import UUID

from kgate.api import ConnectionInfo, FilterContext, TopicNameError
from kgate.codec import api


class FinishedExchange(Protocol):
    """What an observer may read of an exchange (``proxy.sansio.exchange.Exchange``)."""

    cid: int
    api_key: int
    api_version: int
    request: Any  # the decoded request when a request hook decoded it, else None
    state: dict[str, Any] | None  # the request hooks' state (policy decisions live under "kgate.policy")
    t0_ns: int  # time.monotonic_ns() when kgate read the request's header
    #: when its last byte went to the broker: ``t0_ns`` for a request forwarded whole at once (the
    #: same call), later for one that waited on a request hook (or behind one) or streamed through
    #: in pieces; for a request that never went upstream (a filter answered it), when it was
    #: answered, and ``up_ns`` stays 0
    sent_ns: int
    #: when the broker's answer was in kgate's hands (the whole frame, or the first bytes of one that
    #: streams through); 0 when no answer came from the broker (kgate answered, acks=0, closed first)
    up_ns: int
    #: the request frame (size prefix included), or the list of pieces it was forwarded in when it
    #: streamed through (a large Produce: never held whole; the list fills as its bytes pass)
    req: bytes | memoryview | list[bytes | memoryview]
    req_bytes: int  # the request frame's size on the wire, size prefix included


#: An answer as handed to the client: one frame, or the list of pieces it was forwarded in when it
#: streamed through (cut-through: never held whole; the pieces are the forwarded buffers, not
#: copies; fewer bytes than ``answer_bytes`` when the connection closed mid-answer).
Answer = bytes | memoryview | list[bytes | memoryview]

#: ``(exchange, connection, answer, answer_bytes, end_ns)``: ``answer`` is None when there was none
#: (acks=0 Produce, the connection closed first); ``answer_bytes`` its full size (None without one);
#: ``end_ns`` time.monotonic_ns() when its first byte was handed to the client (or it was given up).
#: A streamed answer is reported when its last piece went, with the time of its first.
ExchangeObserver = Callable[[FinishedExchange, ConnectionInfo, "Answer | None", "int | None", int], None]

#: key in an exchange's ``state`` under which filters list the policy decisions that refused
#: something (dicts with filter, decision, operation, resource_type, resource, error_code, reason)
POLICY_STATE_KEY = "kgate.policy"
#: the (filter, resource, error) already noted in this exchange: a hook asked twice (a Produce peek,
#: then whole) notes a refusal once, without a quadratic search of the list
_POLICY_SEEN_KEY = "kgate.policy.seen"
#: at most this many decisions are kept per exchange: a request naming 130,000 denied topics (a
#: hostile Metadata) must not make one audit line of megabytes; the first ones are kept
MAX_POLICY_DECISIONS = 100


def record_policy_decision(
    ctx: FilterContext,
    filter_name: str,
    resource: str | UUID,
    error_code: int,
    reason: str,
    *,
    decision: str = "deny",
    resource_type: str = "topic",
) -> None:
    """Note in the exchange's state that a policy refused ``resource`` (the audit log's ``policy``).

    Call it only when something is refused: it creates the exchange's state, and the audit log
    reads it when the exchange ends. Ids are written in Kafka's string form.
    """
    if isinstance(resource, UUID):
        resource = base64.urlsafe_b64encode(resource.bytes).rstrip(b"=").decode("ascii")
    state = ctx.state
    seen: set[tuple[str, str, int]] | None = state.get(_POLICY_SEEN_KEY)
    if seen is None:
        seen = state[_POLICY_SEEN_KEY] = set()
    key = (filter_name, resource, int(error_code))
    if key in seen or len(seen) >= MAX_POLICY_DECISIONS:
        return
    seen.add(key)
    info = api.API_INFO.get(ctx.api_key)
    entry = {
        "filter": filter_name,
        "decision": decision,
        "operation": info.name if info is not None else str(ctx.api_key),
        "resource_type": resource_type,
        "resource": resource,
        "error_code": int(error_code),
        "reason": reason,
    }
    state.setdefault(POLICY_STATE_KEY, []).append(entry)


class ExchangeServices(Protocol):
    """What the proxy gives a filter that observes exchanges (``Filter.observe_exchanges``)."""

    @property
    def cluster(self) -> str: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def worker(self) -> int | None:
        """This process's index under ``kgate run --workers N`` (None when it runs alone)."""
        ...

    def cached_topic_name(self, topic_id: UUID) -> str | None: ...
    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]: ...


def fan_out(observers: list[ExchangeObserver]) -> ExchangeObserver | None:
    """One observer calling each of ``observers`` (None for none: the core's zero-cost case)."""
    if not observers:
        return None
    if len(observers) == 1:
        return observers[0]
    chain = tuple(observers)

    def both(ex: FinishedExchange, info: ConnectionInfo, answer: Any, answer_bytes: int | None, end_ns: int) -> None:
        for observe in chain:
            observe(ex, info, answer, answer_bytes, end_ns)

    return both
