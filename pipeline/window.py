"""What a run reads: its ``--since`` / ``--until`` window, and the answers that mean a gone topic id.

Their own module so that ingest (which picks the roll-up's map side) and the map sides it picks
(partials for JSON lines, rollup for Parquet) depend on it, not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgate.codec.error_codes import ErrorCode

#: Answer codes that mean "this topic id no longer exists" (deleted, maybe recreated under a new id).
GONE_ID_ERRORS = (int(ErrorCode.UNKNOWN_TOPIC_ID), int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))


@dataclass(frozen=True)
class Window:
    """``--since`` / ``--until`` as microseconds since the epoch (``until`` exclusive); None: open."""

    since_us: int | None = None
    until_us: int | None = None


#: No --since, no --until.
ALL_TIME = Window()
