"""Fixtures for the pipeline tests: one local SparkSession for the whole run, event writers, and the
hand-made fleet's report computed once per run (``fleet_result``, ``fleet_cli_run``).

Spark is optional for the rest of kgate's suite: without pyspark (or without Java 17+) every test
here is skipped with the reason instead of failing the run.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

T0 = 1_764_000_000_000_000  # 2025-11-24T16:00:00Z in µs
HOUR = 3_600_000_000


def event(
    time_us: int,
    *,
    api: str = "Fetch",
    key: int | None = None,
    version: int = 12,
    client_id: str | None = "app",
    principal: str | None = "User:alice",
    instance: str = "kgate-a",
    cluster: str = "default",
    error_code: int | None = 0,
    latency_us: int | None = 1000,
    request_bytes: int = 100,
    response_bytes: int | None = 200,
    topics: list[dict[str, Any]] | None = None,
    policy: list[dict[str, Any]] | None = None,
    address: str = "10.0.0.1:5000",
) -> dict[str, Any]:
    """One v1 event (docs/audit-log.md) with sensible defaults; override what a test is about."""
    keys = {"Produce": 0, "Fetch": 1, "Metadata": 3}
    return {
        "schema": 1,
        "time_us": time_us,
        "instance": instance,
        "cluster": cluster,
        "client": {"address": address, "id": client_id, "principal": principal},
        "api": {"key": keys[api] if key is None else key, "name": api, "version": version},
        "correlation_id": 1,
        "error_code": error_code,
        "latency_us": latency_us,
        "request_bytes": request_bytes,
        "response_bytes": response_bytes,
        "topics": topics or [],
        "policy": policy,
    }


def topic(
    name: str | None,
    id: str | None = None,
    *,
    status: str = "given",
    bytes: int | None = None,
    records: int | None = None,
    errors: list[int] | None = None,
    partitions: int = 1,
    failed: tuple[int, int | None] | None = None,
) -> dict[str, Any]:
    """A ``topics[]`` entry; ``failed``: a Produce's (failed_bytes, failed_records), written only then."""
    out = {
        "id": id,
        "name": name,
        "name_status": status,
        "partitions": partitions,
        "bytes": bytes,
        "records": records,
        "error_codes": [0] if errors is None else errors,
    }
    if failed is not None:
        out["failed_bytes"], out["failed_records"] = failed
    return out


def write_lines(path: Path, lines: list[str]) -> Path:
    """Write raw lines (gzip when the name ends in .gz), atomically: a follower never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    tmp = path.with_name("." + path.name + ".tmp")
    if path.name.endswith(".gz"):
        with gzip.open(tmp, "wb") as f:
            f.write(data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def write_events(path: Path, events: list[dict[str, Any]], extra_lines: list[str] = ()) -> Path:  # type: ignore[assignment]
    return write_lines(path, [json.dumps(e) for e in events] + list(extra_lines))


@pytest.fixture(scope="session")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hand-made fleet log of test_reports (``fleet``), written once per run: only read."""
    from .test_reports import fleet

    return fleet(tmp_path_factory.mktemp("fleet"))


@dataclass(frozen=True)
class CliRun:
    """The session's ``kgate report`` run over the fleet: exit status, stderr, output directory, and
    the report (``tables.Result``) it wrote there."""

    status: int
    err: str
    out: Path
    result: Any


@pytest.fixture(scope="session")
def fleet_cli_run(spark: Any, fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    """``kgate report --input FLEET --output OUT`` once per run, in process on the session's SparkSession
    (``support.spark.run_report``): the fleet's one report, shared by the tests that check its tables
    (test_reports), its files and closing line (test_cli) and its page (test_browser), instead of a
    Spark run per test. Tests only read it (test_browser copies OUT before adding to it)."""
    from support.spark import run_report

    out = tmp_path_factory.mktemp("fleet-report") / "report"
    run = run_report(["--input", str(fleet_dir), "--output", str(out)])
    return CliRun(run.status, run.err, out, run.result)


@pytest.fixture(scope="session")
def fleet_result(fleet_cli_run: CliRun) -> Any:
    """Every report table of the fleet (``tables.Result``): the one the session's CLI run wrote."""
    assert fleet_cli_run.result is not None, fleet_cli_run.err
    return fleet_cli_run.result


def rows(result: Any) -> dict[str, list[dict[str, Any]]]:
    """A ``tables.Result``'s tables (and ``input_files``) as lists of dicts: ``report_tables``'s form."""
    from kgate.pipeline.tables import PROBLEMS

    out = {name: t.to_pylist() for name, t in result.tables.items()}
    out[PROBLEMS] = result.problems.to_pylist()
    return out


@dataclass(frozen=True)
class OracleRun:
    """The session's oracle report: the events its inputs hold (those a report must count) and the
    report (``tables.Result``)."""

    events: list[dict[str, Any]]
    result: Any


@pytest.fixture(scope="session")
def oracle_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> OracleRun:
    """One report, once per session, over test_oracle's generated fleets (JSON lines and Parquet) and
    test_reports' small stories (``oracle_inputs``): every table against an independent computation
    (test_oracle), the small stories' known answers (test_reports), and a Parquet history of many
    days (test_cli). One Spark run, not two."""
    from support.spark import INTERPRETED, TEST_SQL

    from kgate.pipeline import ingest, tables

    from .test_oracle import oracle_inputs

    d = tmp_path_factory.mktemp("oracle") / "in"
    events = oracle_inputs(d)
    # the one report on Spark's generated code, as production runs it (every other test query runs
    # interpreted, which is cheaper on tiny data): a codegen-only difference shows against the oracle
    for key, value in {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}.items():
        assert key in INTERPRETED  # Spark's defaults for what the tests' session turns off
        spark.conf.set(key, value)
    try:
        return OracleRun(events, tables.build(spark, ingest.resolve_inputs([str(d)])))
    finally:
        for key, value in TEST_SQL.items():
            spark.conf.set(key, value)


@pytest.fixture(scope="session")
def windowed_run(spark: Any, fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> CliRun:
    """``kgate report --since --until --no-html`` once per session, in process: the fleet, a copy of
    test_reports' payments story and test_cli's stale-id story (``windowed_inputs``) in a window. What the
    window does to the fleet and the exact stale-id pass (test_reports), the closing line's counts, an
    empty input file and the stale-id rules (test_cli), and a windowed rerun of a Parquet history."""
    from support.spark import run_report

    from .test_reports import WINDOW_SINCE, WINDOW_UNTIL, windowed_inputs

    out = tmp_path_factory.mktemp("windowed") / "report"
    inputs = windowed_inputs(tmp_path_factory.mktemp("windowed-in"), fleet_dir)
    since, until = str(WINDOW_SINCE // 1_000_000), str(WINDOW_UNTIL // 1_000_000)
    run = run_report(["--input", *inputs, "--output", str(out), "--since", since, "--until", until, "--no-html"])
    return CliRun(run.status, run.err, out, run.result)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Spark jobs are slow on a busy 2-core machine: the pipeline's tests get 15 minutes, not 5."""
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.timeout(900))
