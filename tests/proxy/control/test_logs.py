"""proxy/control/logs.py: the JSON line format, the connection-line rate limit, lean close-line records."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest

from kgate.proxy.control import logs
from kgate.proxy.control.logs import TEXT_FORMAT, JsonFormatter, LineBudget, RateLimit, TextFormatter


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
    assert out["level"] == "warning"
    assert out["logger"] == "kgate.test"
    assert out["message"] == "closed x"
    assert out["cluster"] == "c"
    assert out["requests"] == 3
    assert out["reason"] == "client-left"
    assert out["time"].endswith("Z")
    assert "T" in out["time"]
    assert "args" not in out
    assert "msg" not in out


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


def test_line_budget_writes_a_few_per_window_then_says_how_many_it_held() -> None:
    b = LineBudget(lines=3, window_ns=10)
    assert [b.take("timeout", t) for t in range(5)] == [0, 0, 0, -1, -1]
    assert b.take("frame-too-large", 4) == 0  # each key has its own budget
    assert b.take("timeout", 9) == -1  # still the first window
    assert b.take("timeout", 10) == 3  # a new window: written, saying three were held back
    assert b.take("timeout", 11) == 0
    assert b.take("timeout", 12) == 0
    assert b.take("timeout", 13) == -1


def test_text_timestamps_match_the_standard_formatter_across_seconds() -> None:
    """The date part is cached per second; every line still reads as logging.Formatter's would."""
    ours, standard = TextFormatter(TEXT_FORMAT), logging.Formatter(TEXT_FORMAT)
    for created in (1_764_000_000.001, 1_764_000_000.999, 1_764_000_001.0, 1_764_000_001.5, 1_763_999_999.25):
        record = _record("closed %s", "x")
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.format(record) == standard.format(record)


@pytest.fixture
def lean_switches() -> Iterator[None]:
    """``setup_logging``'s switches on for one test, and the logging module's own state back after it."""
    saved = (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing, logs._lean)
    logs._skip_unused_record_fields()
    try:
        yield
    finally:
        logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing, logs._lean = saved


def _captured(name: str) -> tuple[logging.Logger, list[logging.LogRecord]]:
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.handlers = [handler]
    return logger, records


_TIME_FIELDS = ("created", "msecs", "relativeCreated")
_ARGS = ("10.0.0.1:5000", 1.25, 3)
_EXTRA = {"event": "connection_closed", "peer": "10.0.0.1:5000", "requests": 3}


def test_lean_records_are_the_records_logger_info_makes(lean_switches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    logger, records = _captured("kgate.test.lean")
    logger.info("from %s after %.1fs and %d", *_ARGS, extra=dict(_EXTRA))
    reference = records.pop()
    monkeypatch.setattr(logger, "makeRecord", None)  # the lean path must not make records the usual way
    before = time.time()
    logs.LeanRecords(logger).info("from %s after %.1fs and %d", _ARGS, dict(_EXTRA))
    after = time.time()
    (lean,) = records
    same = {k: v for k, v in reference.__dict__.items() if k not in _TIME_FIELDS}
    assert {k: v for k, v in lean.__dict__.items() if k not in _TIME_FIELDS} == same
    assert lean.getMessage() == "from 10.0.0.1:5000 after 1.2s and 3"
    assert before <= lean.created <= after
    assert lean.msecs == int((lean.created - int(lean.created)) * 1000)
    expected_relative = reference.relativeCreated + (lean.created - reference.created) * 1000
    assert abs(lean.relativeCreated - expected_relative) < 1e-3
    line = TextFormatter(TEXT_FORMAT).format(lean)
    assert line.endswith("INFO    kgate.test.lean: from 10.0.0.1:5000 after 1.2s and 3")


def test_lean_records_refuse_an_extra_that_overwrites_a_field_as_make_record_does(lean_switches: None) -> None:
    logger, _records = _captured("kgate.test.lean-clash")
    with pytest.raises(KeyError, match="msg"):
        logs.LeanRecords(logger).info("x", (), {"msg": "clash"})
    with pytest.raises(KeyError, match="asctime"):
        logs.LeanRecords(logger).info("x", (), {"asctime": "clash"})


def test_without_the_switches_lean_records_take_logger_info() -> None:
    """Before setup_logging (or with a custom record factory) a record keeps what the defaults collect."""
    assert not logs._lean
    logger, records = _captured("kgate.test.lean-off")
    logs.LeanRecords(logger).info("from %s", ("x",), {"event": "e"})
    (record,) = records
    assert record.thread is not None
    assert record.lineno > 0
    assert record.event == "e"


def test_lean_records_write_nothing_below_info(lean_switches: None) -> None:
    logger, records = _captured("kgate.test.lean-quiet")
    logger.setLevel(logging.WARNING)
    logs.LeanRecords(logger).info("x", (), {})
    assert records == []
