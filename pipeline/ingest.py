"""Which files a run reads, and the Spark side of reading them: whole files to the roll-up's map side.

Every line gets a status: ``ok``, ``malformed`` (not JSON, not an object, or a field of the wrong
type or a required field missing) or ``unknown_schema`` (a ``schema`` number this pipeline does not
know). Only ``ok`` lines feed the reports; the others are counted per file (and a short sample
kept) so a broken writer or a newer kgate shows up in the report instead of failing it. Blank lines
are skipped.

Spark reads the files whole (its ``binaryFile`` source: any Hadoop file system, and the file's URI
comes with it) and its Python workers parse and aggregate them (:mod:`kgate.pipeline.partials`,
:mod:`kgate.pipeline.decode`); Parquet audit files Spark reads natively (:mod:`kgate.pipeline.rollup`)
in batch runs; this module wires that up for batch runs, ``--follow`` and the
stale-id report's exact second pass.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from kgate.pipeline.window import ALL_TIME, Window

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: File names a directory given as input contributes (the active file and rotated gzip files).
AUDIT_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".gz", ".parquet")


class InputError(ValueError):
    """An input path the user named does not exist or holds no audit files (exit status 2)."""


def _is_uri(path: str) -> bool:
    """``s3a://b/x``, ``hdfs://nn/x``: paths only Spark can list; passed through unchecked."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme != "file" and scheme.isidentifier()


def _audit_files(directory: str) -> list[str]:
    found: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found.extend(
            os.path.join(root, f) for f in sorted(files) if f.endswith(AUDIT_SUFFIXES) and not f.startswith((".", "_"))
        )
    return found


def resolve_inputs(specs: Sequence[str]) -> list[str]:
    """Expand the ``--input`` arguments of a batch run into the files to read.

    A local directory contributes its audit files (recursively, hidden and ``_`` names skipped), a
    glob its matches, a file itself. A local path that does not exist, a glob with no match and a
    directory without audit files are user mistakes: :class:`InputError` names the path. Remote
    URIs (HDFS, S3, ...) are left for Spark to list.
    """
    if not specs:
        raise InputError("no --input given")
    paths: list[str] = []
    for spec in specs:
        if _is_uri(spec):
            paths.append(spec)
            continue
        local = spec.removeprefix("file://")
        if glob.has_magic(local):
            matches = sorted(glob.glob(local, recursive=True))
            files = [m for m in matches if os.path.isfile(m)]
            for d in (m for m in matches if os.path.isdir(m)):
                files.extend(_audit_files(d))
            if not files:
                raise InputError(f"{spec}: no file matches")
            paths.extend(files)
        elif os.path.isdir(local):
            files = _audit_files(local)
            if not files:
                raise InputError(f"{spec}: no audit files (*.jsonl, *.jsonl.gz, *.parquet) in this directory")
            paths.extend(files)
        elif os.path.isfile(local):
            paths.append(local)
        else:
            raise InputError(f"{spec}: no such file or directory")
    return list(dict.fromkeys(os.path.abspath(p) if not _is_uri(p) else p for p in paths))


def read_files(spark: SparkSession, paths: Iterable[str], skip_missing: bool = False) -> DataFrame:
    """``path`` and ``content`` of every file, whole: Spark's ``binaryFile`` source, which reads through
    Hadoop's file systems (local, HDFS, S3, ...) and does not decompress (the workers do).
    ``skip_missing``: a file deleted since it was listed is left out instead of failing the job."""
    reader = spark.read.format("binaryFile")
    if skip_missing:
        reader = reader.option("ignoreMissingFiles", "true")
    return reader.load(list(paths)).select("path", "content")


