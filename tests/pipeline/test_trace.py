"""``KGATE_REPORT_TRACE=1``: a timestamped line per phase on stderr; nothing without it (no Spark)."""

from __future__ import annotations

import re
import threading

import pytest


def test_a_mark_is_a_timestamped_line_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kgate.pipeline import trace

    monkeypatch.delenv(trace.ENV, raising=False)
    trace.mark("roll-up written")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(trace.ENV, "1")
    trace.mark("roll-up written")
    worker = threading.Thread(target=trace.mark, args=("chargeback: collected",), name="report_3")
    worker.start()
    worker.join()
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(
        r"kgate report trace: \+ *\d+\.\d\ds py +\d+\.\d\ds children +\d+\.\d\ds roll-up written", lines[0]
    )
    assert lines[1].endswith("[report_3] chargeback: collected")
    # wall is counted from the process's start, not from the first mark: the interpreter's start is in it
    assert float(lines[0].split("+")[1].split("s")[0]) > 0
