"""The SparkSession ``kgate report`` runs on: tuned for a small local machine, any cluster by URL.

Local mode (the default, ``local[2]``) is sized for the 2-core machines kgate's fleet reports are
usually made on: a few shuffle partitions (Spark's default of 200 would spend more time scheduling
empty tasks than aggregating), a bounded driver heap (local mode runs the executors inside the
driver JVM), UTC as the session time zone (event times are UTC; hours and days must not move with
the machine's zone), Spark's logs at error level, no web UI unless asked for, and
``PYSPARK_PYTHON`` set to the running interpreter so Python workers see the same packages. 16 shuffle
partitions rather than 4: the roll-up's final aggregation holds millions of groups at 10M events (10M
events: 152 s with 4, 109 s with 16, at somewhat different loads); adaptive execution coalesces the small ones.

With ``master`` set to a cluster URL (``spark://``, ``yarn``, ``k8s://``) only the settings that
are safe everywhere are applied; resources come from ``spark-submit`` or the cluster's defaults.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kgate.pipeline.classcache import ClassArchive

DEFAULT_MASTER = "local[2]"
LOG4J2 = Path(__file__).with_name("log4j2.properties")


#: Local input below this many bytes (about 3 million events as gzip JSON lines or Parquet) makes a
#: *small* run: its JVM costs more than its data (measured to 1M events; 10M keeps the full JIT).
SMALL_INPUT_BYTES = 128 << 20
#: Shuffle partitions of a small run: one per core; more only schedule empty tasks.
SMALL_SHUFFLE_PARTITIONS = 2


def is_small(input_bytes: int | None) -> bool:
    """A run whose input (local files, ``input_bytes`` in all; None: unknown, remote) is small."""
    return input_bytes is not None and input_bytes < SMALL_INPUT_BYTES


def local_settings(
    shuffle_partitions: int = 16, driver_memory: str = "2g", ui: bool = False, small: bool = False
) -> dict[str, str]:
    """The settings of a local run (exposed so tests and the benchmark use exactly the same).

    ``small`` (:func:`is_small`): the JIT stops at its first tier and the collector is the serial
    one. A short run spends much of its CPU in the optimizing compiler (C2) and the parallel
    collector's threads; neither pays back within seconds (docs/performance.md, issue 26).
    """
    java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J2}"
    if small:
        # the first JIT tier alone gets the non-tiered JVM's 48 MiB code cache, which Spark's generated
        # classes fill in a long session (a --follow run, the test suite): the JIT then stops and the
        # JVM dies ("Out of space in CodeCache for adapters"); 240 MiB is the tiered default, reserved
        # address space, committed only as used
        java_opts += " -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
        shuffle_partitions = min(shuffle_partitions, SMALL_SHUFFLE_PARTITIONS)
    else:
        java_opts += " -XX:+UseParallelGC"
    return {
        "spark.driver.memory": driver_memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        # Gzip files cannot be split: one task per file. Plain files are split at 64 MiB so both cores work.
        "spark.sql.files.maxPartitionBytes": str(64 << 20),
        "spark.sql.adaptive.enabled": "true",
        # The parsed rows are cached once and scanned by every report. Compressing the cache cost more
        # than parsing the JSON (500k events, 2 cores: fill 13.9 s compressed, 4.9 s not); what does not
        # fit in the heap spills to local disk (MEMORY_AND_DISK).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def common_settings() -> dict[str, str]:
    """Settings every run gets, local or cluster."""
    return {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.parquet.compression.codec": "zstd",
    }


def build_session(
    master: str | None = None,
    *,
    app_name: str = "kgate-report",
    shuffle_partitions: int = 16,
    driver_memory: str | None = None,
    ui: bool = False,
    extra: dict[str, str] | None = None,
    input_bytes: int | None = None,
    class_archive: bool = False,
) -> SparkSession:
    """Start (or join) the SparkSession for a report run.

    ``master=None`` means local mode on two cores. ``driver_memory`` defaults to
    ``KGATE_REPORT_DRIVER_MEMORY`` or 2g: enough for ten million events cached in columnar form,
    small enough for a machine shared with other work. ``input_bytes``: the size of the local input,
    when known; a small one gets the settings of a short run (:func:`local_settings`).
    ``class_archive``: a local driver JVM started here maps (or, the first time, writes) a class-data
    archive (:mod:`kgate.pipeline.classcache`); the caller then calls :func:`finish` after ``stop()``.
    Not when ``extra`` sets ``spark.driver.extraJavaOptions``: the caller's JVM options are used as given.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = common_settings()
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        # Launched by spark-submit: its --master and resource flags decide; only the common settings apply.
        builder = SparkSession.builder.appName(app_name)
        for key, value in {**settings, **(extra or {})}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _size_shuffle(spark, extra or {})
        return spark
    local = master is None or master.startswith("local")
    if local:
        memory = driver_memory or os.environ.get("KGATE_REPORT_DRIVER_MEMORY", "2g")
        settings.update(local_settings(shuffle_partitions, memory, ui, small=is_small(input_bytes)))
    settings.update(extra or {})
    archive = None
    # JVM options given by the caller (--conf) are theirs whole: no archive options added to them
    if local and class_archive and "spark.driver.extraJavaOptions" not in (extra or {}):
        from kgate.pipeline import classcache

        archive = classcache.prepare(settings.get("spark.driver.extraJavaOptions", ""))
        if archive.options:
            settings["spark.driver.extraJavaOptions"] = (
                settings.get("spark.driver.extraJavaOptions", "") + " " + archive.options
            ).strip()
    builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if archive is not None:
        archive.check()
        _archives[id(spark.sparkContext)] = archive
    spark.sparkContext.setLogLevel("ERROR")
    if not local:
        _size_shuffle(spark, extra or {})
    return spark


