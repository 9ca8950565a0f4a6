"""The roll-up's map side for Parquet audit files, in Spark itself: no Python worker sees an event.

Spark reads the audit log's ``format: parquet`` files with its vectorized Parquet reader against the
explicit schema (:mod:`kgate.pipeline.schema`; a column a file lacks reads as null) and makes every
grain's rows in SQL expressions only (no UDF, no ``mapInArrow``): the whole pass is Spark's generated
code. JSON lines still go through the Python map side (:mod:`kgate.pipeline.partials`: Arrow's JSON
reader and its malformed-line rules), and both hand the same slot columns to
:func:`kgate.pipeline.reports.merge`, so one run may mix the formats.

Each event (and each topic it names) is repeated once per grain (``gid``, an ``explode`` of the constant
grain numbers, which stays in whole-stage generated code) and kept only where the grain counts it:
``files`` every row; ``client``, ``instance`` and ``latency`` every in-report event (status ok,
inside the window); ``topic_hour``, ``charge`` and ``traffic`` every (in-report event, topic) row;
``id_use`` those topic rows that carry an id. Spark aggregates these rows partially in each task
before its shuffle, so what crosses it is per task and grain key, not per event.

One difference from the Python side: the HyperLogLog of client addresses hashes with Spark's
``xxhash64`` here and FNV-1a there, so an address seen in both a JSON and a Parquet file of the same
instance and day may count twice in that estimate (every exact number is the same either way).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import ApiKey
from kgate.pipeline.outcomes import ANY_API, PER_API
from kgate.pipeline.reports import (
    ALL_SLOTS,
    FIRST_ID_VERSION,
    GRAINS,
    HLL_P,
    KEY_TYPES,
    KNOWN_VERSION,
    MEASURES,
    SETS,
    SLOTS,
)
from kgate.pipeline.schema import MALFORMED, OK, SCHEMA_VERSION, UNKNOWN_SCHEMA
from kgate.pipeline.window import ALL_TIME, GONE_ID_ERRORS, Window

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

DAY_US, HOUR_US, MINUTE_US = 86_400_000_000, 3_600_000_000, 60_000_000
#: Which rows a grain counts (see the module docstring).
ROWS: dict[str, str] = {
    "files": "line",
    "topic_hour": "topic",
    "charge": "topic",
    "traffic": "topic",
    "client": "event",
    "instance": "event",
    "latency": "event",
    "id_use": "id_use",
}


def _f() -> Any:
    from pyspark.sql import functions as F

    return F


def spark_schema() -> StructType:
    """The v1 event schema as Spark sees it (from the Arrow one: one definition)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from kgate.pipeline.schema import event_schema

    return from_arrow_schema(event_schema())


def read_events(spark: SparkSession, paths: Sequence[str], skip_missing: bool = False) -> DataFrame | None:
    """Every row of the Parquet audit files ``paths`` as a typed event plus ``file``, ``status``,
    ``schema`` (``line_schema``) and ``sample``: Spark's vectorized Parquet reader against the
    explicit schema (a column a file lacks reads as null). None when ``paths`` is empty.
    ``skip_missing``: a file deleted since it was listed is left out instead of failing the job.
    """
    F = _f()
    if not paths:
        return None
    reader = spark.read.schema(spark_schema())
    # a damaged file keeps the rows read before the damage, never fails the run
    options = {"ignoreCorruptFiles": "true", "ignoreMissingFiles": "true" if skip_missing else "false"}
    for k, v in options.items():
        reader = reader.option(k, v)
    raw = reader.parquet(*paths).select("*", F.col("_metadata.file_path").alias("file"))
    return _with_status(raw)


def _with_status(raw: DataFrame) -> DataFrame:
    """Status as in the contract: schema 1 with every required field -> ok; schema 1 without ->
    malformed; another schema number -> unknown schema; no schema -> malformed. (A Parquet row is
    already typed: there is no line that does not parse, so no sample.)"""
    F = _f()
    e = F.col
    required_ok = (
        e("time_us").isNotNull()
        & e("instance").isNotNull()
        & e("api.key").isNotNull()
        & e("api.version").isNotNull()
        & e("request_bytes").isNotNull()
    )
    version = e("schema")
    status = (
        F.when(version == SCHEMA_VERSION, F.when(required_ok, F.lit(OK)).otherwise(F.lit(MALFORMED)))
        .when(version.isNotNull(), F.lit(UNKNOWN_SCHEMA))
        .otherwise(F.lit(MALFORMED))
    )
    return raw.select(
        "*", status.alias("status"), version.alias("line_schema"), F.lit(None).cast("string").alias("sample")
    )


