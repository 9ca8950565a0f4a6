"""``--follow``: Ctrl-C stops it quietly, new files are picked up, and restarts on the same checkpoint
count every file exactly once (an interrupted batch included); the exact stale-id pass reads the files
the store names, those of earlier runs included."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import HOUR, T0, event, topic, write_events
from .test_reports import _recreated_payments

S = 1_000_000
#: the payments story's start (``_recreated_payments``), on instances of its own (``PAY``)
PAY_T0, PAY = T0 + 6 * 24 * HOUR, ("pay-a", "pay-b")


def _file(d: Path, name: str, n: int, start: int) -> None:
    write_events(
        d / name, [event(T0 + (start + i) * S, topics=[topic("orders", bytes=10, records=1)]) for i in range(n)]
    )


def _until(cond: Callable[[], Any], what: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> Any:
    """Poll ``cond`` until it returns a true value (returned); fail with ``what`` after ``timeout_s``, or
    at once when ``proc`` has exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"kgate report --follow exited ({proc.returncode}) before: {what}")
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.2)


def _requests(result: Any) -> int:
    return sum(r["requests"] for r in result.tables["instances"].to_pylist() if r["instance"] == "kgate-a")


def _gzip_payments(tmp: Path) -> tuple[Path, Path]:
    """The recreated-payments story (test_reports) as two rotated files a follower reads: (a, b)."""
    d = _recreated_payments(tmp, PAY_T0, PAY)
    plain = d / "a.jsonl"
    with gzip.open(d / "a.jsonl.gz", "wb") as f:
        f.write(plain.read_bytes())
    plain.unlink()
    return d / "a.jsonl.gz", d / "b.jsonl.gz"


def test_follow_ctrl_c_and_restarts_count_every_file_exactly_once(spark: Any, tmp_path: Path) -> None:
    """One checkpoint, three runs. The first is the real ``kgate report --follow`` (a process of its
    own: Ctrl-C is SIGINT to its whole process group, the JVM included), and Ctrl-C lands during its
    first batch (once the stream has logged the batch's offsets): the run says it stopped and exits
    0, without a traceback of any thread. The next two resume the checkpoint in process (the
    session's SparkSession; no JVM of their own): the interrupted batch is counted once, a file that
    arrives while running is picked up, and after a clean stop and a restart a file that arrived
    meanwhile is counted while no earlier file is read again. The exact stale-id pass reads
    the files the store names: the payments story's lagger has stale uses in the first batch's file
    and in the last run's."""
    from support.spark import settings_for_tests

    from kgate.pipeline.follow import start

    src, out, ckpt = tmp_path / "audit", tmp_path / "report", tmp_path / "ckpt"
    pay_a, pay_b = _gzip_payments(tmp_path / "pay")
    _file(src, "a-0.jsonl.gz", 3, 0)
    shutil.copy(pay_a, src / pay_a.name)
    (src / "active.jsonl").write_text("")  # the writer's current file: not followed (only rotated *.gz)
    env = {**os.environ, "KGATE_REPORT_DRIVER_MEMORY": "512m"}
    err_file = tmp_path / "stderr.txt"
    with open(err_file, "wb") as err_out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kgate",
                "report",
                "--follow",
                "--input",
                str(src),
                "--output",
                str(out),
                "--checkpoint",
                str(ckpt),
                "--refresh-s",
                "0.5",
                "--no-html",
                # the suite's fast-starting JVM and interpreted queries (tests/support/spark.py)
                *(arg for key, value in settings_for_tests().items() for arg in ("--conf", f"{key}={value}")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err_out,
            start_new_session=True,
            env=env,
        )
    try:
        # a fresh Spark JVM and the stream's first batch (the offset log names a batch's files before
        # it runs): over 240 s once, at load ~30 on two cores
        _until(lambda: (ckpt / "stream" / "offsets" / "0").exists(), "the stream's first batch", 600, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does, while the batch runs
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = err_file.read_text()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert "kgate report: following" in err, err
    assert "kgate report: stopped" in err, err

    seen: list[Any] = []

    def report(want: set[str]) -> Any:
        """The report once it covers the files ``want`` (each file's count checked by the caller)."""

        def covers() -> Any:
            q.processAllAvailable()
            files = {Path(r["file"]).name for r in seen[-1].problems.to_pylist()} if seen else set()
            return seen[-1] if files == want else None

        return _until(covers, f"a report of {sorted(want)}", 300)

    def ok(result: Any) -> dict[str, int]:
        return {Path(r["file"]).name: r["ok"] for r in result.problems.to_pylist()}

    q = start(spark, [str(src)], str(out), str(ckpt), refresh_s=0.5, html=False, on_refresh=seen.append)
    try:
        # the interrupted batch: replayed here when Ctrl-C cut it short, else committed by the first run
        # (the stream's thread finishes a batch the interrupt lands in); either way counted once
        q.processAllAvailable()
        _file(src, "a-1.jsonl.gz", 2, 100)  # a new file while running
        result = report({"a-0.jsonl.gz", "a.jsonl.gz", "a-1.jsonl.gz"})
        assert ok(result) == {"a-0.jsonl.gz": 3, "a.jsonl.gz": 8, "a-1.jsonl.gz": 2}
        assert _requests(result) == 5
        assert (out / "csv" / "instances.csv").exists()
    finally:
        q.stop()

    _file(src, "a-2.jsonl.gz", 4, 200)  # arrives while stopped
    shutil.copy(pay_b, src / pay_b.name)
    seen.clear()
    q = start(spark, [str(src)], str(out), str(ckpt), refresh_s=0.5, html=False, on_refresh=seen.append)
    try:
        every = {"a-0.jsonl.gz": 3, "a-1.jsonl.gz": 2, "a-2.jsonl.gz": 4, "a.jsonl.gz": 8, "b.jsonl.gz": 3}
        result = report(set(every))
        assert ok(result) == every  # each file counted once
        assert _requests(result) == 9  # 3 + 2 + 4: the earlier runs' files were not read again
    finally:
        q.stop()

    # the exact stale-id pass, from the store as --follow keeps it: the uses at or after the newer id's
    # first appearance (in file a) are stale; lagger's are in a (first batch) and b (the last run's)
    stale = {(r["topic_name"], r["client_id"]): r for r in result.tables["stale_ids"].to_pylist()}
    assert set(stale) == {("payments", "lagger"), ("payments", "late"), ("audits", "slow")}
    lag = stale["payments", "lagger"]
    assert (lag["requests"], lag["unknown_id_errors"], lag["instances"]) == (3, 0, "pay-a,pay-b")
    assert (lag["first_seen"].timestamp(), lag["last_seen"].timestamp()) == (
        (PAY_T0 + HOUR) / S,
        (PAY_T0 + 2 * HOUR) / S,
    )


def test_a_checkpoint_refuses_to_resume_with_another_window(tmp_path: Path) -> None:
    """The stored aggregates already apply --since/--until: resuming with another window would mix
    two windows in one report, so it is refused (exit status 2 through ``kgate report``)."""
    from kgate.pipeline.follow import _pin_window
    from kgate.pipeline.ingest import InputError, Window

    ckpt = str(tmp_path / "ckpt")
    _pin_window(ckpt, Window(since_us=T0))
    _pin_window(ckpt, Window(since_us=T0))  # the same window resumes
    with pytest.raises(InputError, match="--since/--until"):
        _pin_window(ckpt, Window())
