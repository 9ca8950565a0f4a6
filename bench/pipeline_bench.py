#!/usr/bin/env python3
"""``kgate report`` end to end, cold, against DuckDB computing the six main tables from the same files.

Targets (issue 26, a quiet 2-core machine, Parquet input as the audit log's ``format: parquet``
writes it): 10M events cold in <= 40 s end to end (>= 250,000 events/s); 10,000 events cold in
<= 20 s with Spark's start; ``kgate report`` using <= 2x DuckDB's CPU at 10M events.

1. Generate N audit events (default 10 million) with Spark itself (a Python loop would take longer
   than the pipeline): 8 instances, 500 clients and 1,000 topics, both Zipf-like (log-uniform
   inverse CDF, s ~ 1: a few hot, a long tail), a mix of api keys and versions (some clients on
   topic-id versions, most not), lognormal latencies, 0.5% errors, a few policy denials, rare
   never-resolving ids, and 20 topics deleted and recreated at midday with some clients still
   fetching the old id (error 100). Events are in random time order within each file, as kgate
   writes them (by completion). Written as gzip JSON lines; with ``--format parquet`` (the default)
   each file is then converted by the audit log's own converter
   (:func:`kgate.filters.builtin.audit.parquet.convert_file`: zstd, 128 Ki-row groups), so the
   Parquet is byte for byte what ``format: parquet`` publishes.
2. ``kgate report --input DIR --output OUT`` as a fresh process (cold: JVM start, every table, CSV,
   Parquet and the HTML page; ``--no-html`` too with ``--no-html-run``), ``--reps`` times: wall time,
   and CPU seconds of the process tree (``wait4``: the JVM and every Python process it reaped).
3. DuckDB, also a fresh process, over the same files: the six main tables (topic_hourly,
   chargeback, clients, instances, latency_api, api_errors) with the same keys and measures (exact
   distinct counts and percentiles, which are dearer than the report's sketches), written as CSV.
4. The 1-minute load average before and after each run: the machine is shared.

Run: ``python bench/pipeline_bench.py [--events 10000000] [--format parquet|jsonl] [--dir DIR]``;
``--reuse`` skips generation when the directory already holds the same number of events;
``--conf KEY=VALUE`` (repeatable) passes a Spark setting to ``kgate report``; ``--report-dir`` gives each
of two runs side by side its own output; ``--eventlog DIR`` keeps Spark's event log of each run (stage
and query times, task CPU). ``kgate report`` maps the driver JVM's class archive from the user's cache
when there is one (``KGATE_REPORT_CDS=0`` for a run without; docs/performance.md).
``--floor``: instead of the report, Spark's floor on the same Parquet files in one session with
``kgate report``'s settings for their size (a bare scan, a bare count-and-sums aggregation per event
and per topic entry), then the roll-up's own job: per job its wall and the JVM's CPU seconds.
``KGATE_REPORT_TRACE=1`` in the environment makes ``kgate report`` print a timestamped trace of its phases.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T0_US = 1_764_000_000_000_000  # 2025-11-24 16:00 UTC
DAY_US = 86_400_000_000


def generate(spark, out: Path, n: int, files: int) -> None:  # type: ignore[no-untyped-def]
    """Write ``n`` events as ``files`` gzip JSONL files under ``out`` (Spark does the work, all cores)."""
    from pyspark.sql import functions as F

    def zipf(k: int, seed: int):  # type: ignore[no-untyped-def]
        # log-uniform inverse CDF: P(i) ~ 1/(i+1), the shape of Zipf with s = 1, over 0..k-1
        return F.least(F.floor(F.exp(F.rand(seed) * F.log(F.lit(k + 1.0)))) - 1, F.lit(k - 1)).cast("int")

    r = F.rand
    df = spark.range(0, n, numPartitions=files).select(
        (F.spark_partition_id() % 8).alias("inst"),
        (F.lit(T0_US) + (r(1) * DAY_US).cast("long")).alias("time_us"),
        zipf(500, 2).alias("c"),
        zipf(1000, 3).alias("t"),
        r(4).alias("u_api"),
        r(5).alias("u_err"),
        r(6).alias("u_bytes"),
        F.randn(7).alias("g_lat"),
        r(8).alias("u_misc"),
    )
    api_name = (
        F.when(F.col("u_api") < 0.45, "Fetch")
        .when(F.col("u_api") < 0.80, "Produce")
        .when(F.col("u_api") < 0.90, "Metadata")
        .when(F.col("u_api") < 0.94, "OffsetCommit")
        .when(F.col("u_api") < 0.97, "Heartbeat")
        .otherwise("ListOffsets")
    )
    api_key = (
        F.when(api_name == "Fetch", 1)
        .when(api_name == "Produce", 0)
        .when(api_name == "Metadata", 3)
        .when(api_name == "OffsetCommit", 8)
        .when(api_name == "Heartbeat", 12)
        .otherwise(2)
    )
    c, t = F.col("c"), F.col("t")
    id_client = ((api_name == "Fetch") & (c % 3 == 0)) | ((api_name == "Produce") & (c % 5 == 0))
    version = (
        F.when(api_name == "Fetch", F.when(c % 3 == 0, 13 + c % 4).otherwise(11 + c % 2))
        .when(api_name == "Produce", F.when(c % 5 == 0, 13).otherwise(9))
        .when(api_name == "Metadata", 12)
        .otherwise(8)
    )
    recreated = (t % 50) == 7  # 20 topics deleted and recreated at midday
    after = F.col("time_us") >= F.lit(T0_US + DAY_US // 2)
    stale_client = recreated & after & (c % 37 == 0)
    gen = F.when(recreated & after & ~(c % 37 == 0), 1).otherwise(0)
    ghost = id_client & (F.col("u_misc") < 0.0005)
    topic_id = F.when(ghost, F.concat(F.lit("GhostGhostGhost"), F.lpad((t % 10_000).cast("string"), 7, "0"))).when(
        id_client,
        F.concat(F.lit("Tid"), F.lpad(t.cast("string"), 6, "0"), F.lit("g"), gen.cast("string"), F.lit("AAAAAAAAAAA")),
    )
    name = F.when(ghost, F.lit(None).cast("string")).otherwise(F.concat(F.lit("topic-"), t.cast("string")))
    status = F.when(ghost, "unresolved").when(id_client, "resolved").otherwise("given")
    err = F.when(stale_client | ghost, 100).when(F.col("u_err") < 0.005, 6).when(F.col("u_err") < 0.006, 7).otherwise(0)
    rec_bytes = (F.col("u_bytes") * F.col("u_bytes") * 64_000).cast("long")  # most small, some large batches
    has_topic = api_name.isin("Fetch", "Produce", "ListOffsets", "OffsetCommit", "Metadata")
    topic = F.struct(
        topic_id.alias("id"),
        name.alias("name"),
        status.alias("name_status"),
        (1 + t % 6).alias("partitions"),
        F.when(api_name.isin("Fetch", "Produce"), rec_bytes).alias("bytes"),
        F.when(api_name.isin("Fetch", "Produce"), (rec_bytes / 200).cast("long")).alias("records"),
        F.array(err).alias("error_codes"),
    )
    denied = (api_name == "Metadata") & (F.col("u_misc") > 0.999)
    policy = F.when(
        denied,
        F.array(
            F.struct(
                F.lit("topic-policy").alias("filter"),
                F.lit("deny").alias("decision"),
                F.lit("Describe").alias("operation"),
                F.lit("topic").alias("resource_type"),
                F.concat(F.lit("secret-"), (t % 7).cast("string")).alias("resource"),
                F.lit(29).alias("error_code"),
                F.lit("topic matches deny pattern secret-*").alias("reason"),
            )
        ),
    )
    event = F.struct(
        F.lit(1).alias("schema"),
        "time_us",
        F.concat(F.lit("kgate-"), F.col("inst").cast("string")).alias("instance"),
        F.lit("prod").alias("cluster"),
        F.struct(
            F.concat(
                F.lit("10.1."),
                (c % 250).cast("string"),
                F.lit("."),
                (c % 7).cast("string"),
                F.lit(":"),
                (40000 + (F.col("u_misc") * 20000).cast("int")).cast("string"),
            ).alias("address"),
            F.concat(F.lit("app-"), c.cast("string")).alias("id"),
            F.concat(F.lit("User:team-"), (c % 60).cast("string")).alias("principal"),
        ).alias("client"),
        F.struct(api_key.alias("key"), api_name.alias("name"), version.alias("version")).alias("api"),
        (F.col("u_misc") * 2_000_000_000).cast("int").alias("correlation_id"),
        F.when(denied, 29).otherwise(err).alias("error_code"),
        (F.exp(F.col("g_lat") * 0.8 + 7.5) + F.when(api_name == "Fetch", F.col("u_bytes") * 100_000).otherwise(0))
        .cast("long")
        .alias("latency_us"),
        (F.lit(80) + F.when(api_name == "Produce", rec_bytes).otherwise(0)).alias("request_bytes"),
        (F.lit(60) + F.when(api_name == "Fetch", rec_bytes).otherwise(0)).alias("response_bytes"),
        F.filter(F.array(topic), lambda _: has_topic).alias("topics"),
        policy.alias("policy"),
    )
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (
        df.select(F.to_json(event, {"ignoreNullFields": "false"}).alias("value"))
        .write.option("compression", "gzip")
        .text(str(tmp))
    )
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for i, part in enumerate(sorted(tmp.glob("part-*.gz"))):
        part.rename(out / f"kgate-{i % 8}-audit-{i:04d}.jsonl.gz")
    shutil.rmtree(tmp)
    (out / "_events").write_text(str(n))


DUCKDB_SCRIPT = r"""
import sys, time, duckdb
src, out, fmt, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0 = time.perf_counter()
con = duckdb.connect()
con.execute(f"SET threads = {threads}")
if fmt == "parquet":
    con.execute(f"CREATE VIEW ev AS SELECT * FROM read_parquet('{src}/*.parquet')")
