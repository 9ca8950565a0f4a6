"""Pacing of refused Consumer/ShareGroupHeartbeats: a member refused again gets its answer late.

Why: a member whose subscription is refused (TOPIC_AUTHORIZATION_FAILED) stays JOINING, and the
Java client (4.x, ``AbstractHeartbeatRequestManager.poll``) sends a joining member's next heartbeat as
soon as the last one is answered, skipping its retry backoff. It reads neither ``throttle_time_ms``
on these answers (their ``shouldClientThrottle`` is false) nor ``heartbeat_interval_ms`` on an error
answer. What it does honour is the heartbeat in flight: it never sends another while one is
unanswered. So the member heartbeats as fast as its answers come, against Kafka's own authorizer too
(measured in docs/authorization.md, "Refused subscriptions").

A member's first refusal is answered at once (the client learns it without delay); one refused again
within ``WINDOW_S`` is answered after ``delay_s``, with ``throttle_time_ms`` saying so, as a Kafka
broker answers a throttled request whose client does not throttle itself. The member then heartbeats
once per delay, and the answer is still TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

from kgate.api import FilterConfigError, Respond, Result

#: a refusal this long after the member's last one counts as a first refusal again
WINDOW_S = 60.0
#: members remembered (forgotten all at once beyond it, as the authorizer's other caches)
MAX_MEMBERS = 10_000
#: the largest delay a config may ask for: well under ``proxy.filter_timeout_s``'s default (30 s) and a
#: client's ``request.timeout.ms`` (30 s)
MAX_DELAY_MS = 10_000
DEFAULT_DELAY_MS = 1000  # the Java client's own retry.backoff.max.ms default, had it backed off

#: who was refused: (client address, group id, member id)
MemberKey = tuple[str, str, str]


class RefusalPacer:
    """Remembers members refused lately and delays the answers to those refused again."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._last: dict[MemberKey, float] = {}  # member -> when its last refusal was decided

    def pace(self, key: MemberKey, result: Result) -> Result | Awaitable[Result]:
        """``result`` (a refusal) as it is, or an awaitable giving it after the delay for a repeat."""
        if self.delay_ms <= 0 or type(result) is not Respond:
            return result
        now = time.monotonic()
        last = self._last.get(key)
        if last is None and len(self._last) >= MAX_MEMBERS:
            self._last.clear()
        self._last[key] = now
        if last is None or now - last > WINDOW_S:
            return result
        result.message.throttle_time_ms = max(result.message.throttle_time_ms or 0, self.delay_ms)
        return self._later(result)

    async def _later(self, result: Result) -> Result:
        await asyncio.sleep(self.delay_ms / 1000)
        return result


def delay_config(value: object) -> int:
    """The validated ``refused_heartbeat_delay_ms`` (0 answers every refusal at once)."""
    if type(value) is not int or not 0 <= value <= MAX_DELAY_MS:
        raise FilterConfigError(
            f"refused_heartbeat_delay_ms: expected an integer from 0 to {MAX_DELAY_MS}, got {value!r}"
        )
    return value