def read_partials(spark: SparkSession, paths: Iterable[str], window: Window = ALL_TIME) -> DataFrame:
    """The map side of the roll-up over ``paths``: every grain's rows, in the roll-up's slot columns.

    Parquet audit files are read by Spark itself (:mod:`kgate.pipeline.rollup`: its Parquet reader and
    SQL expressions, no Python worker); Parquet files whose footer says they cannot be read with the
    schema are left out (:func:`kgate.pipeline.rollup.unreadable_parquet`; :func:`kgate.pipeline.tables.build`
    counts each as one malformed line). JSON lines go to the Python map side (:func:`partials_of`), as
    many tasks as cores (:func:`kgate.pipeline.session.cores`), each taking its share of the files: a
    task's partials are as many rows as the distinct keys of *its* files, so fewer, larger tasks hand
    the merge fewer rows (10M events on 2 cores: 11 tasks of ~3 files made 5.3M partial rows).
    """
    from kgate.pipeline import rollup
    from kgate.pipeline.decode import is_parquet
    from kgate.pipeline.session import cores

    files = list(paths)
    unreadable = rollup.unreadable_parquet(files)
    native = [p for p in files if is_parquet(p) and p not in unreadable]
    lines = [p for p in files if not is_parquet(p)]
    parts: list[DataFrame] = []
    events = rollup.read_events(spark, native)
    if events is not None:
        # the traffic grain as wide as the chart's buckets, when no JSON file (a minute grain) joins it
        width = rollup.MINUTE_US if lines else rollup.traffic_width(native, window)
        parts.append(rollup.partials(events, window, width))
    if lines:
        raw = read_files(spark, lines)
        parts.append(partials_of(raw.coalesce(max(1, min(cores(spark), raw.rdd.getNumPartitions()))), window))
    if not parts:
        from kgate.pipeline import partials

        return spark.createDataFrame([], _spark_schema(partials.output_schema()))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def partials_of(files: DataFrame, window: Window = ALL_TIME) -> DataFrame:
    """``files`` (``path``, ``content``: batch or streaming) to partial aggregates, in Spark's Python workers."""
    from functools import partial

    from kgate.pipeline import partials

    schema = _spark_schema(partials.output_schema())
    return files.mapInArrow(partial(partials.run_task, window=window), schema)


def exact_uses(
    spark: SparkSession,
    paths: Iterable[str],
    window: Window = ALL_TIME,
) -> Callable[[DataFrame], DataFrame]:
    """The stale-id report's exact second pass over ``paths``: candidates -> their late single uses.

    Parquet files are read again by Spark (:func:`kgate.pipeline.rollup.uses`: only the columns the
    pass needs); of JSON lines only blocks that hold one of the candidates' ids (or a ``\\u`` escape,
    which could spell one) are parsed. It runs only when some use group straddles a recreation
    (:func:`kgate.pipeline.reports.stale_ids`), usually never.
    """
    from functools import partial

    from kgate.pipeline import partials, reports, rollup
    from kgate.pipeline.decode import is_parquet

    files = list(paths)

    def exact(candidates: DataFrame) -> DataFrame:
        ids = sorted({r["topic_id"] for r in candidates.select("topic_id").distinct().collect()})
        unreadable = rollup.unreadable_parquet(files)
        native = [p for p in files if is_parquet(p) and p not in unreadable]
        lines = [p for p in files if not is_parquet(p)]
        # a file deleted since it was counted (``--follow``: retention) is skipped, not fatal; its
        # single uses are then missing from the exact count
        events = rollup.read_events(spark, native, skip_missing=True)
        found = None if events is None else rollup.uses(events, ids, window)
        if lines:
            task = partial(partials.run_task, window=window, uses_of=ids)
            more = read_files(spark, lines, skip_missing=True).mapInArrow(task, _spark_schema(partials.USES_SCHEMA))
            found = more if found is None else found.unionByName(more)
        if found is None:
            found = spark.createDataFrame([], _spark_schema(partials.USES_SCHEMA))
        return reports.late_uses(found, candidates)

    return exact


def _spark_schema(schema: pa.Schema) -> StructType:
    """The Spark twin of an Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
