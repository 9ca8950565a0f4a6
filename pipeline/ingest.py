"""Read audit files, parse them against the explicit v1 schema, and set bad lines aside.

Every line gets a status: ``ok``, ``malformed`` (not JSON, not an object, or a field of the wrong
type or a required field missing) or ``unknown_schema`` (a ``schema`` number this pipeline does not
know). Only ``ok`` lines feed the reports; the others are counted per file (and a short sample
kept) so a broken writer or a newer kgate shows up in the report instead of failing it. Blank lines
are skipped by the reader.

Files are parsed by Spark's JSON reader against the explicit schema (``_corrupt`` keeps the raw
text of a line that does not fit, for the sample), and the file name comes from the file source's
``_metadata`` column (no extra pass).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgate.codec.error_codes import ErrorCode
from kgate.pipeline.schema import MALFORMED, OK, SCHEMA_VERSION, UNKNOWN_SCHEMA, event_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: File names a directory given as input contributes (the active file and rotated gzip files).
AUDIT_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".gz")
#: Answer codes that mean "this topic id no longer exists" (deleted, maybe recreated under a new id).
GONE_ID_ERRORS = (int(ErrorCode.UNKNOWN_TOPIC_ID), int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
#: How much of a bad line the problems table keeps as a sample.
SAMPLE_CHARS = 200


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
            os.path.join(root, f) for f in sorted(files)
            if f.endswith(AUDIT_SUFFIXES) and not f.startswith((".", "_"))
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
                raise InputError(f"{spec}: no audit files (*.jsonl, *.jsonl.gz) in this directory")
            paths.extend(files)
        elif os.path.isfile(local):
            paths.append(local)
        else:
            raise InputError(f"{spec}: no such file or directory")
    return list(dict.fromkeys(os.path.abspath(p) if not _is_uri(p) else p for p in paths))


@dataclass(frozen=True)
class Window:
    """``--since`` / ``--until`` as microseconds since the epoch (``until`` exclusive); None: open."""

    since_us: int | None = None
    until_us: int | None = None


#: No --since, no --until.
ALL_TIME = Window()


#: The column Spark's JSON reader puts a line into when it does not fit the schema.
CORRUPT = "_corrupt"


def json_options() -> dict[str, str]:
    """Reader options for audit files, batch and streaming alike: bad lines kept, never fatal."""
    return {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def raw_schema() -> StructType:
    """The v1 schema plus the corrupt-record column."""
    from pyspark.sql.types import StringType, StructField

    return event_schema().add(StructField(CORRUPT, StringType()))


def read_events(spark: SparkSession, paths: Iterable[str]) -> DataFrame:
    """The events of ``paths`` against the explicit schema, plus ``_corrupt`` and ``file``.

    Spark's JSON reader rather than text + ``from_json``: it parses straight from the file's bytes
    (no intermediate string per line), about 1.7x faster here, and still hands over the raw text of
    a line that does not fit (``_corrupt``). gzip is decompressed by file name; blank lines are skipped.
    """
    reader = spark.read.schema(raw_schema())
    for k, v in json_options().items():
        reader = reader.option(k, v)
    return with_file(reader.json(list(paths)))


#: Topic ids a text filter can look for as they are: JSON writes these characters unescaped.
_PLAIN_ID = re.compile(r"[A-Za-z0-9._-]+")


def read_lines_naming(spark: SparkSession, paths: Iterable[str], ids: Sequence[str]) -> DataFrame:
    """Like :func:`read_events`, but only (a superset of) the lines that name one of ``ids``.

    For the stale-id report's exact second pass: the lines are read as text and only those holding
    one of the ids (or a ``\\u`` escape, which could spell one) are parsed, so the pass costs about a
    read of the files, not a parse. ``from_json`` with the reader's own options: the same parser. An
    id with a character JSON may escape disables the filter (every line is parsed).
    """
    from pyspark.sql import functions as F

    text = with_file(spark.read.text(list(paths)))
    if ids and all(_PLAIN_ID.fullmatch(i) for i in ids):
        value = F.col("value")
        hit = value.contains("\\u")
        for i in ids:
            hit = hit | value.contains(i)
        text = text.where(hit)
    parsed = F.from_json(F.col("value"), raw_schema(), json_options())
    return text.where(F.length(F.trim(F.col("value"))) > 0).select(parsed.alias("j"), "file").select("j.*", "file")


def with_file(raw: DataFrame) -> DataFrame:
    """Add ``file``, the file's URI (:func:`problems` shortens local ones), from the source's metadata."""
    from pyspark.sql import functions as F

    return raw.select("*", F.col("_metadata.file_path").alias("file"))


def parse(raw: DataFrame) -> DataFrame:
    """Turn :func:`read_events` rows into flat rows: one per (event, topic it names), atomic columns only.

    Flat and atomic: the roll-up (:func:`kgate.pipeline.reports.rollup`) groups them by plain columns,
    and ``--follow`` stores them as Parquet. An event that names no topic (and every bad line) is one
    row with null topic columns; ``first`` marks the one row per line that event-level counts use
    (``topic_pos`` is the topic's index, null without one).
    ``policy`` (rare) stays a JSON string, parsed again only by the policy report. Bad lines keep
    ``status``, ``schema`` and a ``sample`` of the line; the roll-up counts them per file.
    """
    from pyspark.sql import functions as F

    e = F.col
    # A v1 event must have these; the reader leaves a field null when it is missing or of the wrong type
    # (and then also fills _corrupt).
    required_ok = (
        e(CORRUPT).isNull() & e("time_us").isNotNull() & e("instance").isNotNull() & e("api.key").isNotNull()
        & e("api.version").isNotNull() & e("request_bytes").isNotNull()
    )
    status = (
        F.when(e("schema") == SCHEMA_VERSION, F.when(required_ok, F.lit(OK)).otherwise(F.lit(MALFORMED)))
        .when(e("schema").isNotNull(), F.lit(UNKNOWN_SCHEMA))
        .otherwise(F.lit(MALFORMED))
    )
    # Integer arithmetic instead of to_date / date_trunc (time-zone aware, more work per row); the same
    # answers: the session's time zone is UTC (session.py), where days and hours are fixed multiples of µs.
    us = e("time_us")
    day_us, hour_us = 86_400_000_000, 3_600_000_000
    good = F.col("status") == OK
    lined = raw.select(
        "file",
        status.alias("status"),
        e("schema").alias("schema"),
        F.when(status != OK, F.substring(e(CORRUPT), 1, SAMPLE_CHARS)).alias("sample"),
        e("time_us").alias("time_us"),
        F.date_from_unix_date(F.floor(us / day_us).cast("int")).alias("day"),
        F.timestamp_micros(us - F.pmod(us, F.lit(hour_us))).alias("hour"),
        e("instance").alias("instance"),
        e("cluster").alias("cluster"),
        F.xxhash64(e("client.address")).alias("client_address"),  # only counted distinct: a hash is enough
        e("client.id").alias("client_id"),
        e("client.principal").alias("principal"),
        e("api.key").alias("api_key"),
        e("api.name").alias("api_name"),
        e("api.version").alias("api_version"),
        e("error_code").alias("error_code"),
        e("latency_us").alias("latency_us"),
        e("request_bytes").alias("request_bytes"),
        e("response_bytes").alias("response_bytes"),
        F.when(e("policy").isNotNull() & (F.size(e("policy")) > 0), F.to_json(e("policy"))).alias("policy"),
        e("topics").alias("topics"),
    )
    t = F.col("t")
    gone = F.array(*[F.lit(c) for c in GONE_ID_ERRORS])
    codes = t["error_codes"]
    return lined.select(
        "*", F.posexplode_outer(F.when(good, F.col("topics"))).alias("topic_pos", "t")
    ).select(
        *[c for c in lined.columns if c != "topics"],
        "topic_pos",
        F.coalesce(F.col("topic_pos") == 0, F.lit(True)).alias("first"),
        t["id"].alias("topic_id"),
        t["name"].alias("topic_name"),
        t["name_status"].alias("name_status"),
        t["bytes"].alias("topic_bytes"),
        t["records"].alias("topic_records"),
        # array functions, not lambdas: these compile to Java, higher-order functions are interpreted
        F.coalesce(F.size(F.array_remove(codes, 0)) > 0, F.lit(False)).alias("topic_failed"),
        F.coalesce(F.arrays_overlap(codes, gone), F.lit(False)).alias("id_gone"),
    )
