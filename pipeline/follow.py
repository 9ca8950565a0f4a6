"""``kgate report --follow``: Structured Streaming over the audit directory, the report kept fresh.

Spark's file source (``binaryFile``: whole files, as the batch path reads them) lists the input
every ``refresh_s`` seconds and hands each new file to one micro-batch. The checkpoint's offset log
records which files a batch holds *before* the batch runs, and its commit log that the batch
finished; a restart replays an unfinished batch with the same files and never hands a committed
file out again. Each batch's files are parsed and aggregated once, by the roll-up's map side
(:mod:`kgate.pipeline.partials`), and the partial aggregates written to ``CHECKPOINT/rollup/batch=N``
with overwrite, so a replayed batch replaces its own output instead of adding to it: together,
every file is counted exactly once across restarts. After each batch the report is recomputed from
that store (small: aggregates, not lines) and rewritten.

The partial aggregates already apply ``--since``/``--until`` (the window decides which lines count),
so a checkpoint remembers its window and refuses another one: a different window needs a new
checkpoint (the files are then read again).

Only whole files should be followed: the file source reads a file once, when it first sees it.
A directory given as input is therefore followed for its rotated ``*.gz`` files only (the
audit-log filter's active file is still growing); a glob is used as given.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kgate.pipeline import ingest, tables
from kgate.pipeline.ingest import ALL_TIME, InputError, Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("kgate.pipeline.follow")
ROTATED_GLOB = "*.{gz,parquet}"
#: The ``binaryFile`` source's columns (a stream must be given its schema).
BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


def stream_sources(specs: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """``--input`` arguments -> (path, reader options) of the file streams; local mistakes raise InputError."""
    if not specs:
        raise InputError("no --input given")
    out: list[tuple[str, dict[str, str]]] = []
    for spec in specs:
        local = spec.removeprefix("file://")
        if ingest._is_uri(spec):
            out.append((spec, {}))
        elif os.path.isdir(local):
            out.append((os.path.abspath(local), {"pathGlobFilter": ROTATED_GLOB}))
        elif "*" in local or "?" in local or "[" in local:
            parent = local.split("*")[0].split("?")[0].split("[")[0]
            if not os.path.isdir(os.path.dirname(parent) or "."):
                raise InputError(f"{spec}: no such directory")
            out.append((os.path.abspath(local), {}))
        else:
            raise InputError(
                f"{spec}: --follow needs a directory or a glob, not a file that does not grow"
                if os.path.isfile(local)
                else f"{spec}: no such directory"
            )
    return out


def _pin_window(checkpoint: str, window: Window) -> None:
    """Record the window a checkpoint's aggregates were made with; refuse to resume with another."""
    os.makedirs(checkpoint, exist_ok=True)
    path = os.path.join(checkpoint, "window.json")
    mine = {"since_us": window.since_us, "until_us": window.until_us}
    if os.path.exists(path):
        with open(path) as f:
            theirs = json.load(f)
        if theirs != mine:
            raise InputError(
                f"{checkpoint}: this checkpoint was made with --since/--until {theirs} (µs), not {mine}; "
                "resume with the same window or start a new checkpoint"
            )
        return
    with open(path + ".tmp", "w") as f:
        json.dump(mine, f)
    os.replace(path + ".tmp", path)


def start(
    spark: SparkSession,
    specs: Sequence[str],
    out_dir: str,
    checkpoint: str,
    refresh_s: float = 60.0,
    window: Window = ALL_TIME,
    tables_uri: str | None = None,
    html: bool = True,
    on_refresh: Callable[[tables.Result], None] | None = None,
) -> StreamingQuery:
    """Start following ``specs``; returns the running query (``awaitTermination()`` / ``stop()``)."""
    _pin_window(checkpoint, window)
    streams = []
    for path, options in stream_sources(specs):
        reader = spark.readStream.format("binaryFile").schema(BINARY_FILE_SCHEMA)
        for k, v in options.items():
            reader = reader.option(k, v)
        streams.append(reader.load(path).select("path", "content"))
    files = streams[0]
    for other in streams[1:]:
        files = files.unionByName(other)
    store = os.path.join(checkpoint, "rollup")

    def batch(df: DataFrame, batch_id: int) -> None:
        ingest.partials_of(df, window).write.mode("overwrite").parquet(os.path.join(store, f"batch={batch_id}"))
        refresh(spark, store, out_dir, window, tables_uri, html, on_refresh)

    return (
        files.writeStream.foreachBatch(batch)
        .option("checkpointLocation", os.path.join(checkpoint, "stream"))
        .trigger(processingTime=f"{refresh_s} seconds")
        .start()
    )


def refresh(
    spark: SparkSession,
    store: str,
    out_dir: str,
    window: Window = ALL_TIME,
    tables_uri: str | None = None,
    html: bool = True,
    on_refresh: Callable[[tables.Result], None] | None = None,
) -> tables.Result:
    """Recompute every report from the store of partial aggregates and rewrite the outputs."""
    from pyspark.sql import functions as F

    from kgate.pipeline import reports

    partials = spark.read.parquet(store).drop("batch")

    def exact(candidates: DataFrame) -> DataFrame:
        # the exact stale-id pass reads the files again: the ones the store has counted
        files_gid, file_slot = reports.GRAINS.index("files"), reports.SLOTS["files"]["file"]
        rows = partials.where(F.col("gid") == files_gid).select(file_slot).distinct().collect()
        return ingest.exact_uses(spark, sorted(r[0] for r in rows), window)(candidates)

    result = tables.compute(partials, exact)
    result.window = window
    tables.write(result, out_dir, spark, tables_uri)
    if html:
        from kgate.pipeline.html import render

        render(result, out_dir)
    log.info("report refreshed: %d input files", result.problems.num_rows)
    if on_refresh is not None:
        on_refresh(result)
    return result