else:
    con.execute(f"CREATE VIEW ev AS SELECT * FROM read_json('{src}/*.jsonl.gz', format='newline_delimited', "
                "columns={schema: 'INTEGER', time_us: 'BIGINT', instance: 'VARCHAR', cluster: 'VARCHAR', "
                "client: 'STRUCT(address VARCHAR, id VARCHAR, principal VARCHAR)', "
                "api: 'STRUCT(key INTEGER, name VARCHAR, version INTEGER)', correlation_id: 'INTEGER', "
                "error_code: 'INTEGER', latency_us: 'BIGINT', request_bytes: 'BIGINT', response_bytes: 'BIGINT', "
                "topics: 'STRUCT(id VARCHAR, name VARCHAR, name_status VARCHAR, partitions INTEGER, bytes BIGINT, "
                "records BIGINT, error_codes INTEGER[])[]'})")
con.execute("CREATE TEMP TABLE e AS SELECT time_us, instance, cluster, client.address AS address, "
            "client.id AS client_id, client.principal AS principal, api.key AS api_key, api.name AS api_name, "
            "error_code, latency_us, request_bytes, response_bytes, topics, "
            "make_date(1970,1,1) + CAST(time_us // 86400000000 AS INTEGER) AS day FROM ev WHERE schema = 1")
