"""Awaiting a suspended hook run, on the carrier's side (asyncio): its outcome as a ``Decision``.

``run_hooks`` (filters/chain.py) stays synchronous until a hook awaits; then the run is a
``PendingRun`` that the carrier (proxy/carrier/connection.py, ``Actions.spawn``) awaits here, bounded by
``filter_timeout_s``. A timeout or an exception becomes a verdict too, laid at the filter the run
was waiting on, so the core handles every way a run ends in ``hook_done``. It lives here, not
beside ``run_hooks``, because it is the only part of running hooks that needs asyncio, and the
sans-IO core imports the chain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from kgate.filters.chain import Decision, PendingRun, Verdict, filter_name


async def settle(pending: Awaitable[Decision], timeout_s: float, message: Any) -> Decision:
    """Await a suspended hook run: its ``Decision``, or TIMED_OUT / FAILED (never an exception)."""
    try:
        return await asyncio.wait_for(pending, timeout_s)
    except TimeoutError:
        return Decision(Verdict.TIMED_OUT, message, filter=_waiting_on(pending))
    except Exception as exc:  # a filter bug must not leave the connection hanging
        return Decision(Verdict.FAILED, message, error=exc, filter=_waiting_on(pending))


def _waiting_on(pending: Awaitable[Decision]) -> str:
    return filter_name(pending.hook) if isinstance(pending, PendingRun) else "unknown"