def _in_report(window: Window) -> Column:
    F = _f()
    e = F.col
    ok = e("status") == OK
    if window.since_us is not None:
        ok = ok & (e("time_us") >= window.since_us)
    if window.until_us is not None:
        ok = ok & (e("time_us") < window.until_us)
    return ok


def _day(us: str) -> Column:
    """Days since the epoch (UTC) of a time in µs: exact integer math (no time zones, no doubles)."""
    return _f().expr(f"({us} - pmod({us}, {DAY_US}L)) div {DAY_US}L")


def _lat_bucket_sql(c: str) -> str:
    """A latency rounded half-up to three significant digits (exact below 1,000 µs), as
    :func:`kgate.pipeline.partials.lat_bucket`."""
    branches = " ".join(f"WHEN {c} < {10**d}L THEN round({c}, {3 - d})" for d in range(4, 19))
    return f"CASE WHEN {c} < 1000 THEN {c} {branches} ELSE {c} END"


def _normal_codes_sql(key: str) -> str:
    """The codes that are the protocol's normal course for api ``key`` (:mod:`kgate.pipeline.outcomes`), an array."""

    def arr(codes: Iterable[int]) -> str:
        return "array(" + ", ".join(str(c) for c in sorted(codes)) + ")"

    branches = " ".join(f"WHEN {key} = {k} THEN {arr(ANY_API | codes)}" for k, codes in PER_API.items())
    return f"CASE {branches} ELSE {arr(ANY_API)} END"