con.execute("CREATE TEMP TABLE t AS SELECT day, time_us // 3600000000 * 3600000000 AS hour, cluster, principal, "
            "client_id, api_key, u.t.name AS topic_name, u.t.id AS topic_id, u.t.bytes AS bytes, "
            "u.t.records AS records, u.t.error_codes AS codes FROM e, unnest(topics) AS u(t)")
queries = {
  "topic_hourly": "SELECT day, hour, cluster, topic_name, count(*) requests, count(*) FILTER (api_key=0) "
    "produce_requests, count(*) FILTER (api_key=1) fetch_requests, sum(bytes) FILTER (api_key=0) produced_bytes, "
    "sum(bytes) FILTER (api_key=1) consumed_bytes, sum(records) FILTER (api_key=0) produced_records, "
    "sum(records) FILTER (api_key=1) consumed_records FROM t GROUP BY ALL",
  "chargeback": "SELECT day, cluster, principal, client_id, topic_name, count(*) requests, count(*) FILTER "
    "(api_key=0) produce_requests, count(*) FILTER (api_key=1) fetch_requests, sum(bytes) FILTER (api_key=0) "
    "produced_bytes, sum(bytes) FILTER (api_key=1) consumed_bytes, sum(records) FILTER (api_key=0) "
    "produced_records, sum(records) FILTER (api_key=1) consumed_records FROM t GROUP BY ALL",
  "clients": "SELECT day, principal, client_id, count(*) requests, sum(request_bytes), sum(response_bytes), "
    "count(*) FILTER (error_code <> 0) errors, count(DISTINCT instance) instances FROM e GROUP BY ALL",
  "instances": "SELECT day, instance, count(*) requests, sum(request_bytes), sum(response_bytes), count(*) FILTER "
    "(error_code <> 0) errors, count(DISTINCT address) client_addresses, count(DISTINCT client_id) client_ids, "
    "min(time_us), max(time_us) FROM e GROUP BY ALL",
  "latency_api": "SELECT day, api_key, api_name, count(latency_us) answered, quantile_disc(latency_us, [0.5, 0.95, "
    "0.99]) p, max(latency_us), avg(latency_us) FROM e GROUP BY ALL",
  "api_errors": "SELECT day, api_key, api_name, error_code, count(*) requests FROM e GROUP BY ALL",
}
rows = {}
for name, q in queries.items():
    con.execute(f"COPY ({q}) TO '{out}/{name}.csv' (HEADER)")
    rows[name] = con.execute(f"SELECT count(*) FROM read_csv('{out}/{name}.csv')").fetchone()[0]