#: The class archive of each session :func:`build_session` started with one (by SparkContext).
_archives: dict[int, ClassArchive] = {}


def finish(spark: SparkSession) -> None:
    """After ``spark.stop()`` of a session started with ``class_archive``: a run that writes the archive
    waits for its JVM to exit and publishes it (:meth:`kgate.pipeline.classcache.ClassArchive.finish`)."""
    archive = _archives.pop(id(spark.sparkContext), None)
    if archive is not None:
        archive.finish(spark.sparkContext._gateway)


def cluster_shuffle_partitions(cores: int) -> int:
    """Shuffle partitions on a cluster: two per executor core (at least 2), not Spark's fixed 200, which
    on a small cluster schedules mostly empty tasks (adaptive execution coalesces what is too many)."""
    return max(2, 2 * cores)


def _size_shuffle(spark: SparkSession, given: dict[str, str]) -> None:
    """Size ``spark.sql.shuffle.partitions`` from the cluster's cores unless ``--conf``/spark-submit set it."""
    if "spark.sql.shuffle.partitions" in given:
        return
    if spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        return  # spark-submit --conf or the cluster's spark-defaults.conf decided
    _await_executors(spark)
    spark.conf.set("spark.sql.shuffle.partitions", str(cluster_shuffle_partitions(cores(spark))))


def _await_executors(spark: SparkSession, wait_s: float = 30.0) -> None:
    """Wait (up to ``wait_s``) until an executor has registered: executors join after the session
    starts, and until then Spark's default parallelism is 2 whatever the cluster's cores (sized then,
    a 3-core cluster got 4 partitions, one of 100 cores too)."""
    import time

    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    deadline = time.monotonic() + wait_s
    while status().size() <= 1 and time.monotonic() < deadline:  # the driver's own block manager is one
        time.sleep(0.2)


def cores(spark: SparkSession) -> int:
    """The cores tasks run on: N of ``local[N]`` (the machine's for ``local[*]``), else Spark's default
    parallelism (a cluster's executor cores; ``spark.default.parallelism`` when set)."""
    import re

    master = spark.sparkContext.master or ""
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if m:
        n = m.group(1)
        return os.cpu_count() or 1 if n == "*" else int(n or 1)
    return int(spark.sparkContext.defaultParallelism)
