"""Running the configured filters over one message.

The chain is indexed once per (direction, api key, version) so that the data path asks a
dict whether any hook wants a frame; frames nobody wants are never decoded.

``run_hooks`` calls hooks in configured order and returns one typed ``Decision`` for requests
and responses alike. As long as hooks return plain values it stays synchronous (no task, no
future: a passthrough-with-policy request costs one call per hook). The first hook that returns
an awaitable turns the rest of the run into a coroutine; the carrier's ``settle``
(proxy/carrier/settle.py: this module imports no asyncio, so the sans-IO core does not either) awaits it
with the timeout and maps a timeout or an exception to a ``Decision`` too, so the connection core
handles every way a hook run can end in one place per direction.

Every decision that is not a plain forward names the filter that made it (``Decision.filter``),
so ``kgate_filter_*`` metrics and logs can say which filter refused, failed or timed out. A
suspended run is a ``PendingRun`` that remembers which filter it is waiting on, since a timeout
is decided outside the run (proxy/carrier/settle.py) and must still be laid at one filter's door.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kgate.api import FORWARD, Close, Drop, Filter, FilterContext, Forward, Respond, Result
from kgate.codec import api

BoundHook = Callable[[FilterContext, Any], Any]


class Verdict(enum.Enum):
    """How a run of hooks over one message ended."""

    FORWARD = "forward"  # pass the message on (``Decision.changed``: re-encode it)
    RESPOND = "respond"  # answer the client with ``Decision.result.message`` (requests only)
    DROP = "drop"  # swallow the message (requests only; only acks=0 Produce expects no answer)
    CLOSE = "close"  # close the connection, ``Decision.result.reason`` says why
    FAILED = "failed"  # a hook raised, or returned something that is not a result (``Decision.error``)
    TIMED_OUT = "timed-out"  # a suspended hook took longer than ``filter_timeout_s``


class Decision:
    """The typed end of one hook run: what to do, with which message, and why (cheap: slots)."""

    __slots__ = ("changed", "error", "filter", "message", "result", "verdict")

    def __init__(
        self,
        verdict: Verdict,
        message: Any,
        changed: bool = False,
        result: Result | None = None,
        error: BaseException | None = None,
        filter: str = "",
    ) -> None:
        self.verdict = verdict
        self.message = message  # the final message (a hook may have replaced it)
        self.changed = changed  # whether any hook replaced or changed it
        self.result = result  # the hook's Respond / Drop / Close, when that ended the run
        self.error = error
        self.filter = filter  # the filter whose hook ended the run ("" for a plain forward)

    def __repr__(self) -> str:
        return f"Decision({self.verdict.name}, changed={self.changed}, result={self.result!r}, error={self.error!r})"


_VERDICTS: dict[type, Verdict] = {Respond: Verdict.RESPOND, Drop: Verdict.DROP, Close: Verdict.CLOSE}


def filter_name(hook: BoundHook | None) -> str:
    """The name a hook's filter is known by in metrics and logs (its ``Filter.name``, else its class)."""
    owner = getattr(hook, "__self__", None)
    if owner is None:
        return "unknown"
    cls = type(owner)
    return getattr(cls, "name", "") or cls.__name__


class PendingRun:
    """A hook run that awaits: awaitable like the coroutine it wraps, and knows which hook it waits on."""

    __slots__ = ("coro", "first", "hook")

    def __init__(self, hook: BoundHook, first: Awaitable[Any] | None = None) -> None:
        self.hook = hook
        self.first = first  # what the hook returned: the rest of the run awaits it first
        self.coro: Any = None

    def __await__(self) -> Any:
        return self.coro.__await__()

    def close(self) -> None:
        """Drop the run unstarted: its coroutine, and the hook's that it would have awaited first
        (each would otherwise warn that it was never awaited)."""
        self.coro.close()
        close = getattr(self.first, "close", None)
        if close is not None:
            close()


