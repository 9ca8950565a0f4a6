"""proxy/logs.py: the JSON line format and the connection-line rate limit."""

from __future__ import annotations

import json
import logging

from kgate.proxy.logs import TEXT_FORMAT, JsonFormatter, RateLimit, TextFormatter


def _record(msg: str, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("kgate.test")
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    record = logger.makeRecord("kgate.test", logging.WARNING, __file__, 1, msg, args, exc_info, extra=extra)
    return record


def test_json_line_has_the_fields_and_the_extras() -> None:
    line = JsonFormatter().format(_record("closed %s", "x", cluster="c", requests=3, reason="client-left"))
    out = json.loads(line)
    assert out["level"] == "warning" and out["logger"] == "kgate.test" and out["message"] == "closed x"
    assert out["cluster"] == "c" and out["requests"] == 3 and out["reason"] == "client-left"
    assert out["time"].endswith("Z") and "T" in out["time"]
    assert "args" not in out and "msg" not in out


def test_json_exception_stays_on_one_line() -> None:
    line = JsonFormatter().format(_record("failed", exc=True))
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc_info"]


def test_rate_limit_holds_back_a_storm_and_counts_it() -> None:
    limit = RateLimit(per_second=10)
    passed = sum(limit.allow() for _ in range(1000))
    assert 10 <= passed <= 12  # the burst, and what refilled meanwhile
    assert limit.take_suppressed() == 1000 - passed
    assert limit.take_suppressed() == 0


def test_text_timestamps_match_the_standard_formatter_across_seconds() -> None:
    """The date part is cached per second; every line still reads as logging.Formatter's would."""
    ours, standard = TextFormatter(TEXT_FORMAT), logging.Formatter(TEXT_FORMAT)
    for created in (1_764_000_000.001, 1_764_000_000.999, 1_764_000_001.0, 1_764_000_001.5, 1_763_999_999.25):
        record = _record("closed %s", "x")
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.format(record) == standard.format(record)
