"""kgate's log output: human-readable text by default, one JSON object per line for machines.

Text is ``time level logger: message`` as before, so a terminal or ``journalctl`` reads as it
did. JSON (``--log-format json`` or ``log_format: json``) carries the same message plus the
structured fields a log call passed as ``extra`` (``cluster``, ``peer``, ``reason``, ...), so a
log pipeline can filter on them without parsing sentences; an exception goes in ``exc_info``
as its formatted traceback, still on the one line.

Connection lines (``connection_closed``) are the one kind whose volume follows the clients: a
reconnect storm of thousands of connections a second must not turn into as many log lines, so
they pass a ``RateLimit``; what it holds back is counted and said in the next line that passes.

Each line is made cheaply (``setup_logging``): no format kgate writes shows the calling source
line, thread or process, so the logging module is told not to collect them (the logging
HOWTO's "Optimization" switches: a stack walk with a path normalisation per frame, a
``threading.current_thread()`` and an ``os.getpid()`` syscall per record), and the text
timestamp is formatted once per second, not per line. That matters for the connection close
line: it is written once per connection (up to the rate limit), and it was the largest single
item of a connection's cost, most of what the raw relay spends on a whole connection
(docs/performance.md, "where a passthrough request's CPU goes beyond the relay's").
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Hashable
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


class TextFormatter(logging.Formatter):
    """``logging.Formatter`` with the date part of ``asctime`` formatted once per second.

    Same text as the default (``2026-11-24 13:20:08,790``): ``time.strftime`` of the local time
    was a visible part of a log line's cost, and lines come in bursts within one second.
    """

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._second = -1
        self._date = ""
        self._uses_time = self.usesTime()

    def format(self, record: logging.LogRecord) -> str:
        """``logging.Formatter.format``, the same text in fewer calls for a record with no exception or
        stack (every connection line): whether the format shows the time is known once, and the
        format is applied here rather than through ``formatMessage`` and its style's two methods."""
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = record.getMessage()
        if self._uses_time:
            record.asctime = self.formatTime(record, self.datefmt)
        try:
            return self._fmt % record.__dict__  # type: ignore[operator]  # TextFormatter has a '%' format
        except KeyError as e:  # as logging.PercentStyle.format says it
            raise ValueError(f"Formatting field not found in record: {e}") from None

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._date = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return f"{self._date},{int(record.msecs):03d}"  # logging's default_msec_format, "%s,%03d"


def _skip_unused_record_fields() -> None:
    """Stop the logging module from collecting what no kgate format shows (see the module doc).

    ``%(filename)s``, ``%(lineno)d``, ``%(funcName)s``, ``%(thread)d``, ``%(process)d`` and
    their relatives then read as unknown (``(unknown file)``, 0, None) in a format that asks.
    """
    global _lean
    logging._srcfile = None  # the logging HOWTO's documented switch for findCaller
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    if hasattr(logging, "logAsyncioTasks"):  # Python 3.12+
        logging.logAsyncioTasks = False
    _lean = True


#: whether ``_skip_unused_record_fields`` ran: only then may ``LeanRecords`` build records itself
_lean = False


