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


def test_parquet_history_keeps_earlier_days(spark: Any, fleet_result: Any, tmp_path: Path) -> None:
    """A run replaces only the days it speaks for: an earlier run's other days stay (a local run
    once deleted the table's folder, and with it every earlier day). The first run is the fleet's
    (Monday 2025-11-24, computed once for the session)."""
    from kgate.pipeline import ingest, tables
    from kgate.pipeline.ingest import Window

    from .conftest import HOUR, T0, event, topic, write_events

    day = 24 * HOUR
    out = tmp_path / "out"

    def run(events: list[dict[str, Any]], name: str, window: Window = ingest.ALL_TIME) -> None:
        write_events(tmp_path / name / "audit.jsonl", events)
        tables.write(tables.build(spark, ingest.resolve_inputs([str(tmp_path / name)]), window), str(out))

    tables.write(fleet_result, str(out))  # Monday
    charge = out / "parquet" / "chargeback"
    assert sorted(p.name for p in charge.iterdir()) == ["day=2025-11-24"]
    run([event(T0 + day, topics=[topic("b", bytes=20, records=2)])], "tuesday")
    assert sorted(p.name for p in charge.iterdir()) == ["day=2025-11-24", "day=2025-11-25"]
    # a rerun of Monday with a window: Monday replaced (now topic c), Tuesday kept
    run([event(T0 + HOUR, topics=[topic("c", bytes=30, records=3)])], "monday2", Window(T0 - 16 * HOUR, T0 + 8 * HOUR))
    rows = sorted((str(r["day"]), r["topic_name"]) for r in spark.read.parquet(str(charge)).collect())
    assert rows == [("2025-11-24", "c"), ("2025-11-25", "b")]


def test_window_closing_line_empty_files_and_a_passing_unknown_topic(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The closing line counts the events inside --since/--until (it counted every good line); an empty
    input file is listed among the inputs (it was missing); one UNKNOWN_TOPIC_OR_PARTITION on a live
    topic is not a stale id, while repeated ones after the id's last success are."""
    import csv

    from .conftest import HOUR, T0, event, topic, write_events

    s = 1_000_000
    live = [
        event(T0 + i * s, version=13, topics=[topic("live", "LIVE", status="resolved", bytes=10, records=1)])
        for i in range(3)
    ]
    live.append(
        event(T0 + 5 * s, version=13, error_code=3, topics=[topic("live", "LIVE", status="resolved", errors=[3])])
    )
    live.append(event(T0 + 9 * s, version=13, topics=[topic("live", "LIVE", status="resolved", bytes=10, records=1)]))
    gone = [event(T0 + 20 * s, version=13, topics=[topic("dead", "DEAD", status="resolved", bytes=10, records=1)])]
    gone += [
        event(
            T0 + (30 + i) * s,
            version=13,
            error_code=3,
            client_id="stuck",
            topics=[topic("dead", "DEAD", status="resolved", errors=[3])],
        )
        for i in range(2)
    ]
    early = [event(T0 - 2 * HOUR, topics=[topic("live", bytes=5, records=1)])]  # before --since
    d = tmp_path / "in"
    write_events(d / "audit-1.jsonl", live + gone + early)
    (d / "audit-empty.jsonl").write_text("")
    out = tmp_path / "out"
    args = ["report", "--input", str(d), "--output", str(out), "--since", str(T0 // s - 60), "--no-html"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "kgate report: 8 events (1 good lines outside --since/--until) from 2 file(s)" in err, err
    with open(out / "csv" / "input_files.csv", newline="") as f:
        files = {Path(r["file"]).name: (int(r["lines"]), int(r["ok"])) for r in csv.DictReader(f)}
    assert files == {"audit-1.jsonl": (9, 9), "audit-empty.jsonl": (0, 0)}
    with open(out / "csv" / "stale_ids.csv", newline="") as f:
        stale = [(r["topic_name"], r["client_id"], int(r["requests"])) for r in csv.DictReader(f)]
    assert stale == [("dead", "stuck", 2)]


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
