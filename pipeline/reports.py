"""The report tables, each a Spark aggregation over the good events (see :mod:`kgate.pipeline.ingest`).

Every table has a ``day`` column (UTC), so each can be written as Parquet partitioned by day and a
fleet can keep months of them; the HTML page sums over the days of the run's window.

Byte columns, two kinds, both from docs/audit-log.md:

* ``bytes_in`` / ``bytes_out`` on per-topic tables are *record* bytes (``topics[].bytes``): what
  a Produce request carried into a topic and what a Fetch answer carried out of it. Those are the
  bytes a chargeback is about; other api keys carry none.
* ``request_bytes`` / ``response_bytes`` on per-instance and per-client tables are *frame* bytes on
  the wire, every api key included: the load a client puts on kgate.

Stale topic ids (the doc's last rule): kgate keeps the cached name of an id the broker no longer
knows and the answer carries error 100 (UNKNOWN_TOPIC_ID) or 3 (UNKNOWN_TOPIC_OR_PARTITION). A use
of a topic id is *stale* when it got one of those errors, or when its topic name has since been
seen with a newer id (the id first seen latest) and the use came after that newer id's first
appearance. Event order in files does not matter: everything is ordered by ``time_us``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kgate.codec.generated.api_keys import ApiKey
from kgate.pipeline.schema import policy_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Fetch and Produce carry topic ids from these versions on (KIP-516).
FIRST_ID_VERSION: dict[ApiKey, int] = {ApiKey.FETCH: 13, ApiKey.PRODUCE: 13}
RESOLVED_STATUSES = ("given", "resolved")
PERCENTILES = (0.5, 0.95, 0.99)


def _f() -> Any:
    """pyspark.sql.functions, imported when a report is built (importing this module needs no Spark)."""
    from pyspark.sql import functions as F

    return F


def _failed() -> Column:
    """The exchange's answer carried an error (null: no answer, not counted as an error)."""
    F = _f()
    return F.coalesce(F.col("error_code") != 0, F.lit(False))


def _topics(ev: DataFrame) -> DataFrame:
    """One row per (event, topic it names): the flat rows that carry a topic."""
    F = _f()
    return ev.where(F.col("topic_pos").isNotNull())


def _events(ev: DataFrame) -> DataFrame:
    """One row per event, for event-level counts (the flat rows hold one row per topic)."""
    F = _f()
    return ev.where(F.col("first"))


def _record_bytes(api: ApiKey, column: str) -> Column:
    F = _f()
    return F.sum(F.when(F.col("api_key") == int(api), F.col(column)))


def topic_hourly(ev: DataFrame) -> DataFrame:
    """Per topic (name and id) per hour: requests, record bytes in/out, records, errors."""
    F = _f()
    return (
        _topics(ev)
        .groupBy("day", "hour", "cluster", "topic_name", "topic_id")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.coalesce(_record_bytes(ApiKey.PRODUCE, "topic_bytes"), F.lit(0)).alias("bytes_in"),
            F.coalesce(_record_bytes(ApiKey.FETCH, "topic_bytes"), F.lit(0)).alias("bytes_out"),
            F.coalesce(F.sum("topic_records"), F.lit(0)).alias("records"),
            F.sum(F.col("topic_failed").cast("long")).alias("errors"),
        )
    )


def chargeback(ev: DataFrame) -> DataFrame:
    """Record bytes in/out per principal and client id per topic name (ids change, names are billed)."""
    F = _f()
    return (
        _topics(ev)
        .groupBy("day", "cluster", "principal", "client_id", "topic_name")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.coalesce(_record_bytes(ApiKey.PRODUCE, "topic_bytes"), F.lit(0)).alias("bytes_in"),
            F.coalesce(_record_bytes(ApiKey.FETCH, "topic_bytes"), F.lit(0)).alias("bytes_out"),
            F.coalesce(F.sum("topic_records"), F.lit(0)).alias("records"),
        )
    )


def clients(ev: DataFrame) -> DataFrame:
    """Per principal and client id: requests, frame bytes, errors (every api key, topics or not)."""
    F = _f()
    return (
        _events(ev).groupBy("day", "principal", "client_id")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum("request_bytes").alias("request_bytes"),
            F.coalesce(F.sum("response_bytes"), F.lit(0)).alias("response_bytes"),
            F.sum(_failed().cast("long")).alias("errors"),
            F.approx_count_distinct("instance").alias("instances"),
        )
    )


