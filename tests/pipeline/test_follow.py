"""``--follow``: a new file is picked up, and a restart on the same checkpoint counts nothing twice."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .conftest import T0, event, topic, write_events

S = 1_000_000


def _file(d: Path, name: str, n: int, start: int) -> None:
    write_events(
        d / name, [event(T0 + (start + i) * S, topics=[topic("orders", bytes=10, records=1)]) for i in range(n)]
    )


def _run(spark: Any, src: Path, out: Path, ckpt: Path, seen: list[Any]) -> Any:
    from kgate.pipeline.follow import start

    return start(spark, [str(src)], str(out), str(ckpt), refresh_s=0.5, html=False, on_refresh=seen.append)


def _requests(result: Any) -> int:
    return sum(r["requests"] for r in result.tables["instances"].to_pylist())


def test_follow_is_exactly_once_across_a_restart(spark: Any, tmp_path: Path) -> None:
    src, out, ckpt = tmp_path / "audit", tmp_path / "report", tmp_path / "ckpt"
    _file(src, "a-0.jsonl.gz", 3, 0)
    (src / "active.jsonl").write_text("")  # the writer's current file: not followed (only rotated *.gz)
    seen: list[Any] = []
    q = _run(spark, src, out, ckpt, seen)
    try:
        q.processAllAvailable()
        assert _requests(seen[-1]) == 3
        _file(src, "a-1.jsonl.gz", 2, 100)  # a new file while running
        q.processAllAvailable()
        assert _requests(seen[-1]) == 5
        assert (out / "csv" / "instances.csv").exists()
    finally:
        q.stop()

    _file(src, "a-2.jsonl.gz", 4, 200)  # arrives while stopped
    seen.clear()
    q = _run(spark, src, out, ckpt, seen)
    try:
        q.processAllAvailable()
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _requests(seen[-1]) == 9  # 3 + 2 + 4: the first two files were not read again
        files = {Path(r["file"]).name: r["ok"] for r in seen[-1].problems.to_pylist()}
        assert files == {"a-0.jsonl.gz": 3, "a-1.jsonl.gz": 2, "a-2.jsonl.gz": 4}
    finally:
        q.stop()


def test_a_checkpoint_refuses_to_resume_with_another_window(tmp_path: Path) -> None:
    """The stored aggregates already apply --since/--until: resuming with another window would mix
    two windows in one report, so it is refused (exit status 2 through ``kgate report``)."""
    import pytest

    from kgate.pipeline.follow import _pin_window
    from kgate.pipeline.ingest import InputError, Window

    ckpt = str(tmp_path / "ckpt")
    _pin_window(ckpt, Window(since_us=T0))
    _pin_window(ckpt, Window(since_us=T0))  # the same window resumes
    with pytest.raises(InputError, match="--since/--until"):
        _pin_window(ckpt, Window())


def test_ctrl_c_stops_follow_quietly(tmp_path: Path) -> None:
    """Ctrl-C on ``kgate report --follow``: the terminal sends SIGINT to the whole process group (the
    JVM included); the run says it stopped and exits 0, without a traceback of any thread."""
    import os
    import signal
    import subprocess
    import sys

    import pytest

    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[pipeline]')")
    from support.spark import _java_major, settings_for_tests

    if (_java_major() or 0) < 17:
        pytest.skip("PySpark 4 needs Java 17+")
    src, out = tmp_path / "audit", tmp_path / "report"
    _file(src, "a-0.jsonl.gz", 3, 0)
    env = {**os.environ, "KGATE_REPORT_DRIVER_MEMORY": "512m"}
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
            "--refresh-s",
            "0.5",
            "--no-html",
            "--conf",  # the suite's fast-starting JVM (tests/support/spark.py)
            f"spark.driver.extraJavaOptions={settings_for_tests()['spark.driver.extraJavaOptions']}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    try:
        # a fresh Spark JVM and the stream's first batch: over 240 s once, at load ~30 on two cores
        deadline = time.monotonic() + 600
        # the first refresh has written its tables: the stream is running, the JVM busy with it
        while not (out / "csv" / "instances.csv").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no report within 600 s"
            time.sleep(0.2)
        _file(src, "a-1.jsonl.gz", 2, 100)  # a batch may be running when the interrupt lands
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert "kgate report: stopped" in err, err
