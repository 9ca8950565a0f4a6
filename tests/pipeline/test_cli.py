"""``kgate report`` from the command line: user mistakes exit 2 with the culprit named, a real run
writes every output, and ``kgate run`` never imports Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kgate.pipeline.cli import parse_time
from kgate.proxy.runtime.cli import main

from .conftest import CliRun


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "/nonexistent/audit", "--output", "OUT"], "/nonexistent/audit: no such file or directory"),
        (["--input", "/nonexistent/*.gz", "--output", "OUT"], "/nonexistent/*.gz: no file matches"),
        (["--input", "IN", "--output", "OUT", "--since", "yesterday"], "not a time: 'yesterday'"),
        (["--input", "IN", "--output", "OUT", "--since", "2025-11-25", "--until", "2025-11-24"], "is not before"),
        (["--input", "IN", "--output", "OUT", "--follow", "--refresh-s", "0"], "--refresh-s must be positive"),
        (["--input", "/nonexistent/dir", "--output", "OUT", "--follow"], "/nonexistent/dir: no such directory"),
    ],
)
def test_user_mistakes_exit_2_with_a_clear_message(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "IN").mkdir()
    (tmp_path / "IN" / "x.jsonl").write_text("")
    args = [
        a.replace("OUT", str(tmp_path / "out")).replace("IN", str(tmp_path / "IN")) if a in ("IN", "OUT") else a
        for a in args
    ]
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kgate report: error: "), err
    assert message in err, err
    assert "Traceback" not in err


def test_missing_required_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report"]) == 2
    assert "--input" in capsys.readouterr().err


def test_parse_time() -> None:
    assert parse_time("2025-11-24T16:00:00Z") == 1_764_000_000_000_000
    assert parse_time("2025-11-24T16:00:00") == 1_764_000_000_000_000  # no zone: UTC
    assert parse_time("1764000000") == 1_764_000_000_000_000


def test_kgate_run_never_imports_the_pipeline() -> None:
    code = (
        "import sys; from kgate.proxy.runtime import cli; cli.main(['check-config', '/nonexistent.yaml']); "
        "bad = [m for m in sys.modules if m.startswith(('pyspark', 'kgate.pipeline', 'matplotlib'))]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_a_report_run_writes_every_output(spark: Any, fleet_cli_run: CliRun) -> None:
    from kgate.pipeline.reports import REPORTS

    out = fleet_cli_run.out
    assert fleet_cli_run.status == 0, fleet_cli_run.err
    assert "9 events from 2 file(s)" in fleet_cli_run.err
    for name in REPORTS:
        assert (out / "csv" / f"{name}.csv").exists(), name
    assert (out / "csv" / "input_files.csv").read_text().count("\n") == 3
    assert list((out / "parquet" / "topic_hourly").glob("day=2025-11-24/*.parquet"))
    read = spark.read.parquet(str(out / "parquet" / "chargeback"))
    assert read.where("principal = 'User:alice'").first()["produced_bytes"] == 1500
    html = (out / "index.html").read_text()
    assert "consumer-old (User:bob)" in html  # the stale-id client is named in the summary
    assert "2 malformed and 1 of an unknown schema version skipped" in html
    for png in ("traffic", "principals", "errors", "instances", "latency", "topic_ids"):
        assert f"src='{png}.png'" in html, png
        assert (out / f"{png}.png").stat().st_size > 1000, png


def test_tables_to_a_uri_are_written_by_spark(spark: Any, fleet_result: Any, tmp_path: Path) -> None:
    """``--tables URI``: Parquet through Spark (any Hadoop file system), partitioned by day."""
    from kgate.pipeline import tables

    uri = (tmp_path / "lake").as_uri()
    tables.write(fleet_result, str(tmp_path / "out"), spark, tables_uri=uri)
    stale = spark.read.parquet(f"{uri}/stale_ids").collect()
    assert [(r["client_id"], r["requests"], str(r["day"])) for r in stale] == [("consumer-old", 2, "2025-11-24")]
    assert (tmp_path / "out" / "csv" / "stale_ids.csv").exists()
    assert not (tmp_path / "out" / "parquet").exists()


def test_parquet_history_keeps_earlier_days(
    fleet_result: Any, oracle_run: Any, windowed_run: CliRun, tmp_path: Path
) -> None:
    """A run replaces only the days it speaks for: an earlier run's other days stay (a local run once
    deleted the table's folder, and with it every earlier day). Three of the session's reports written
    in turn: the oracle's (Monday 2025-11-24 and many later days), the fleet (Monday only), and a
    windowed rerun of Monday (its window inside Monday)."""
    import pyarrow.parquet as pq

    from kgate.pipeline import tables

    out = tmp_path / "out"
    charge = out / "parquet" / "chargeback"
    monday = "2025-11-24"

    def topics(result: Any) -> dict[str, set[str | None]]:
        by_day: dict[str, set[str | None]] = {}
        for r in result.tables["chargeback"].to_pylist():
            by_day.setdefault(str(r["day"]), set()).add(r["topic_name"])
        return by_day

    def history() -> dict[str, set[str | None]]:
        by_day: dict[str, set[str | None]] = {}
        for r in pq.read_table(charge).to_pylist():  # day from the partition directories (day=...)
            by_day.setdefault(str(r["day"]), set()).add(r["topic_name"])
        return by_day

    assert windowed_run.status == 0, windowed_run.err
    earlier, fleet, rerun = topics(oracle_run.result), topics(fleet_result), topics(windowed_run.result)
    assert set(fleet) == set(rerun) == {monday}
    assert monday in earlier
    assert len(earlier) >= 3
    assert len({frozenset(earlier[monday]), frozenset(fleet[monday]), frozenset(rerun[monday])}) == 3  # tell apart
    tables.write(oracle_run.result, str(out))
    assert history() == earlier
    tables.write(fleet_result, str(out))  # Monday replaced, the later days kept
    assert history() == {**earlier, monday: fleet[monday]}
    tables.write(windowed_run.result, str(out))  # a rerun of Monday with a window: Monday replaced again
    assert history() == {**earlier, monday: rerun[monday]}


def stale_story(d: Path) -> Path:
    """For the session's windowed run (conftest ``windowed_run``, window T0+1h to T0+2h+25s), on instance
    kgate-w, as ``stale-1.jsonl`` and an empty ``stale-empty.jsonl``: a live topic with one
    UNKNOWN_TOPIC_OR_PARTITION among its successes, a dead one that answers it twice after its last
    success, and one event two hours before the window."""
    from .conftest import HOUR, T0, event, topic, write_events

    s, base = 1_000_000, T0 + HOUR + 60 * 1_000_000
    at = {"version": 13, "instance": "kgate-w"}
    live = [
        event(base + i * s, **at, topics=[topic("live", "LIVE", status="resolved", bytes=10, records=1)])
        for i in range(3)
    ]
    live.append(event(base + 5 * s, **at, error_code=3, topics=[topic("live", "LIVE", status="resolved", errors=[3])]))
    live.append(event(base + 9 * s, **at, topics=[topic("live", "LIVE", status="resolved", bytes=10, records=1)]))
    gone = [event(base + 20 * s, **at, topics=[topic("dead", "DEAD", status="resolved", bytes=10, records=1)])]
    gone += [
        event(
            base + (30 + i) * s,
            **at,
            error_code=3,
            client_id="stuck",
            topics=[topic("dead", "DEAD", status="resolved", errors=[3])],
        )
        for i in range(2)
    ]
    early = [event(base - 2 * HOUR, instance="kgate-w", topics=[topic("live", bytes=5, records=1)])]  # before --since
    write_events(d / "stale-1.jsonl", live + gone + early)
    (d / "stale-empty.jsonl").write_text("")
    return d


def test_window_closing_line_empty_files_and_a_passing_unknown_topic(windowed_run: CliRun) -> None:
    """The closing line counts the events inside --since/--until (it counted every good line); an empty
    input file is listed among the inputs (it was missing); one UNKNOWN_TOPIC_OR_PARTITION on a live
    topic is not a stale id, while repeated ones after the id's last success are (``stale_story``, in
    the session's windowed run)."""
    import csv

    assert windowed_run.status == 0, windowed_run.err
    # good lines: the fleet's 9, the payments copy's 11, the stale story's 9; inside the window the
    # fleet's 3 (test_reports' test_time_window), the payments copy's 8 (all but its last three hours)
    # and the story's 8 (all but its early event)
    assert "kgate report: 19 events (10 good lines outside --since/--until) from 6 file(s)" in windowed_run.err
    out = windowed_run.out
    with open(out / "csv" / "input_files.csv", newline="") as f:
        files = {Path(r["file"]).name: (int(r["lines"]), int(r["ok"])) for r in csv.DictReader(f)}
    assert {k: v for k, v in files.items() if k.startswith("stale-")} == {
        "stale-1.jsonl": (9, 9),
        "stale-empty.jsonl": (0, 0),
    }
    with open(out / "csv" / "stale_ids.csv", newline="") as f:
        stale = [(r["topic_name"], r["client_id"], int(r["requests"])) for r in csv.DictReader(f)]
    assert [r for r in stale if r[0] in ("live", "dead")] == [("dead", "stuck", 2)]


def test_conf_arguments() -> None:
    from kgate.pipeline.cli import UsageError, parse_conf
    from kgate.pipeline.session import cluster_shuffle_partitions

    assert parse_conf(["spark.sql.shuffle.partitions=64", "a.b=x=y"]) == {
        "spark.sql.shuffle.partitions": "64",
        "a.b": "x=y",
    }
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_conf(["no-equals"])
    assert cluster_shuffle_partitions(8) == 16
    assert cluster_shuffle_partitions(0) == 2