def partials(events: DataFrame, window: Window = ALL_TIME, traffic_us: int = MINUTE_US) -> DataFrame:
    """Every grain's rows of ``events`` (from :func:`read_events`) in the roll-up's slot columns, not yet
    aggregated: :func:`kgate.pipeline.reports.merge` groups them (Spark combines them per task first).
    ``traffic_us``: the traffic grain's time bucket (:func:`traffic_width`; a minute by default).

    Written as SQL text in a few projections: one JVM call per step instead of one per expression node
    (a Column tree of this size took seconds of py4j round trips to build), and each derived value
    computed once per row, before the grains' slots pick from it (Spark keeps a projection whose
    values are used more than once apart instead of inlining it)."""
    F = _f()
    e = F.col
    fetch, produce = int(ApiKey.FETCH), int(ApiKey.PRODUCE)
    in_report = _in_report(window)
    exploded = events.select(
        "file",
        "status",
        "line_schema",
        "sample",
        "time_us",
        "instance",
        "cluster",
        "client",
        "api",
        "error_code",
        "latency_us",
        "request_bytes",
        "response_bytes",
        "policy",
        in_report.alias("in_report"),
        F.posexplode_outer(F.when(in_report, e("topics"))).alias("topic_pos", "t"),
    )
    ok = int(ErrorCode.NONE)
    width = 64 - HLL_P
    step1 = {
        "file": "file",
        "status": "status",
        "line_schema": "line_schema",
        "sample": "sample",
        "time_us": "time_us",
        "instance": "instance",
        "cluster": "cluster",
        "principal": "client.principal",
        "client_id": "client.id",
        "api_key": "api.key",
        "api_name": "api.name",
        "version": "api.version",
        "error_code": "error_code",
        "latency_us": "latency_us",
        "request_bytes": "request_bytes",
        "response_bytes": "response_bytes",
        "policy": "CASE WHEN size(policy) > 0 THEN to_json(policy) END",
        "first": "coalesce(topic_pos = 0, true)",
        "is_event": "coalesce(topic_pos = 0, true) AND in_report",
        "is_topic": "topic_pos IS NOT NULL",
        "topic_name": "t.name",
        "topic_id": "t.id",
        "name_status": "t.name_status",
        "tb": "t.bytes",
        "records": "t.records",
        "fb": "t.failed_bytes",
        "fr": "t.failed_records",
        "normal_codes": _normal_codes_sql("api.key"),
        "codes": "t.error_codes",
        "h": "xxhash64(coalesce(client.address, ''))",
        "day": f"(time_us - pmod(time_us, {DAY_US}L)) div {DAY_US}L",
        "hour": f"time_us - pmod(time_us, {HOUR_US}L)",
        "minute": f"time_us - pmod(time_us, {traffic_us}L)",
        "lat_bucket": _lat_bucket_sql("latency_us"),
    }
    s1 = exploded.selectExpr(*[f"{v} AS {k}" for k, v in step1.items()])
    smear = f"shiftrightunsigned(h, {HLL_P})"
    step2 = {c: c for c in step1 if c not in ("normal_codes", "codes", "h")}
    step2.update(
        {
            "answered_error": f"error_code IS NOT NULL AND error_code <> {ok}",
            "normal": f"error_code IS NOT NULL AND error_code <> {ok} AND array_contains(normal_codes, error_code)",
            "failed": "coalesce(size(array_remove(array_except(codes, normal_codes), 0)) > 0, false)",
            "gone": f"CASE WHEN coalesce(array_contains(codes, {GONE_ID_ERRORS[0]}), false) THEN 1L "
            f"WHEN coalesce(array_contains(codes, {GONE_ID_ERRORS[1]}), false) THEN 2L ELSE 0L END",
            "hll_bucket": f"h & {(1 << HLL_P) - 1}L",
            # what the broker stored of a Produce topic entry: its failed partitions taken out
            # (records unknown where a failed count is: the sum is then marked, never guessed)
            "sb": "tb - coalesce(fb, 0L)",
            "sr": "CASE WHEN fb IS NULL THEN records ELSE records - fr END",
            "x0": smear,
        }
    )
    # the hash's top bits smeared right, then counted: the rank without a float log (exact); each step
    # names the one before it in the same projection (a lateral alias), so the chain is one Dataset to
    # analyse, not 18 (a select, drop and rename per step cost the cold run's driver seconds)
    prev = "x0"
    for shift in (1, 2, 4, 8, 16, 32):
        step2[f"x{shift}"] = f"{prev} | shiftrightunsigned({prev}, {shift})"
        prev = f"x{shift}"
    x = s1.selectExpr(*[f"{v} AS {k}" for k, v in step2.items()])
    # the id-adoption counts: a version past the codec's only where the broker answered it
    # (reports.KNOWN_VERSION)
    fetches = f"(api_key = {fetch} AND (latency_us IS NOT NULL OR version <= {KNOWN_VERSION[ApiKey.FETCH]}))"
    produces = f"(api_key = {produce} AND (latency_us IS NOT NULL OR version <= {KNOWN_VERSION[ApiKey.PRODUCE]}))"
    id_versions = (
        f"({fetches} AND version >= {FIRST_ID_VERSION[ApiKey.FETCH]}) OR "
        f"({produces} AND version >= {FIRST_ID_VERSION[ApiKey.PRODUCE]})"
    )
    no_count = "records IS NULL AND coalesce(tb, 0) > 0"
    values: dict[str, str] = {
        "one": "1L",
        "request_bytes": "request_bytes",
        "response_bytes": "response_bytes",
        "errors": "CAST(answered_error AND NOT normal AS BIGINT)",
        "normal_errors": "CAST(normal AS BIGINT)",
        "time_us": "time_us",
        "fetch_produce": f"CAST({fetches} OR {produces} AS BIGINT)",
        "with_ids": f"CAST({id_versions} AS BIGINT)",
        "fetch_version": f"CASE WHEN {fetches} THEN version END",
        "produce_version": f"CASE WHEN {produces} THEN version END",
        "rho": f"{width + 1}L - bit_count({prev})",
        "answered": "CAST(latency_us IS NOT NULL AS BIGINT)",
        "latency": "latency_us",
        "policy_events": "CAST(policy IS NOT NULL AS BIGINT)",
        "is_produce": f"CAST(api_key = {produce} AS BIGINT)",
        "is_fetch": f"CAST(api_key = {fetch} AS BIGINT)",
        "produced_bytes": f"CASE WHEN api_key = {produce} THEN sb END",
        "consumed_bytes": f"CASE WHEN api_key = {fetch} THEN tb END",
        "produced_records": f"CASE WHEN api_key = {produce} THEN sr END",
        "consumed_records": f"CASE WHEN api_key = {fetch} THEN records END",
        "produced_unknown": f"CAST(api_key = {produce} AND sr IS NULL AND coalesce(sb, 0) > 0 AS BIGINT)",
        "consumed_unknown": f"CAST(api_key = {fetch} AND {no_count} AS BIGINT)",
        "topic_errors": "CAST(failed AS BIGINT)",
        "record_bytes": "tb",
    }
    keys = {k: k for k in KEY_TYPES}
    keys.update({"schema": "line_schema", "id_gone": "gone"})
    rows = {"line": "first", "event": "is_event", "topic": "is_topic", "id_use": "is_topic AND topic_id IS NOT NULL"}

    filled: dict[str, list[tuple[int, str]]] = {s: [] for s in ALL_SLOTS}
    admitted = []
    for i, name in enumerate(GRAINS):
        slots = SLOTS[name]
        for k in SETS[name]:
            filled[slots[k]].append((i, keys[k]))
        for col, _agg, value, _type in MEASURES[name]:
            filled[slots[col]].append((i, values[value]))
        admitted.append(f"WHEN {i} THEN {rows[ROWS[name]]}")
    grains = "explode(array(" + ", ".join(str(i) for i in range(len(GRAINS))) + ")) AS gid"
    expanded = x.selectExpr("*", grains).where(f"CASE gid {' '.join(admitted)} END")

    def slot(s: str) -> str:
        kind = "STRING" if s.startswith("ks") else "BIGINT"
        branches = " ".join(f"WHEN {i} THEN CAST({c} AS {kind})" for i, c in filled[s])
        return f"CASE gid {branches} END AS {s}"

    return expanded.selectExpr("CAST(gid AS INT) AS gid", *[slot(s) for s in ALL_SLOTS])


