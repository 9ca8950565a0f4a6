#!/usr/bin/env python3
"""``kgate report`` throughput: the whole pipeline against Spark merely reading the same files.

Targets (issue 10): on the 2-core machine, ≥ 200,000 events/s end to end (ingest + every report)
in local mode, and the whole pipeline ≥ 0.5x the rate of ``spark.read.text(...).count()`` over the
same files in the same run.

1. Generate N audit events (default 10 million) as gzip JSONL, one file set per kgate instance,
   with Spark itself (a Python loop would take longer than the pipeline): 8 instances, 500 clients
   and 1,000 topics, both Zipf-like (log-uniform inverse CDF, s ~ 1: a few hot, a long tail), a mix
   of api keys and versions (some clients on topic-id versions, most not), lognormal latencies,
   0.5% errors, a few policy denials, rare never-resolving ids, and 20 topics deleted and recreated
   at midday with some clients still fetching the old id (error 100). Events are written in
   random time order within each file, as kgate writes them (by completion).
2. Measure, in one SparkSession: the read-only rate (``spark.read.text(files).count()``), then
   the pipeline (ingest + every report table to the driver + CSV and Parquet written), then the
   HTML page with its charts separately; the read-only pass once more at the end (warm caches
   favour whichever runs second; both are reported).
3. Peak memory: the driver JVM's VmHWM (local mode runs the executors inside it) and this
   Python process's max RSS; CPU seconds (JVM, its Python workers and this process) per phase, and
   the pipeline's CPU against the read-only pass's (``cpu_ratio``): on a loaded machine the steadier ratio.

Run: ``python bench/pipeline_bench.py [--events 10000000] [--dir /tmp/kgate-pipeline-bench]``;
``--reuse`` skips generation when the directory already holds the same number of events;
``--parquet-store`` also times the ``--follow`` path (partial aggregates stored once, every report from them);
``--conf KEY=VALUE`` (repeatable) tries a Spark setting without editing pipeline/session.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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


def _jvm_pid() -> int | None:
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == me and "java" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) the JVM, its Python workers and this Python process have used: a
    shared, loaded machine stretches wall times by whatever else runs, CPU time much less.

    The workers (``pyspark.daemon`` and the processes it forks) run the roll-up's map side, so every
    descendant of the JVM counts, with what they reaped from their own exited children.
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    if pid is None:
        return total
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
    tree, grew = {pid}, True
    while grew:
        more = {p for p, f in stats.items() if int(f[1]) in tree} - tree
        tree |= more
        grew = bool(more)
    tick = os.sysconf("SC_CLK_TCK")
    for p in tree:
        f = stats.get(p)
        if f is not None:
            total += (int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if p != pid else 0)) / tick
    return total


def _hwm_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=16, help="gzip files to write (one Spark task each)")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "kgate-pipeline-bench"))
    ap.add_argument("--reuse", action="store_true", help="keep the generated files of an earlier run")
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--generate-only", action="store_true", help="write the files and stop")
    ap.add_argument(
        "--parquet-store",
        action="store_true",
        help="also: partial aggregates into a Parquet store (what --follow keeps), then every report",
    )
    ap.add_argument("--shuffle-partitions", type=int, default=16)
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra Spark setting for the session (repeatable; spark.driver.extraJavaOptions is "
        "added to the local settings' options, not put in their place)",
    )
    args = ap.parse_args()

    from kgate.pipeline import ingest, tables
    from kgate.pipeline.html import render
    from kgate.pipeline.session import build_session, local_settings

    extra = dict(item.split("=", 1) for item in args.conf)
    java = "spark.driver.extraJavaOptions"
    if java in extra:
        extra[java] = f"{local_settings()[java]} {extra[java]}"
    spark = build_session(
        driver_memory=args.driver_memory,
        app_name="kgate-pipeline-bench",
        shuffle_partitions=args.shuffle_partitions,
        extra=extra,
    )
    base = Path(args.dir)
    data = base / "audit"
    out: dict[str, object] = {"events": args.events, "files": args.files, "cores": os.cpu_count(), "conf": extra}
    marker = data / "_events"
    if not (args.reuse and marker.exists() and marker.read_text() == str(args.events)):
        t0 = time.perf_counter()
        generate(spark, data, args.events, args.files)
        out["generate_s"] = round(time.perf_counter() - t0, 1)
        print(f"generated {args.events:,} events in {out['generate_s']}s", flush=True)
    if args.generate_only:
        spark.stop()
        return 0
    paths = ingest.resolve_inputs([str(data)])
    out["files"] = len(paths)  # a reused set keeps the number it was generated with
    out["gz_mb"] = round(sum(os.path.getsize(p) for p in paths) / 1e6, 1)

    jvm = _jvm_pid()
    cpu: dict[str, float] = {}

    def read_only(phase: str) -> float:
        t0, c0 = time.perf_counter(), _cpu_s(jvm)
        lines = spark.read.text(paths).count()
        assert lines == args.events, (lines, args.events)
        cpu[phase] = round(_cpu_s(jvm) - c0, 2)
        return time.perf_counter() - t0

    read_s = read_only("read_only")
    print(f"read only: {read_s:.1f}s = {args.events / read_s:,.0f} events/s", flush=True)

    t0, c0 = time.perf_counter(), _cpu_s(jvm)
    result = tables.build(spark, paths)
    tables.write(result, str(base / "report"), spark)
    pipe_s = time.perf_counter() - t0
    cpu["pipeline"] = round(_cpu_s(jvm) - c0, 2)
    ok = sum(r["ok"] for r in result.problems.to_pylist())
    assert ok == args.events, (ok, args.events)
    print(
        f"pipeline (ingest + every report, CSV + Parquet, no HTML): {pipe_s:.1f}s = "
        f"{args.events / pipe_s:,.0f} events/s",
        flush=True,
    )
    t0 = time.perf_counter()
    render(result, str(base / "report"))
    html_s = time.perf_counter() - t0
    read2_s = read_only("read_only_again")
    print(f"html + charts: {html_s:.1f}s; read only again: {read2_s:.1f}s", flush=True)

    if args.parquet_store:
        # What --follow does: each file parsed and aggregated once into a store of partial aggregates;
        # a refresh is then every report over it.
        from kgate.pipeline import follow

        store = base / "store"
        shutil.rmtree(store, ignore_errors=True)
        t0, c0 = time.perf_counter(), _cpu_s(jvm)
        ingest.read_partials(spark, paths).write.parquet(str(store / "batch=0"))
        out["store_write_s"] = round(time.perf_counter() - t0, 2)
        cpu["store_write"] = round(_cpu_s(jvm) - c0, 2)
        t0, c0 = time.perf_counter(), _cpu_s(jvm)
        again = follow.refresh(spark, str(store), str(base / "report-from-store"), html=False)
        out["from_store_s"] = round(time.perf_counter() - t0, 2)
        cpu["from_store"] = round(_cpu_s(jvm) - c0, 2)
        out["from_store_timings_s"] = {k: round(v, 2) for k, v in again.timings.items()}
        out["store_mb"] = round(sum(f.stat().st_size for f in store.rglob("*.parquet")) / 1e6, 1)
        print(
            f"partial aggregates into Parquet: {out['store_write_s']}s ({out['store_mb']} MB); every report from it: "
            f"{out['from_store_s']}s = {args.events / out['from_store_s']:,.0f} events/s",
            flush=True,
        )
        read3_s = read_only("read_only_third")
        out["read_only_third_s"] = round(read3_s, 2)
        read2_s = min(read2_s, read3_s)
    read_best = min(read_s, read2_s)
    if "from_store_s" in out:
        out["from_store_ratio"] = round(read_best / float(out["from_store_s"]), 3)  # type: ignore[arg-type]
    out.update(
        read_only_s=round(read_s, 2),
        read_only_again_s=round(read2_s, 2),
        read_only_events_per_s=round(args.events / read_best),
        pipeline_s=round(pipe_s, 2),
        pipeline_events_per_s=round(args.events / pipe_s),
        ratio=round(read_best / pipe_s, 3),
        html_s=round(html_s, 2),
        shuffle_partitions=args.shuffle_partitions,
        pipeline_with_html_events_per_s=round(args.events / (pipe_s + html_s)),
        timings_s={k: round(v, 2) for k, v in result.timings.items()},
        cpu_s=cpu,
        cpu_ratio=round(min(cpu["read_only"], cpu["read_only_again"]) / cpu["pipeline"], 3),
        driver_jvm_peak_rss_mb=_hwm_mb(jvm),
        python_peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        load_avg_1m=os.getloadavg()[0],
        table_rows={k: v.num_rows for k, v in result.tables.items()},
    )
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
