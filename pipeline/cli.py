"""``kgate report``: the fleet report from audit-log files (docs/pipeline.md).

Dispatched from ``kgate.proxy.runtime.cli`` before its own parser runs, so ``kgate run`` never imports
this module, let alone Spark. Here too PySpark is imported only once the arguments are known to
be good: a typo gets its answer without a JVM starting. User mistakes (a missing input, a bad
time, --since after --until) exit 2 with the path or value named; a missing PySpark or Java
exits 1 with what to install.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from kgate.pipeline import trace
from kgate.pipeline.ingest import InputError, Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kgate.pipeline.html import ChartPainter

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
log = logging.getLogger("kgate.pipeline")


class UsageError(ValueError):
    """A mistake in the arguments: printed as ``kgate report: error: ...``, exit status 2."""


def parse_time(value: str) -> int:
    """``--since`` / ``--until``: ISO 8601 (``2025-11-24``, ``2025-11-24T16:00:00Z``; UTC when no zone)
    or seconds since the epoch; returns microseconds since the epoch."""
    text = value.strip()
    try:
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return int(float(text) * 1_000_000)
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"not a time: {value!r} (use ISO 8601 like 2025-11-24T16:00:00Z, or epoch seconds)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1_000_000)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kgate report",
        description="Fleet report from kgate audit-log files (plain and .gz JSONL) on Spark: tables as "
        "Parquet (by day) and CSV, and DIR/index.html with charts. See docs/pipeline.md.",
    )
    p.add_argument(
        "--input",
        nargs="+",
        action="extend",
        required=True,
        metavar="PATH_OR_GLOB",
        help="audit files, directories or globs (local, hdfs://, s3a://...); repeatable",
    )
    p.add_argument("--output", required=True, metavar="DIR", help="where index.html, csv/ and parquet/ go")
    p.add_argument(
        "--master", metavar="URL", help="Spark master (spark://host:7077, yarn, k8s://...); default local[2]"
    )
    p.add_argument("--since", metavar="T", help="only events at or after T (ISO 8601 or epoch seconds)")
    p.add_argument("--until", metavar="T", help="only events before T")
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep running: ingest new (rotated, *.gz) files as they appear, exactly once",
    )
    p.add_argument(
        "--refresh-s",
        type=float,
        default=60.0,
        metavar="N",
        help="--follow: look for new files and refresh the report every N seconds (default 60)",
    )
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="--follow: checkpoint directory (default DIR/_checkpoint); keep it to resume",
    )
    p.add_argument(
        "--tables", metavar="URI", help="write the Parquet tables here (any Hadoop path) instead of DIR/parquet"
    )
    p.add_argument("--driver-memory", metavar="SIZE", help="local mode: driver heap (default 2g)")
    p.add_argument("--no-html", action="store_true", help="tables only, no index.html and charts")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), applied over kgate's defaults, e.g. --conf spark.sql.shuffle.partitions=64",
    )
    return p


def _release_version(java: str) -> str | None:
    """``JAVA_VERSION`` from the ``release`` file of the JDK/JRE holding ``java`` (every OpenJDK build
    has one), or None: read instead of starting a JVM for ``java -version`` (a fraction of a second of
    every cold run)."""
    home = os.path.dirname(os.path.dirname(os.path.realpath(java)))
    try:
        with open(os.path.join(home, "release"), encoding="utf-8", errors="replace") as f:
            m = re.search(r'^JAVA_VERSION="([^"]+)"', f.read(), re.MULTILINE)
    except OSError:
        return None
    return m.group(1) if m else None


def _java_problem() -> str | None:
    """Why local Spark cannot start here, or None. PySpark 4 needs Java 17+."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if not java or not os.path.exists(java):
        return "Java was not found; PySpark 4 needs Java 17+ (Debian: apt-get install openjdk-17-jre-headless)"
    release = _release_version(java)
    out = (
        f'version "{release}"' if release else subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    )
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m:
        major = int(m.group(2)) if m.group(1) == "1" and m.group(2) else int(m.group(1))
        if major < 17:
            return f"Java {major} found ({java}); PySpark 4 needs Java 17+ (apt-get install openjdk-17-jre-headless)"
    return None