class FilterChain:
    """The filters of one virtual cluster, in configured order."""

    def __init__(self, filters: Sequence[Filter]) -> None:
        self.filters = list(filters)
        self._by_key: dict[tuple[str, int], list[tuple[int, int, BoundHook, bool]]] = {}
        self._no_peek: set[tuple[int, int, int]] = set()  # (api key, lo, hi) of request hooks that cannot peek
        for f in self.filters:
            for attr, spec in f.hooks:
                info = api.API_INFO[spec.api_key]
                hi = info.max_version if spec.max_version is None else spec.max_version
                self._by_key.setdefault((spec.direction, spec.api_key), []).append(
                    (spec.min_version, hi, getattr(f, attr), spec.needs_state)
                )
                if spec.direction == "request" and not spec.peek:
                    self._no_peek.add((spec.api_key, spec.min_version, hi))
        self._cache: dict[tuple[str, int, int, bool], tuple[BoundHook, ...]] = {}
        self._peek_cache: dict[tuple[int, int], tuple[BoundHook, ...]] = {}
        self.has_request_hooks = any(d == "request" for d, _k in self._by_key)
        #: some filter must see every request: api keys the codec cannot decode are refused
        self.refuses_unknown_api_keys = any(type(f).refuses_unknown_api_keys for f in self.filters)
        self.has_response_hooks = any(d == "response" for d, _k in self._by_key)
        #: some filter with hooks may ask for topic names: learning them from traffic is worth its cost
        self.uses_topic_names = any(f.hooks and type(f).uses_topic_names for f in self.filters)

    def hooks(self, direction: str, api_key: int, version: int, has_state: bool = True) -> tuple[BoundHook, ...]:
        """Hooks for a message; ``has_state=False`` leaves out response hooks that need state."""
        key = (direction, api_key, version, has_state)
        found = self._cache.get(key)
        if found is None:
            entries = self._by_key.get((direction, api_key), ())
            found = tuple(h for lo, hi, h, ns in entries if lo <= version <= hi and (has_state or not ns))
            self._cache[key] = found
        return found

    def peek_hooks(self, api_key: int, version: int) -> tuple[BoundHook, ...]:
        """The request hooks for a message if every one of them may peek; else ().

        Cached per (api key, version): the answer is fixed for the chain's life, and the scan of
        ``_no_peek`` (one entry per non-peeking request hook: 82 with the authorizer and
        internal-topics) was 976 of the 2,639 bytecodes a peeked Produce ran (passthrough: 744).
        """
        key = (api_key, version)
        found = self._peek_cache.get(key)
        if found is None:
            if any(k == api_key and lo <= version <= hi for k, lo, hi in self._no_peek):
                found = ()
            else:
                found = self.hooks("request", api_key, version)
            self._peek_cache[key] = found
        return found

    def version_limits(self) -> dict[int, tuple[int, int]]:
        """Per hooked api key, the version range the filters declared (union of their hooks).

        kgate advertises no version outside it, so a filter that must see an api key is never
        bypassed by a client using a version the filter (or the codec) cannot read.
        """
        limits: dict[int, tuple[int, int]] = {}
        for (_direction, key), entries in self._by_key.items():
            lo = min(e[0] for e in entries)
            hi = max(e[1] for e in entries)
            if key in limits:
                lo, hi = min(lo, limits[key][0]), max(hi, limits[key][1])
            limits[key] = (lo, hi)
        return limits

    async def close(self) -> None:
        for f in self.filters:
            await f.close()


def run_hooks(hooks: Sequence[BoundHook], ctx: FilterContext, message: Any) -> Decision | Awaitable[Decision]:
    """Run ``hooks`` over ``message``: a ``Decision``, or (once a hook returns an awaitable) a coroutine.

    A hook that raises ends the run with ``Verdict.FAILED``: a filter bug closes its connection,
    never the process.
    """
    changed = False
    hook = None
    try:
        for i, hook in enumerate(hooks):
            result = hook(ctx, message)
            if result is None or result is FORWARD:
                continue
            if inspect.isawaitable(result):
                run = PendingRun(hook, result)
                run.coro = _continue_async(result, hooks, i + 1, ctx, message, changed, run)
                return run
            decision = _apply(result, message, changed)
            if decision.verdict is not Verdict.FORWARD:
                decision.filter = filter_name(hook)
                return decision
            message, changed = decision.message, decision.changed
    except Exception as exc:
        return Decision(Verdict.FAILED, message, changed, error=exc, filter=filter_name(hook))
    return Decision(Verdict.FORWARD, message, changed)


def peek_forwards(hooks: Sequence[BoundHook], ctx: FilterContext, message: Any) -> bool:
    """Whether every hook lets a peeked message through unchanged, synchronously.

    An awaitable from a hook means "I need to look something up": the peek gives no answer and
    the hook's coroutine is closed unstarted (the full request will run the hook again).
    """
    for hook in hooks:
        result = hook(ctx, message)
        if result is None or result is FORWARD:
            continue
        if inspect.iscoroutine(result):
            result.close()
        return False
    return True


def _apply(result: Any, message: Any, changed: bool) -> Decision:
    if isinstance(result, Forward):
        if result.message is None:
            return Decision(Verdict.FORWARD, message, changed)
        return Decision(Verdict.FORWARD, result.message, True)
    verdict = _VERDICTS.get(type(result))
    if verdict is None and isinstance(result, Respond | Drop | Close):  # a subclass of one
        verdict = next(v for cls, v in _VERDICTS.items() if isinstance(result, cls))
    if verdict is not None:
        return Decision(verdict, message, changed, result=result)
    error = TypeError(f"a filter hook returned {result!r}; expected a kgate filter result or None")
    return Decision(Verdict.FAILED, message, changed, error=error)


async def _continue_async(
    pending: Awaitable[Any],
    hooks: Sequence[BoundHook],
    start: int,
    ctx: FilterContext,
    message: Any,
    changed: bool,
    run: PendingRun,
) -> Decision:
    result = await pending
    if result is not None and result is not FORWARD:
        decision = _apply(result, message, changed)
        if decision.verdict is not Verdict.FORWARD:
            decision.filter = filter_name(run.hook)
            return decision
        message, changed = decision.message, decision.changed
    for hook in hooks[start:]:
        run.hook = hook  # what a timeout or an exception from here on is laid to
        result = hook(ctx, message)
        if inspect.isawaitable(result):
            result = await result
        if result is None or result is FORWARD:
            continue
        decision = _apply(result, message, changed)
        if decision.verdict is not Verdict.FORWARD:
            decision.filter = filter_name(hook)
            return decision
        message, changed = decision.message, decision.changed
    return Decision(Verdict.FORWARD, message, changed)
