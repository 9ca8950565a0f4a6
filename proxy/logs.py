"""kgate's log output: human-readable text by default, one JSON object per line for machines.

Text is ``time level logger: message`` as before, so a terminal or ``journalctl`` reads as it
did. JSON (``--log-format json`` or ``log_format: json``) carries the same message plus the
structured fields a log call passed as ``extra`` (``cluster``, ``peer``, ``reason``, ...), so a
log pipeline can filter on them without parsing sentences; an exception goes in ``exc_info``
as its formatted traceback, still on the one line.

Connection lines (``connection_closed``) are the one kind whose volume follows the clients: a
reconnect storm of thousands of connections a second must not turn into as many log lines, so
they pass a ``RateLimit``; what it holds back is counted and said in the next line that passes.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

# The attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601, ms), level, logger, message, extras."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, str | int | float | bool) or value is None else str(value)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


class _WorkerTag(logging.Filter):
    """Adds ``worker`` to every record of a ``--workers`` worker, so the lines say whose they are."""

    def __init__(self, worker: int) -> None:
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.worker
        return True


def setup_logging(level: str, fmt: str = "text", worker: int | None = None) -> None:
    """Route every ``kgate.*`` (and library) log to stderr in ``fmt`` at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    elif worker is not None:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT.replace("%(name)s", f"worker-{worker} %(name)s")))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    if worker is not None:
        handler.addFilter(_WorkerTag(worker))
    logging.basicConfig(level=level, handlers=[handler], force=True)


class RateLimit:
    """At most ``per_second`` lines (bursts up to that many), the rest counted for the next line.

    A token bucket: ``allow()`` is two float operations on the common path. ``take_suppressed()``
    hands the count held back since the last line that passed, so that line can say so.
    """

    __slots__ = ("_last", "_tokens", "per_second", "suppressed")

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self._tokens = per_second
        self._last = time.monotonic()
        self.suppressed = 0

    def allow(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self.per_second, self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.suppressed += 1
        return False

    def take_suppressed(self) -> int:
        n, self.suppressed = self.suppressed, 0
        return n


#: connection open/close lines, per process: enough to follow a normal fleet, not a storm
CONNECTION_LINES = RateLimit(per_second=100)