def instances(ev: DataFrame) -> DataFrame:
    """Per kgate instance: the load it carried (is the fleet balanced?)."""
    F = _f()
    return (
        _events(ev).groupBy("day", "instance")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum("request_bytes").alias("request_bytes"),
            F.coalesce(F.sum("response_bytes"), F.lit(0)).alias("response_bytes"),
            F.sum(_failed().cast("long")).alias("errors"),
            F.approx_count_distinct("client_address").alias("client_addresses"),
            F.approx_count_distinct("client_id").alias("client_ids"),
            F.timestamp_micros(F.min("time_us")).alias("first_seen"),
            F.timestamp_micros(F.max("time_us")).alias("last_seen"),
        )
    )


def _latency(ev: DataFrame, keys: list[str]) -> DataFrame:
    F = _f()
    pct = F.percentile_approx("latency_us", list(PERCENTILES), 10_000)
    return (
        _events(ev).where(F.col("latency_us").isNotNull())
        .groupBy(*keys)
        .agg(F.count(F.lit(1)).alias("answered"), pct.alias("p"), F.max("latency_us").alias("max_us"),
             F.avg("latency_us").alias("mean_us"))
        .select(*keys, "answered", F.col("p")[0].alias("p50_us"), F.col("p")[1].alias("p95_us"),
                F.col("p")[2].alias("p99_us"), "max_us", "mean_us")
    )


def latency_api(ev: DataFrame, per_day: bool = True) -> DataFrame:
    """Latency p50/p95/p99 (µs) per api key, answered exchanges only."""
    return _latency(ev, ["day", "api_key", "api_name"] if per_day else ["api_key", "api_name"])


def latency_instance(ev: DataFrame, per_day: bool = True) -> DataFrame:
    """Latency p50/p95/p99 (µs) per kgate instance, answered exchanges only."""
    return _latency(ev, ["day", "instance"] if per_day else ["instance"])


def api_errors(ev: DataFrame) -> DataFrame:
    """Per api key and answer error code: exchanges (code 0 included, so rates can be computed)."""
    F = _f()
    return (
        _events(ev).groupBy("day", "api_key", "api_name", "error_code")
        .agg(F.count(F.lit(1)).alias("requests"))
    )


def _id_uses(ev: DataFrame) -> DataFrame:
    F = _f()
    return _topics(ev).where(F.col("topic_id").isNotNull())


def unresolved_ids(ev: DataFrame) -> DataFrame:
    """Topic ids that never resolved to a name anywhere in the input, with who sent them."""
    F = _f()
    uses = _id_uses(ev)
    resolved = uses.where(F.col("topic_name").isNotNull() & F.col("name_status").isin(*RESOLVED_STATUSES))
    never = uses.join(resolved.select("cluster", "topic_id").distinct(), ["cluster", "topic_id"], "left_anti")
    return (
        never.groupBy("day", "cluster", "topic_id")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.array_join(F.array_sort(F.collect_set("name_status")), ",").alias("statuses"),
            F.array_join(F.array_sort(F.collect_set(F.coalesce("client_id", F.lit("")))), ",").alias("client_ids"),
            F.timestamp_micros(F.min("time_us")).alias("first_seen"),
            F.timestamp_micros(F.max("time_us")).alias("last_seen"),
        )
    )


def _id_history(uses: DataFrame) -> DataFrame:
    """Per (cluster, topic name, id): first/last use, first gone-id error, and the newest id of the name."""
    from pyspark.sql import Window

    F = _f()
    named = uses.where(F.col("topic_name").isNotNull())
    per_id = named.groupBy("cluster", "topic_name", "topic_id").agg(
        F.min("time_us").alias("first_us"),
        F.max("time_us").alias("last_us"),
        F.count(F.lit(1)).alias("requests"),
        F.min(F.when(F.col("id_gone"), F.col("time_us"))).alias("first_gone_us"),
    )
    by_name = Window.partitionBy("cluster", "topic_name")
    newest = F.max_by("topic_id", "first_us").over(by_name)
    newest_first = F.max("first_us").over(by_name)
    return per_id.select(
        "*",
        F.when(newest != F.col("topic_id"), newest).alias("newer_id"),
        F.when(newest != F.col("topic_id"), newest_first).alias("newer_first_us"),
    )