def _spark_problem(master: str | None) -> str | None:
    """Why the run cannot start Spark here (no PySpark; local mode without Java 17+), or None."""
    try:
        import pyspark  # noqa: F401
    except ModuleNotFoundError:
        return "PySpark is not installed (pip install 'kgate-proxy[pipeline]')"
    if master is None or master.startswith("local"):
        return _java_problem()
    return None


def _window(args: argparse.Namespace) -> Window:
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    if since is not None and until is not None and since >= until:
        raise UsageError(f"--since {args.since} is not before --until {args.until}")
    return Window(since, until)


def parse_conf(items: Sequence[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` arguments as a dict; a missing ``=`` or key is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf {item!r}: expected KEY=VALUE (e.g. spark.sql.shuffle.partitions=64)")
        out[key.strip()] = value
    return out


def _not_interrupt_noise(record: logging.LogRecord) -> bool:
    """A root-logger filter: drops py4j's "KeyboardInterrupt while sending command." (Ctrl-C on ``--follow``)."""
    return not str(record.msg).startswith("KeyboardInterrupt while sending command")


def _quiet_stop(query: object) -> None:
    """Ctrl-C on ``--follow``: stop without the tracebacks of every thread the interrupt reached.

    The terminal sends SIGINT to the whole process group, the JVM included, so py4j's calls fail
    in the main thread, in the stream's callback thread and in ``spark.stop()`` at once: those are
    expected here, not news. Their loggers and the threads' exception hook are silenced, and the
    stop is best effort (the checkpoint makes the next run resume exactly where this one was).
    """
    import threading

    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver", "pyspark"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    threading.excepthook = lambda _args: None
    try:
        query.stop()  # type: ignore[attr-defined]
    except BaseException:  # the JVM may already be gone (it got the SIGINT too)
        pass


def _local_bytes(paths: Sequence[str]) -> int | None:
    """The size of a batch run's input files, or None when any is remote (or for ``--follow``)."""
    from kgate.pipeline.ingest import _is_uri

    if not paths or any(_is_uri(p) for p in paths):
        return None
    try:
        return sum(os.path.getsize(p) for p in paths)
    except OSError:  # deleted since it was listed: Spark will say so
        return None


def run(args: argparse.Namespace) -> int:
    trace.mark("arguments parsed")
    window = _window(args)
    conf = parse_conf(args.conf)
    if args.refresh_s <= 0:
        raise UsageError("--refresh-s must be positive")
    if args.follow:
        from kgate.pipeline.follow import stream_sources

        stream_sources(args.input)  # InputError before Spark starts
        paths: list[str] = []
    else:
        from kgate.pipeline.ingest import resolve_inputs

        paths = resolve_inputs(args.input)
    try:
        os.makedirs(args.output, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output {args.output}: {exc.strerror}") from None
    problem = _spark_problem(args.master)
    if problem:
        print(f"kgate report: error: {problem}", file=sys.stderr)
        return EXIT_FAILED
    trace.mark("inputs listed, Java checked")

    from pyspark import SparkContext

    from kgate.pipeline.session import build_session

    painter = None
    if not args.follow and not args.no_html:
        from kgate.pipeline.html import ChartPainter

        painter = ChartPainter(args.output)  # imports matplotlib on its thread while the JVM starts
    # Embedded (tests, notebooks): leave the caller's session running. Asked of the process, not the
    # thread: SparkSession.getActiveSession() is per thread, so a report run from a worker thread
    # took the caller's session for its own and stopped it, failing every Spark test after it.
    owned = SparkContext._active_spark_context is None
    try:
        spark = build_session(
            args.master,
            driver_memory=args.driver_memory,
            extra=conf,
            input_bytes=_local_bytes(paths),
            class_archive=owned and not args.follow,  # a stream's JVM ends by Ctrl-C, not a clean exit
        )
    except BaseException:
        if painter is not None:
            painter.close()
        raise
    trace.mark("SparkSession started")
    stopper: _Stopper | None = None
    try:
        if args.follow:
            return _follow(spark, args, window)
        # an owned session ends as soon as the tables are in memory (unless Spark writes them, --tables):
        # its stop overlaps writing them and the page
        stopper = _Stopper(spark) if owned and args.tables is None else None
        return _batch(spark, args, paths, window, painter, stopper)
    finally:
        if painter is not None:  # a failed run stops drawing (a finished one has shut the painter down)
            painter.close()
        if owned:
            try:
                stopper.join() if stopper is not None else spark.stop()
            except BaseException:  # after Ctrl-C the JVM may be gone already
                if not args.follow:
                    raise
            else:
                trace.mark("SparkSession stopped")
                from kgate.pipeline.session import finish

                finish(spark)
                trace.mark("finished")


def _follow(spark: SparkSession, args: argparse.Namespace, window: Window) -> int:
    """``--follow``: start the stream and wait for Ctrl-C (or its failure)."""
    from kgate.pipeline.follow import start

    checkpoint = args.checkpoint or os.path.join(args.output, "_checkpoint")
    html = not args.no_html
    query = start(spark, args.input, args.output, checkpoint, args.refresh_s, window, args.tables, html=html)
    print(
        f"kgate report: following {', '.join(args.input)}; report in {args.output} "
        f"every {args.refresh_s:g}s (Ctrl-C stops; checkpoint {checkpoint})",
        file=sys.stderr,
    )
    # PySpark's SIGINT handler calls into the JVM (cancelAllJobs) while the main thread waits in
    # a JVM call, and both fail with tracebacks: Python's own handler raises KeyboardInterrupt,
    # and the wait is a sleep between short status calls, where the interrupt lands cleanly
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # py4j logs an interrupt that lands inside one of its calls on the root logger, with a
    # traceback, before re-raising it (a busy machine makes the status calls slow enough)
    logging.getLogger().addFilter(_not_interrupt_noise)
    try:
        while query.isActive:
            time.sleep(0.5)
        query.awaitTermination()  # ended by itself: raises the stream's failure, if any
    except KeyboardInterrupt:
        _quiet_stop(query)
        print("kgate report: stopped", file=sys.stderr)
    return EXIT_OK


class _Stopper:
    """``spark.stop()`` on a thread once :meth:`start` is called; :meth:`join` waits for it and raises
    what it raised (or, never started, stops the session itself)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._stopped: Future[None] | None = None

    def start(self) -> None:
        pool = ThreadPoolExecutor(1, thread_name_prefix="spark-stop")
        self._stopped = pool.submit(self._spark.stop)
        pool.shutdown(wait=False)  # its one thread ends with the stop

    def join(self) -> None:
        if self._stopped is None:  # the run failed before its tables: stop here
            self._spark.stop()
        else:
            self._stopped.result()


def _batch(
    spark: SparkSession,
    args: argparse.Namespace,
    paths: list[str],
    window: Window,
    painter: ChartPainter | None,
    stopper: _Stopper | None = None,
) -> int:
    """A batch run: every table, written, and the page (its charts drawn by ``painter`` meanwhile);
    ``stopper`` is started once the tables are in memory."""
    from kgate.pipeline import tables

    t0 = time.perf_counter()
    result = tables.build(spark, paths, window, on_table=None if painter is None else painter.add)
    trace.mark("tables computed")
    if stopper is not None:
        stopper.start()
    tables.write(result, args.output, spark, args.tables)
    trace.mark("tables written")
    page = None
    if painter is not None:
        from kgate.pipeline.html import render

        page = render(result, args.output, painter=painter)
        trace.mark("page rendered")
    prob = result.problems.to_pylist()
    bad = sum(r["malformed"] + r["unknown_schema"] for r in prob)
    good = sum(r["ok"] for r in prob)
    # the events the report counts: those inside --since/--until (every good line without a window)
    counted = sum(r["requests"] for r in result.tables["instances"].to_pylist())
    outside = f" ({good - counted:,} good lines outside --since/--until)" if good != counted else ""
    print(
        f"kgate report: {counted:,} events{outside} from {len(prob)} file(s) in "
        f"{time.perf_counter() - t0:.1f}s; {bad:,} bad lines skipped; "
        f"{page or os.path.join(args.output, 'csv')}",
        file=sys.stderr,
    )
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``kgate report ARGS``; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: 2 on errors, 0 for --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        return run(args)
    except (InputError, UsageError) as exc:
        print(f"kgate report: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # python -m kgate.pipeline.cli; for spark-submit use a launcher (docs/pipeline.md)
    sys.exit(main())