print(rows, round(time.perf_counter() - t0, 2))
"""


def _tree_cpu(root: int, seen: dict[tuple[int, str], float]) -> None:
    """Record the CPU seconds so far of ``root`` and each of its descendants into ``seen``
    ((pid, command name) -> seconds: the JVM and the Python processes apart).

    Sampled from /proc: the JVM that ``kgate report`` starts is never reaped by it (py4j's launcher), so
    ``RUSAGE_CHILDREN`` misses it; a process keeps the last value sampled before it exited.
    """
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    name: dict[int, str] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                head, tail = (entry / "stat").read_text().rsplit(")", 1)
            except OSError:
                continue
            f = tail.split()
            name[int(entry.name)] = head.partition("(")[2]
            parent[int(entry.name)] = int(f[1])
            cpu[int(entry.name)] = (int(f[11]) + int(f[12])) / tick
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    for p in tree:
        if p in cpu:
            seen[(p, name[p])] = max(seen.get((p, name[p]), 0.0), cpu[p])


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``cmd`` to its end: wall seconds, CPU seconds of its process tree (sampled every 0.1 s), load."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    seen: dict[tuple[int, str], float] = {}
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env)
        while proc.poll() is None:
            _tree_cpu(proc.pid, seen)
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        out_f.seek(0)
        err_f.seek(0)
        out_b, err_b = out_f.read(), err_f.read()
    return {
        "wall_s": round(wall, 2),
        "rc": proc.returncode,
        "seen": seen,
        "load_before": round(load0, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "stdout": out_b.decode(errors="replace")[-2000:],
        "stderr": err_b.decode(errors="replace")[-2000:],
    }


def _runs(label: str, cmd: list[str], reps: int, env: dict[str, str] | None = None) -> list[dict[str, object]]:
    runs = []
    for i in range(reps):
        r = _timed(cmd, env)
        seen: dict[tuple[int, str], float] = r.pop("seen")  # type: ignore[assignment]
        # every process of the tree, its last sample (a process's final 0.1 s may be missed)
        r["cpu_s"] = round(sum(seen.values()), 2)
        by_name: dict[str, float] = {}
        for (_pid, comm), secs in seen.items():
            by_name[comm] = round(by_name.get(comm, 0.0) + secs, 2)
        r["cpu_s_by_process"] = by_name
        if r["rc"] != 0:
            print(f"{label} failed:\n{r['stderr']}", file=sys.stderr)
            raise SystemExit(1)
        print(
            f"{label} run {i + 1}: {r['wall_s']} s wall, {r['cpu_s']} CPU-s {by_name}, load "
            f"{r['load_before']} -> {r['load_after']}",
            flush=True,
        )
        runs.append(r)
    return runs


def _jvm_cpu() -> float:
    """CPU seconds so far of this process's descendants (the driver JVM)."""
    seen: dict[tuple[int, str], float] = {}
    _tree_cpu(os.getpid(), seen)
    return sum(v for (pid, _name), v in seen.items() if pid != os.getpid())


def floor(src: Path, conf: list[str]) -> dict[str, object]:
    """Spark's floor on these files, in one session with ``kgate report``'s settings for their size: a
    bare scan, a bare aggregation per event and per topic entry (count and sums, the roll-up's kind of
    keys), then the roll-up's own job as ``kgate report`` runs it (read, every grain, merge, written as
    Parquet); per job its wall and the JVM's CPU seconds (task CPU plus planning, compiling, JIT, GC)."""
    from pyspark.sql import functions as F

    from kgate.pipeline import ingest, reports
    from kgate.pipeline.cli import parse_conf
    from kgate.pipeline.session import build_session

    files = sorted(str(f) for f in src.iterdir() if f.suffix == ".parquet")
    size = sum(os.path.getsize(f) for f in files)
    spark = build_session(input_bytes=size, extra=parse_conf(conf), app_name="kgate-pipeline-floor")
    e = F.col
    day = ((e("time_us") - F.pmod(e("time_us"), F.lit(DAY_US))) / F.lit(DAY_US)).cast("long").alias("day")

    def events():  # type: ignore[no-untyped-def]
        from kgate.pipeline.rollup import spark_schema

        return spark.read.schema(spark_schema()).parquet(*files)

    def scan() -> None:
        events().agg(F.count(F.lit(1)), F.sum("request_bytes"), F.sum("response_bytes")).collect()

    def per_event() -> None:
        events().groupBy(day, "instance", e("client.principal"), e("client.id"), e("api.key"), "error_code").agg(
            F.count(F.lit(1)), F.sum("request_bytes"), F.sum("response_bytes"), F.sum("latency_us")
        ).write.mode("overwrite").format("noop").save()

    def per_topic() -> None:
        t = events().select(day, "cluster", "client", "api", F.explode("topics").alias("t"))
        t.groupBy("day", "cluster", e("client.principal"), e("client.id"), e("t.name"), e("api.key")).agg(
            F.count(F.lit(1)), F.sum("t.bytes"), F.sum("t.records")
        ).write.mode("overwrite").format("noop").save()

    def rollup() -> None:
        scratch = tempfile.mkdtemp(prefix="kgate-floor-")
        try:
            reports.merge(ingest.read_partials(spark, files)).write.partitionBy("gid").parquet(scratch + "/r")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    out: dict[str, object] = {"input_mb": round(size / 1e6, 1)}
    for name, job in (("scan", scan), ("per_event", per_event), ("per_topic", per_topic), ("rollup", rollup)):
        load0, c0, t0 = os.getloadavg()[0], _jvm_cpu(), time.perf_counter()
        job()
        wall, cpu = time.perf_counter() - t0, _jvm_cpu() - c0
        out[name] = {
            "wall_s": round(wall, 1),
            "jvm_cpu_s": round(cpu, 1),
            "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
        }
        print(f"floor {name}: {out[name]}", flush=True)
    spark.stop()
    return out


def to_parquet(src: Path, dst: Path, workers: int = 2) -> None:
    """Each gzip JSON-lines file of ``src`` through the audit log's own Parquet converter into ``dst``."""
    from concurrent.futures import ProcessPoolExecutor

    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    files = sorted(src.glob("*.jsonl.gz"))
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_convert_one, files, [dst] * len(files)))
    (dst / "_events").write_text((src / "_events").read_text())