def uses(events: DataFrame, ids: Sequence[str], window: Window = ALL_TIME) -> DataFrame:
    """The single uses of the topic ids ``ids`` without a gone-id error, in the window: the stale-id
    report's exact second pass (the columns of :data:`kgate.pipeline.partials.USES_SCHEMA`)."""
    F = _f()
    e = F.col
    t = events.where(_in_report(window)).select("*", F.explode("topics").alias("t"))
    codes = e("t.error_codes")
    gone = F.coalesce(F.arrays_overlap(codes, F.array(*[F.lit(c) for c in GONE_ID_ERRORS])), F.lit(False))
    return t.where(e("t.id").isin(*ids) & ~gone).select(
        _day("time_us").alias("day"),
        e("cluster"),
        e("t.name").alias("topic_name"),
        e("t.id").alias("topic_id"),
        e("t.name_status").alias("name_status"),
        e("client.principal").alias("principal"),
        e("client.id").alias("client_id"),
        e("instance"),
        e("time_us"),
    )


def unreadable_parquet(paths: Iterable[str]) -> dict[str, str]:
    """Local ``*.parquet`` inputs Spark could not read with the event schema, each with why: not Parquet,
    or a column of another type. Read from their footers only (cheap); Spark would fail the whole job
    on one of these, so they are left out of the read and counted as one malformed line each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kgate.pipeline.schema import event_schema

    want = event_schema()
    bad: dict[str, str] = {}
    for p in paths:
        if not p.endswith(".parquet") or "://" in p or not os.path.isfile(p) or os.path.getsize(p) == 0:
            continue
        try:
            have = pq.read_schema(p)
        except (OSError, pa.ArrowException) as exc:
            bad[p] = f"<not a readable Parquet audit file: {exc}>"
            continue
        for field in have:
            if field.name in want.names and not _fits(field.type, want.field(field.name).type):
                bad[p] = f"<not a readable Parquet audit file: column {field.name} is {field.type}>"
                break
    return bad


def _fits(have: pa.DataType, want: pa.DataType) -> bool:
    """A Parquet column of type ``have`` reads as ``want`` (structs field by field: a missing field is null)."""
    import pyarrow as pa

    if pa.types.is_struct(want):
        if not pa.types.is_struct(have):
            return False
        wanted = {want.field(i).name: want.field(i).type for i in range(want.num_fields)}
        return all(
            _fits(have.field(i).type, wanted[have.field(i).name])
            for i in range(have.num_fields)
            if have.field(i).name in wanted
        )
    if pa.types.is_list(want) or pa.types.is_large_list(want):
        return (pa.types.is_list(have) or pa.types.is_large_list(have)) and _fits(have.value_type, want.value_type)
    if pa.types.is_string(want):
        return pa.types.is_string(have) or pa.types.is_large_string(have)
    return bool(have == want)


def traffic_width(paths: Sequence[str], window: Window = ALL_TIME) -> int:
    """The traffic grain's bucket (µs) for local Parquet files ``paths``: the chart's width
    (:func:`kgate.pipeline.charts.bucket_width`) for the span of their ``time_us``, read from the
    footers' row-group statistics before the pass (and clipped to the window), so the grain is no
    finer than the chart draws (a minute grain made ~40% of the roll-up's rows at 1M events over a
    day). A minute when a file is remote or has no statistics."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kgate.pipeline.charts import bucket_width

    low: int | None = None
    high: int | None = None
    for p in paths:
        if "://" in p:
            return MINUTE_US
        try:
            meta = pq.read_metadata(p)
            col = meta.schema.names.index("time_us")
        except (OSError, ValueError, pa.ArrowException):  # an unreadable file is counted elsewhere
            return MINUTE_US
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            if meta.row_group(g).num_rows == 0:
                continue
            if stats is None or not stats.has_min_max:
                return MINUTE_US
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
    if low is None or high is None:
        return MINUTE_US
    if window.since_us is not None:
        low = max(low, window.since_us)
    if window.until_us is not None:
        high = min(high, window.until_us)
    return bucket_width(max(0, int(high) - int(low))) * 1_000_000