def topic_id_history(ev: DataFrame) -> DataFrame:
    """Every (topic name, id) pair seen: when, how much, whether deleted, and which id replaced it."""
    F = _f()
    h = _id_history(_id_uses(ev))
    return h.select(
        F.to_date(F.timestamp_micros("first_us")).alias("day"),
        "cluster", "topic_name", "topic_id", "requests",
        F.timestamp_micros("first_us").alias("first_seen"),
        F.timestamp_micros("last_us").alias("last_seen"),
        F.timestamp_micros("first_gone_us").alias("first_unknown_id_error"),
        F.col("newer_id").alias("replaced_by"),
        F.timestamp_micros("newer_first_us").alias("replaced_at"),
    )


def stale_ids(ev: DataFrame) -> DataFrame:
    """Clients still using the id of a deleted (and maybe recreated) topic: who, which id, how often."""
    F = _f()
    uses = _id_uses(ev)
    h = _id_history(uses).select("cluster", "topic_name", "topic_id", "newer_id", "newer_first_us")
    joined = uses.where(F.col("topic_name").isNotNull()).join(h, ["cluster", "topic_name", "topic_id"])
    superseded = F.col("newer_first_us").isNotNull() & (F.col("time_us") >= F.col("newer_first_us"))
    stale = joined.where(F.col("id_gone") | superseded)
    return (
        stale.groupBy("day", "cluster", "topic_name", "topic_id", "principal", "client_id")
        .agg(
            F.first("newer_id", ignorenulls=True).alias("current_id"),
            F.count(F.lit(1)).alias("requests"),
            F.sum(F.col("id_gone").cast("long")).alias("unknown_id_errors"),
            F.array_join(F.array_sort(F.collect_set("instance")), ",").alias("instances"),
            F.timestamp_micros(F.min("time_us")).alias("first_seen"),
            F.timestamp_micros(F.max("time_us")).alias("last_seen"),
        )
    )


def id_adoption(ev: DataFrame) -> DataFrame:
    """Per client: the share of its Fetch/Produce requests at versions that carry topic ids."""
    F = _f()
    fetch, produce = int(ApiKey.FETCH), int(ApiKey.PRODUCE)
    key, version = F.col("api_key"), F.col("api_version")
    with_ids = ((key == fetch) & (version >= FIRST_ID_VERSION[ApiKey.FETCH])) | (
        (key == produce) & (version >= FIRST_ID_VERSION[ApiKey.PRODUCE])
    )
    return (
        _events(ev).where(key.isin(fetch, produce))
        .groupBy("day", "principal", "client_id")
        .agg(
            F.count(F.lit(1)).alias("fetch_produce"),
            F.sum(with_ids.cast("long")).alias("with_ids"),
            F.max(F.when(key == fetch, version)).alias("max_fetch_version"),
            F.max(F.when(key == produce, version)).alias("max_produce_version"),
        )
        .withColumn("share", F.round(F.col("with_ids") / F.col("fetch_produce"), 4))
    )


def policy_denials(ev: DataFrame) -> DataFrame:
    """Policy refusals per principal and resource (and the filter, operation and code that refused)."""
    from pyspark.sql.types import ArrayType

    F = _f()
    p = F.col("p")
    refused = F.from_json("policy", ArrayType(policy_schema()))
    return (
        _events(ev).where(F.col("policy").isNotNull())
        .select("day", "time_us", "principal", "client_id", F.explode(refused).alias("p"))
        .groupBy(
            "day", "principal", p["resource_type"].alias("resource_type"), p["resource"].alias("resource"),
            p["operation"].alias("operation"), p["filter"].alias("filter"), p["decision"].alias("decision"),
            p["error_code"].alias("error_code"),
        )
        .agg(
            F.count(F.lit(1)).alias("denials"),
            F.array_join(F.array_sort(F.collect_set(F.coalesce("client_id", F.lit("")))), ",").alias("client_ids"),
            F.timestamp_micros(F.min("time_us")).alias("first_seen"),
            F.timestamp_micros(F.max("time_us")).alias("last_seen"),
        )
    )


#: Every report table, by the name its files get (``DIR/csv/NAME.csv``, ``DIR/parquet/NAME/day=.../``).
REPORTS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "topic_hourly": topic_hourly,
    "chargeback": chargeback,
    "clients": clients,
    "instances": instances,
    "latency_api": latency_api,
    "latency_instance": latency_instance,
    "api_errors": api_errors,
    "unresolved_ids": unresolved_ids,
    "topic_id_history": topic_id_history,
    "stale_ids": stale_ids,
    "id_adoption": id_adoption,
    "policy_denials": policy_denials,
}
