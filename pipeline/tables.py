"""From audit files to report tables in memory (Arrow), and from there to Parquet and CSV.

One Spark job reads, parses and rolls the files up into every report's grain at once (Parquet files
natively in Spark, :mod:`kgate.pipeline.rollup`; JSON lines in its Python workers,
:mod:`kgate.pipeline.partials`; one hash aggregation merges them, :func:`kgate.pipeline.reports.merge`);
the roll-up is written once and every report is a small query on it, so the files are read once
however many reports there are. The aggregated tables are small (hours x topics, clients, instances):
they are brought to the driver as
Arrow tables, written as CSV there, and as Parquet partitioned by day either there (a local output
directory: no extra Spark job) or by Spark (``--tables`` on HDFS/S3).

:func:`report_tables` is the short way from a directory of events to plain Python rows, for tests
(the end-to-end test with real clients through the ``audit-log`` filter uses it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kgate.pipeline import ingest, reports, trace
from kgate.pipeline.ingest import ALL_TIME, Window

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

PROBLEMS = "input_files"
#: The window-wide latency per api (for the page), computed beside the tables.
LATENCY_WINDOW = "latency_window"
#: Record bytes per minute and topic (the traffic chart), computed beside the tables.
TRAFFIC = "traffic"
#: The report queries that take longest (a cold 10k run's trace: joins, windows, a second job), submitted
#: first so the last to finish is not one started late; the rest follow in :data:`reports.REPORTS` order.
SLOW_FIRST = ("stale_ids", "topic_hourly", "instances", "latency_api", "clients", "latency_instance", LATENCY_WINDOW)


@dataclass
class Result:
    """The report tables of one run, as Arrow tables, plus window-wide latency per api for the HTML page
    (percentiles of days cannot be combined into the window's)."""

    tables: dict[str, pa.Table]
    problems: pa.Table
    latency_api: pa.Table
    timings: dict[str, float] = field(default_factory=dict)
    #: the run's --since/--until: which days of the Parquet history a write may replace
    window: Window = ALL_TIME
    #: record bytes per minute and topic name (``minute``, ``topic_name``, ``bytes``): the traffic chart
    traffic: pa.Table | None = None


def query_order(only: Sequence[str] | None = None) -> list[str]:
    """The report queries of a run (``only``: those tables; the page's two always), slowest first."""
    names = [n for n in reports.REPORTS if only is None or n in only] + [LATENCY_WINDOW, TRAFFIC]
    return sorted(names, key=lambda n: SLOW_FIRST.index(n) if n in SLOW_FIRST else len(SLOW_FIRST))


def compute(
    partials: DataFrame,
    exact: reports.ExactUses,
    only: Sequence[str] | None = None,
    on_table: Callable[[str, pa.Table], None] | None = None,
) -> Result:
    """Merge ``partials`` (from :func:`kgate.pipeline.ingest.read_partials`) and compute every report table.

    One Spark job reads, parses and rolls the files up (:func:`kgate.pipeline.reports.merge`); the
    roll-up is written once (Parquet in a local scratch directory, a directory per grain; on a
    cluster it is cached instead) and every table is a small query on it. ``exact`` counts single
    topic-id uses for the stale-id report's exact second pass (:func:`kgate.pipeline.reports.stale_ids`).
    ``timings``: seconds per phase (``ingest``, ``reports``) and per table. ``on_table(name, table)`` is
    called (from a worker thread) as each table arrives, ``input_files`` (:data:`PROBLEMS`),
    :data:`LATENCY_WINDOW` and :data:`TRAFFIC` included: the page's charts are drawn meanwhile.
    """
    import time

    from pyspark import StorageLevel

    timings: dict[str, float] = {}
    start = time.perf_counter()
    spark = partials.sparkSession
    scratch = None
    roll = reports.merge(partials)
    if (spark.sparkContext.master or "").startswith("local"):
        # Written once as Parquet, a directory per grain: each table then reads only its own
        # grain's rows and columns. (Caching the wide roll-up in memory was 3-10x slower to fill and scan.)
        scratch = tempfile.mkdtemp(prefix="kgate-rollup-")
        roll.write.partitionBy("gid").parquet(os.path.join(scratch, "rollup"))
        trace.mark("roll-up written")
        roll = spark.read.parquet(os.path.join(scratch, "rollup"))
    else:  # on a cluster a local directory is not shared by the executors: keep it in their storage
        roll = roll.persist(StorageLevel.MEMORY_AND_DISK)

    try:
        names = query_order(only)
        if scratch is None:
            # a cluster's roll-up is filled by its first action: one job, then the queries read it
            problems = reports.problems(roll).toArrow()
            if on_table is not None:
                on_table(PROBLEMS, problems)
        else:  # written already: the inputs table is one more small query
            names.append(PROBLEMS)
        timings["ingest"] = time.perf_counter() - start
        t_reports = time.perf_counter()

        def query(name: str) -> DataFrame:
            if name == PROBLEMS:
                return reports.problems(roll)
            if name == LATENCY_WINDOW:
                return reports.latency_api(roll, per_day=False)
            if name == TRAFFIC:
                return reports.traffic(roll)
            build = reports.REPORTS[name]
            return build(roll, exact) if name in reports.NEEDS_EXACT else build(roll)

        def run(name: str) -> tuple[str, pa.Table, float]:
            t0 = time.perf_counter()
            trace.mark(f"{name}: start")
            table = query(name).toArrow()
            trace.mark(f"{name}: collected")
            if on_table is not None:
                on_table(name, table)
            return name, table, time.perf_counter() - t0

        # The queries are small (their inputs are the roll-up's grains) and each spends most of its time
        # being planned and compiled in the driver's JVM, waiting on it in between: all submitted at once
        # (Spark plans and runs concurrent jobs of one session side by side) keep both cores busy.
        # Per-table timings then include waiting for the others.
        out: dict[str, pa.Table] = {}
        with ThreadPoolExecutor(len(names), thread_name_prefix="report") as pool:
            for name, table, seconds in pool.map(run, names):
                out[name] = table
                timings[name] = seconds
        if scratch is not None:
            problems = out.pop(PROBLEMS)
        lat_api = out.pop(LATENCY_WINDOW)
        traffic = out.pop(TRAFFIC)
        tables = {n: out[n] for n in reports.REPORTS if n in out}  # the order of REPORTS, as before
        timings["reports"] = time.perf_counter() - t_reports
    finally:
        if scratch is None:
            roll.unpersist()
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return Result(tables, problems, lat_api, timings, traffic=traffic)


def build(
    spark: SparkSession,
    paths: Sequence[str],
    window: Window = ALL_TIME,
    on_table: Callable[[str, pa.Table], None] | None = None,
) -> Result:
    """Read ``paths`` (already resolved files or URIs) and compute every report (``on_table``: :func:`compute`)."""
    from kgate.pipeline import rollup

    partials = ingest.read_partials(spark, paths, window)
    trace.mark("roll-up planned")
    result = compute(partials, ingest.exact_uses(spark, paths, window), on_table=on_table)
    result.window = window
    result.problems = with_empty_files(result.problems, paths, rollup.unreadable_parquet(paths))
    return result


def with_empty_files(problems: pa.Table, paths: Sequence[str], unreadable: dict[str, str] | None = None) -> pa.Table:
    """``problems`` with a row for every local input file no line came from: 0 lines (an empty file, a
    Parquet file of 0 rows: Spark's readers hand over no row for them, so they would be missing from
    the inputs table), or one malformed line for a Parquet file left out as ``unreadable`` (path ->
    why, :func:`kgate.pipeline.rollup.unreadable_parquet`)."""
    from urllib.parse import unquote

    import pyarrow as pa

    unreadable = unreadable or {}
    listed = {unquote(f) for f in problems.column("file").to_pylist()}
    missing = [p for p in paths if not ingest._is_uri(p) and p not in listed and os.path.isfile(p)]
    if not missing:
        return problems
    rows = [
        {
            "file": p,
            "lines": 1 if p in unreadable else 0,
            "ok": 0,
            "malformed": 1 if p in unreadable else 0,
            "unknown_schema": 0,
            "unknown_versions": "",
            "sample": unreadable.get(p),
        }
        for p in missing
    ]
    return pa.concat_tables([problems, pa.Table.from_pylist(rows, schema=problems.schema)])


def _csv_safe(table: pa.Table) -> pa.Table:
    """CSV has no lists or maps: none of the report tables has any, but guard the writer anyway."""
    import pyarrow as pa

    for i, f in enumerate(table.schema):
        if pa.types.is_nested(f.type):
            table = table.set_column(i, f.name, pa.array([str(v) for v in table.column(i).to_pylist()]))
    return table


def replaced_days(result: Result) -> set[str]:
    """The days (``YYYY-MM-DD``, UTC) a run speaks for: those its tables have rows in, and with both
    ``--since`` and ``--until`` every day the window touches (a day whose events are all gone now gets
    emptied). Only these day partitions of the Parquet history are replaced; earlier runs' other
    days are kept."""
    import datetime as dt

    days: set[str] = set()
    for table in result.tables.values():
        if "day" in table.column_names:
            days.update(str(d) for d in table.column("day").unique().to_pylist() if d is not None)
    w = result.window
    if w.since_us is not None and w.until_us is not None:
        day = dt.datetime.fromtimestamp(w.since_us / 1e6, dt.UTC).date()
        last = dt.datetime.fromtimestamp((w.until_us - 1) / 1e6, dt.UTC).date()
        while day <= last:
            days.add(day.isoformat())
            day += dt.timedelta(days=1)
    return days


def write(result: Result, out_dir: str, spark: SparkSession | None = None, tables_uri: str | None = None) -> None:
    """Write every table as ``out_dir/csv/NAME.csv`` and Parquet partitioned by day.

    Parquet goes to ``tables_uri/NAME`` when given (written by Spark, so any Hadoop file system
    works; dynamic partition overwrite replaces only the days written), else to
    ``out_dir/parquet/NAME`` (written here with pyarrow). Either way the history is kept: only the
    days of :func:`replaced_days` are replaced, every other day stays as an earlier run wrote it.
    The CSVs are this run's tables whole.
    """
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    csv_dir = os.path.join(out_dir, "csv")
    os.makedirs(csv_dir, exist_ok=True)
    everything = {**result.tables, PROBLEMS: result.problems}
    for name, table in everything.items():
        pacsv.write_csv(_csv_safe(table), os.path.join(csv_dir, f"{name}.csv"))
    days = replaced_days(result)
    for name, table in result.tables.items():
        if tables_uri is not None:
            if spark is None:
                raise ValueError("writing Parquet to a URI needs the SparkSession")
            df = spark.createDataFrame(table) if table.num_rows else None
            if df is not None:
                df.write.mode("overwrite").partitionBy("day").parquet(f"{tables_uri.rstrip('/')}/{name}")
            continue
        target = os.path.join(out_dir, "parquet", name)
        os.makedirs(target, exist_ok=True)
        for day in days:
            shutil.rmtree(os.path.join(target, f"day={day}"), ignore_errors=True)
        if table.num_rows:
            pq.write_to_dataset(table, target, partition_cols=["day"], existing_data_behavior="delete_matching")


def report_tables(
    inputs: str | Sequence[str], spark: SparkSession | None = None, window: Window = ALL_TIME
) -> dict[str, list[dict[str, Any]]]:
    """Every report table (and ``input_files``) of the audit files under ``inputs``, as lists of dicts.

    For tests: ``report_tables(tmp_path / "audit")["chargeback"]``. Starts a local session when
    none is given (reuses one that is running).
    """
    from kgate.pipeline.session import build_session

    specs = [inputs] if isinstance(inputs, str | os.PathLike) else list(inputs)
    paths = ingest.resolve_inputs([os.fspath(s) for s in specs])
    result = build(spark or build_session(), paths, window)
    out = {name: t.to_pylist() for name, t in result.tables.items()}
    out[PROBLEMS] = result.problems.to_pylist()
    return out