def _convert_one(gz: Path, dst: Path) -> None:
    import gzip

    from kgate.filters.builtin.audit.parquet import convert_file

    hidden = dst / ("." + gz.name.removesuffix(".gz"))
    with gzip.open(gz, "rb") as f_in, open(hidden, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out, 16 << 20)
    convert_file(hidden)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=16, help="files to write")
    ap.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "kgate-pipeline-bench"))
    ap.add_argument("--reuse", action="store_true", help="keep the generated files of an earlier run")
    ap.add_argument("--reps", type=int, default=1, help="cold runs of each side")
    ap.add_argument("--no-duckdb", action="store_true")
    ap.add_argument("--no-html-run", action="store_true", help="also time kgate report --no-html")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--generate-only", action="store_true", help="write the files and stop")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="instead of the report: Spark's floor on the Parquet files (bare scan, aggregations), then the roll-up",
    )
    ap.add_argument("--report-dir", help="kgate report's output (default DIR/report; A/B runs side by side need two)")
    ap.add_argument("--eventlog", help="write Spark's event log of each kgate run under this directory")
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra Spark setting for kgate report (repeatable)",
    )
    args = ap.parse_args()

    base = Path(args.dir)
    data = base / f"audit-{args.events}"
    marker = data / "_events"
    out: dict[str, object] = {"events": args.events, "format": args.format, "cores": os.cpu_count(), "conf": args.conf}
    if not (args.reuse and marker.exists() and marker.read_text() == str(args.events)):
        from kgate.pipeline.session import build_session

        spark = build_session(driver_memory="2g", app_name="kgate-pipeline-bench-generate")
        t0 = time.perf_counter()
        generate(spark, data, args.events, args.files)
        spark.stop()
        out["generate_s"] = round(time.perf_counter() - t0, 1)
        print(f"generated {args.events:,} events in {out['generate_s']}s", flush=True)
    src = data
    if args.format == "parquet":
        src = base / f"audit-{args.events}-parquet"
        pmark = src / "_events"
        if not (args.reuse and pmark.exists() and pmark.read_text() == str(args.events)):
            t0 = time.perf_counter()
            to_parquet(data, src)
            print(f"converted to Parquet in {time.perf_counter() - t0:.1f}s", flush=True)
    if args.generate_only:
        return 0
    if args.floor:
        result = floor(src, args.conf)
        print(json.dumps(result, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
        return 0
    files = [f for f in src.iterdir() if not f.name.startswith(("_", "."))]
    out["files"] = len(files)
    out["input_mb"] = round(sum(f.stat().st_size for f in files) / 1e6, 1)

    report = Path(args.report_dir) if args.report_dir else base / "report"
    kgate = [sys.executable, "-m", "kgate", "report", "--input", str(src), "--output", str(report)]
    for c in args.conf:
        kgate += ["--conf", c]
    if args.eventlog:
        os.makedirs(args.eventlog, exist_ok=True)
        kgate += ["--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir=file://{args.eventlog}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out["kgate"] = _runs("kgate report", kgate, args.reps, env)
    if args.no_html_run:
        out["kgate_no_html"] = _runs("kgate report --no-html", [*kgate, "--no-html"], args.reps, env)
    if not args.no_duckdb:
        ddir = base / "duckdb"
        shutil.rmtree(ddir, ignore_errors=True)
        ddir.mkdir(parents=True)
        out["duckdb"] = _runs(
            "duckdb (6 tables)",
            [sys.executable, "-c", DUCKDB_SCRIPT, str(src), str(ddir), args.format, str(os.cpu_count() or 2)],
            args.reps,
        )
        k_cpu = min(float(r["cpu_s"]) for r in out["kgate"])  # type: ignore[arg-type, union-attr]
        d_cpu = min(float(r["cpu_s"]) for r in out["duckdb"])  # type: ignore[arg-type, union-attr]
        out["cpu_ratio_kgate_to_duckdb"] = round(k_cpu / d_cpu, 2)
    best = min(float(r["wall_s"]) for r in out["kgate"])  # type: ignore[arg-type, union-attr]
    out["kgate_events_per_s"] = round(args.events / best)
    for runs in (v for k, v in out.items() if k in ("kgate", "kgate_no_html", "duckdb")):
        for r in runs:  # type: ignore[union-attr]
            r.pop("stdout", None)
            r["stderr"] = str(r["stderr"]).strip().splitlines()[-1:] if r["stderr"] else []
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