class LeanRecords:
    """``logger.info(msg, *args, extra=extra)`` for a line written once per connection, at half the cost.

    ``Logger.info`` builds each record through ``_log``, ``makeRecord`` and ``LogRecord.__init__``
    (two path splits of "(unknown file)", the level name, the time fields, a loop over ``extra``):
    about 60 % of a line's cost. Once ``setup_logging`` has switched off what no kgate format shows,
    every field of a record but its message, arguments, time and extras is the same for every line
    of a logger, so this copies them from a template record and hands the record to
    ``logger.handle``: the same handlers, filters and formatters see the same record
    (docs/performance.md, "constants, counters, repeated answers"). Anything else (a custom record
    factory, the switches left on, before ``setup_logging``) takes ``logger.info`` itself.
    """

    __slots__ = ("_base", "_logger", "_taken")

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._base: dict[str, Any] | None = None  # the template's fields, once the switches are on
        #: the names an extra may not take (``makeRecord``'s rule): the template's fields and two more
        self._taken: frozenset[str] = frozenset()

    def info(self, msg: str, args: tuple[Any, ...], extra: dict[str, Any]) -> None:
        logger = self._logger
        if not logger.isEnabledFor(logging.INFO):
            return
        if not _lean or logging.getLogRecordFactory() is not logging.LogRecord:
            logger.info(msg, *args, extra=extra)
            return
        base = self._base
        if base is None:
            base = self._base = self._template()
            self._taken = frozenset(base) | {"message", "asctime"}
        taken = self._taken
        if not taken.isdisjoint(extra):  # one test in C, not two per extra
            key = next(k for k in extra if k in taken)
            raise KeyError(f"Attempt to overwrite {key!r} in LogRecord")  # as makeRecord refuses it
        record = logging.LogRecord.__new__(logging.LogRecord)
        fields = record.__dict__
        fields.update(base)
        now = time.time()
        fields["msg"] = msg
        fields["args"] = args
        fields["created"] = now
        fields["msecs"] = int((now - int(now)) * 1000) + 0.0  # as LogRecord.__init__ computes it
        fields["relativeCreated"] = base["relativeCreated"] + (now - base["created"]) * 1000
        fields.update(extra)
        logger.handle(record)

    def _template(self) -> dict[str, Any]:
        """A record as ``Logger._log`` makes one with the switches on (no source line, thread or process)."""
        record = logging.LogRecord(
            self._logger.name, logging.INFO, "(unknown file)", 0, "", (), None, "(unknown function)", None
        )
        return dict(record.__dict__)


class LineHandler(logging.StreamHandler):
    """``logging.StreamHandler`` whose ``emit`` flushes the stream under the lock ``Handler.handle``
    already holds: the same write and flush per record, without ``flush()`` taking that lock a
    second time (three Python calls per line, on the connection line's path)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            stream = self.stream
            stream.write(msg + self.terminator)  # one write, as StreamHandler (issue 35046)
            if stream and hasattr(stream, "flush"):
                stream.flush()
        except RecursionError:  # as StreamHandler.emit (issue 36272)
            raise
        except Exception:
            self.handleError(record)


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
    _skip_unused_record_fields()
    handler = LineHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    elif worker is not None:
        handler.setFormatter(TextFormatter(TEXT_FORMAT.replace("%(name)s", f"worker-{worker} %(name)s")))
    else:
        handler.setFormatter(TextFormatter(TEXT_FORMAT))
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


class LineBudget:
    """At most ``lines`` lines per key per ``window_ns``; the rest counted for the next line written.

    For warnings that a misbehaving peer can repeat without end: a client reconnecting in a loop
    while the broker is down closed ~20 connections a second, each with its own "closing client"
    line. ``take(key, now_ns)`` returns -1 to skip the line, else how many lines of ``key`` were held
    back since the last one written. The time comes in (the sans-IO core's event clock); the
    metrics still count every event, only the log is bounded.
    """

    __slots__ = ("_windows", "lines", "window_ns")

    def __init__(self, lines: int, window_ns: int) -> None:
        self.lines = lines
        self.window_ns = window_ns
        #: key -> [window start, lines written in it, lines held back since the last written]
        self._windows: dict[Hashable, list[int]] = {}

    def take(self, key: Hashable, now_ns: int) -> int:
        w = self._windows.get(key)
        if w is None:
            self._windows[key] = [now_ns, 1, 0]
            return 0
        if now_ns - w[0] >= self.window_ns:  # a new window: written, with what the last one held back
            w[0], w[1] = now_ns, 0
        if w[1] >= self.lines:
            w[2] += 1
            return -1
        w[1] += 1
        held, w[2] = w[2], 0
        return held


#: connection open/close lines, per process: enough to follow a normal fleet, not a storm
CONNECTION_LINES = RateLimit(per_second=100)
