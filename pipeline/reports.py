"""The report tables, all from one roll-up: one pass over the audit lines (see :mod:`kgate.pipeline.partials`).

The lines are aggregated **once** into one grain per report family (per topic and hour; per
principal, client and topic; per client, instance and policy refusal; per instance and HyperLogLog
register; per api, instance, error code and latency bucket; per topic id, client and instance; per
input file), every grain's keys and measures in a few shared *slots* (7 string keys, 4 numeric
keys, 11 buffers) rather than the union of every grain's columns. Only sums, counts, minima and
maxima are computed, so the aggregation splits exactly: each Spark task aggregates its own files in
its Python worker (:mod:`kgate.pipeline.partials`, the map side) and :func:`merge` aggregates the
tasks' partial aggregates in one hash aggregation. The result (the roll-up) is smaller than the
events for every grain (the topic-id grain keeps no row per use), and every table below is a small
query on it: the JSON is parsed once (but for the stale-id report's second pass over the few lines
naming ids it cannot settle, usually none) and the lines are never cached.

Every table has a ``day`` column (UTC), so each can be written as Parquet partitioned by day and a
fleet can keep months of them; the HTML page sums over the days of the run's window.

Byte columns, two kinds, both from docs/audit-log.md:

* ``bytes_in`` / ``bytes_out`` on per-topic tables are *record* bytes (``topics[].bytes``): what
  a Produce request carried into a topic and what a Fetch answer carried out of it. Those are the
  bytes a chargeback is about; other api keys carry none.
* ``request_bytes`` / ``response_bytes`` on per-instance and per-client tables are *frame* bytes on
  the wire, every api key included: the load a client puts on kgate.

Approximations (docs/pipeline.md): latency percentiles are read from an exact-count histogram of
latencies rounded to three significant digits (exact below 1 ms, within 0.5% above; max and mean are
exact); distinct client addresses per instance are a HyperLogLog estimate (4,096 registers, ~1.6%
standard error); every other number is exact (distinct instances per client and client ids per
instance are counted exactly).

Stale topic ids (the doc's last rule): kgate keeps the cached name of an id the broker no longer
knows and the answer carries error 100 (UNKNOWN_TOPIC_ID) or 3 (UNKNOWN_TOPIC_OR_PARTITION). A use
of a topic id is *stale* when it got one of those errors, or when its topic name has since been
seen with a newer id (the id first seen latest) and the use came after that newer id's first
appearance. Event order in files does not matter: everything is ordered by ``time_us``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kgate.codec import api
from kgate.codec.generated.api_keys import ApiKey
from kgate.pipeline.schema import MALFORMED, OK, UNKNOWN_SCHEMA, policy_type

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Fetch and Produce carry topic ids from these versions on (KIP-516).
FIRST_ID_VERSION: dict[ApiKey, int] = {ApiKey.FETCH: 13, ApiKey.PRODUCE: 13}
#: The newest Fetch and Produce versions kgate's codec knows (Kafka 4.3.1's). A newer one counts in
#: the id-adoption report only when the broker answered it: kgate forwards versions it does not know
#: (a newer Kafka's), and a made-up one the broker closed on is not a client on topic ids.
KNOWN_VERSION: dict[ApiKey, int] = {k: api.API_INFO[k].max_version for k in (ApiKey.FETCH, ApiKey.PRODUCE)}
RESOLVED_STATUSES = ("given", "resolved")
PERCENTILES = (0.5, 0.95, 0.99)
#: HyperLogLog registers (2**HLL_P) for distinct client addresses per instance and day.
HLL_P = 12

#: The grains of the roll-up: name -> key columns (what its tables group by and see).
SETS: dict[str, tuple[str, ...]] = {
    "files": ("file", "status", "schema", "sample"),
    "topic_hour": ("day", "hour", "cluster", "topic_name", "topic_id"),
    "charge": ("day", "cluster", "principal", "client_id", "topic_name"),
    "client": ("day", "principal", "client_id", "instance", "policy"),  # policy: null but for refusals
    "instance": ("day", "instance", "hll_bucket"),
    "latency": ("day", "api_key", "api_name", "instance", "error_code", "lat_bucket"),
    # topic-id uses per client and instance, with first/last use time (min_us/max_us) but not the time
    # itself: the stale-id rule's single-use comparisons are settled from these bounds, and the few
    # groups they cannot settle are counted exactly by a second, narrow pass (:func:`stale_ids`)
    "id_use": (
        "day",
        "cluster",
        "topic_name",
        "topic_id",
        "name_status",
        "principal",
        "client_id",
        "instance",
        "id_gone",
    ),
    # record bytes per topic name and minute: the traffic chart's buckets follow the data's span (an
    # hourly grain drew nothing for data within one hour)
    "traffic": ("minute", "topic_name"),
}
#: Spark types of the key columns (string keys go to string slots, the others to long slots and back).
KEY_TYPES: dict[str, str] = {
    "file": "string",
    "status": "string",
    "schema": "int",
    "sample": "string",
    "day": "date",
    "hour": "timestamp",
    "cluster": "string",
    "topic_name": "string",
    "topic_id": "string",
    "principal": "string",
    "client_id": "string",
    "instance": "string",
    "policy": "string",
    "hll_bucket": "long",
    "api_key": "int",
    "api_name": "string",
    "error_code": "int",
    "lat_bucket": "long",
    "name_status": "string",
    "id_gone": "int",
    "minute": "long",
}
_TOPIC = (
    ("topic_rows", "sum", "one", "long"),
    ("produce_requests", "sum", "is_produce", "long"),
    ("fetch_requests", "sum", "is_fetch", "long"),
    ("produced_bytes", "sum", "produced_bytes", "long"),
    ("consumed_bytes", "sum", "consumed_bytes", "long"),
    ("produced_records", "sum", "produced_records", "long"),
    ("consumed_records", "sum", "consumed_records", "long"),
    # Produce/Fetch topic entries whose record count the audit log could not know (null): the
    # record sums of a group holding any are reported as null, never as a silent undercount
    ("produced_records_unknown", "sum", "produced_unknown", "long"),
    ("consumed_records_unknown", "sum", "consumed_unknown", "long"),
)
_EVENT = (
    ("events", "sum", "one", "long"),
    ("request_bytes", "sum", "request_bytes", "long"),
    ("response_bytes", "sum", "response_bytes", "long"),
    ("errors", "sum", "errors", "long"),
    ("normal_errors", "sum", "normal_errors", "long"),
)
_SPAN = (("min_us", "min", "time_us", "long"), ("max_us", "max", "time_us", "long"))
#: Per grain: its measures, as (column, aggregate, value of :mod:`kgate.pipeline.partials`, Spark type of the column).
MEASURES: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    # entries: rows of the file, one more for an empty file (lines 0), so every input is listed
    "files": (("lines", "sum", "one", "long"), ("entries", "sum", "one", "long")),
    "topic_hour": (*_TOPIC, ("topic_errors", "sum", "topic_errors", "long")),
    "charge": _TOPIC,
    "client": (
        *_EVENT,
        ("fetch_produce", "sum", "fetch_produce", "long"),
        ("with_ids", "sum", "with_ids", "long"),
        ("policy_events", "sum", "policy_events", "long"),
        ("max_fetch_version", "max", "fetch_version", "int"),
        ("max_produce_version", "max", "produce_version", "int"),
        *_SPAN,
    ),
    "instance": (*_EVENT, ("rho", "max", "rho", "int"), *_SPAN),
    "latency": (
        ("events", "sum", "one", "long"),
        ("answered", "sum", "answered", "long"),
        ("latency_sum", "sum", "latency", "long"),
        ("latency_max", "max", "latency", "long"),
    ),
    "id_use": (("id_uses", "sum", "one", "long"), *_SPAN),
    "traffic": (("traffic_rows", "sum", "one", "long"), ("traffic_bytes", "sum", "record_bytes", "long")),
}
GRAINS: tuple[str, ...] = tuple(SETS)


def _slots(name: str) -> dict[str, str]:
    """Column of grain ``name`` -> the roll-up slot holding it: keys in ``ks1..`` (strings) and ``kn1..``
    (numbers, as longs), measures in ``sum1..``, ``max1..``, ``min1..``, each numbered within its kind."""
    out: dict[str, str] = {}
    count: dict[str, int] = {}

    def take(kind: str) -> str:
        count[kind] = count.get(kind, 0) + 1
        return f"{kind}{count[kind]}"

    for k in SETS[name]:
        out[k] = take("ks" if KEY_TYPES[k] == "string" else "kn")
    for col, agg, _value, _type in MEASURES[name]:
        out[col] = take(agg)
    return out


SLOTS: dict[str, dict[str, str]] = {name: _slots(name) for name in GRAINS}
#: Every slot, in a fixed order (the roll-up's columns after ``gid``).
ALL_SLOTS: tuple[str, ...] = tuple(
    sorted(
        {s for m in SLOTS.values() for s in m.values()},
        key=lambda s: (s.rstrip("0123456789"), int(s.lstrip("ksnumaxi"))),
    )
)


def _f() -> Any:
    """pyspark.sql.functions, imported when a report is built (importing this module needs no Spark)."""
    from pyspark.sql import functions as F

    return F


def merge(partials: DataFrame) -> DataFrame:
    """The roll-up: partial aggregates (:mod:`kgate.pipeline.partials`, one set per Spark task) merged.

    The map side runs in the Python workers, on Arrow: each task parses its files and aggregates
    every grain of them (:data:`SETS`, keys and measures in the shared slots of :data:`SLOTS`), so
    what reaches this one hash aggregation is a few rows per grain key and task, not a row per line.
    Sums of sums, maxima of maxima and minima of minima are exact: the merge gives the same roll-up
    as aggregating every line at once. :func:`part` turns a grain's rows back into its named, typed
    columns.
    """
    F = _f()
    key_slots = [s for s in ALL_SLOTS if s.startswith("k")]
    aggs = {"sum": F.sum, "max": F.max, "min": F.min}
    measures = [aggs[s.rstrip("0123456789")](s).alias(s) for s in ALL_SLOTS if not s.startswith("k")]
    return partials.groupBy("gid", *key_slots).agg(*measures)


def part(roll: DataFrame, name: str, count: str) -> DataFrame:
    """The rows of grain ``name`` that counted something (``count`` > 0), as its named, typed columns."""
    F = _f()
    slots = SLOTS[name]

    def typed(col: str, kind: str) -> Column:
        c = F.col(slots[col])
        if kind == "date":
            return F.date_from_unix_date(c.cast("int")).alias(col)
        if kind == "timestamp":
            return F.timestamp_micros(c).alias(col)
        return (c if kind in ("string", "long") else c.cast(kind)).alias(col)

    cols = [typed(k, KEY_TYPES[k]) for k in SETS[name]] + [typed(c, t) for c, _a, _v, t in MEASURES[name]]
    return roll.where((F.col("gid") == GRAINS.index(name)) & (F.col(slots[count]) > 0)).select(*cols)


def problems(roll: DataFrame) -> DataFrame:
    """Per file: lines read, good, malformed, of an unknown schema version (which ones), and a sample.

    Files without a single bad line are listed too, so the table doubles as the list of inputs.
    """
    F = _f()
    status, lines = F.col("status"), F.col("lines")
    bad = status != OK

    def count(s: str) -> Column:
        return F.coalesce(F.sum(F.when(status == s, lines)), F.lit(0)).cast("long")

    return (
        part(roll, "files", "entries")
        .groupBy("file")
        .agg(
            F.sum(lines).alias("lines"),
            count(OK).alias("ok"),
            count(MALFORMED).alias("malformed"),
            count(UNKNOWN_SCHEMA).alias("unknown_schema"),
            F.array_join(F.array_sort(F.collect_set(F.when(status == UNKNOWN_SCHEMA, F.col("schema")))), ",").alias(
                "unknown_versions"
            ),
            F.min(F.when(bad, F.col("sample"))).alias("sample"),
        )
        .withColumn("file", F.regexp_replace("file", "^file:(//)?", ""))
        .orderBy(F.desc("malformed"), F.desc("unknown_schema"), "file")
    )


def _ts(c: str) -> Column:
    return _f().timestamp_micros(_f().col(c))


#: The per-topic measures of :data:`MEASURES` ``topic_hour`` and ``charge`` that tables add up.
_TOPIC_SUMS = (
    "topic_rows",
    "produce_requests",
    "fetch_requests",
    "produced_bytes",
    "consumed_bytes",
    "produced_records",
    "consumed_records",
    "produced_records_unknown",
    "consumed_records_unknown",
)


def _traffic(rows: DataFrame) -> list[Column]:
    """The billing columns of per-topic rows: requests (all, Produce, Fetch), record bytes and records
    produced and consumed. A record sum is null (shown empty) when any of its entries had no count
    (``*_records_unknown`` says how many): a count the audit log could not know is never summed as 0."""
    F = _f()

    def records(kind: str) -> Column:
        unknown = F.col(f"{kind}_records_unknown")
        return F.when(unknown > 0, F.lit(None).cast("long")).otherwise(F.coalesce(kind + "_records", F.lit(0)))

    return [
        F.col("topic_rows").alias("requests"),
        "produce_requests",
        "fetch_requests",
        F.coalesce("produced_bytes", F.lit(0)).alias("produced_bytes"),
        F.coalesce("consumed_bytes", F.lit(0)).alias("consumed_bytes"),
        records("produced").alias("produced_records"),
        records("consumed").alias("consumed_records"),
        "produced_records_unknown",
        "consumed_records_unknown",
    ]


def _with_ids(rows: DataFrame) -> DataFrame:
    """Topic rows that name a topic without its id (Produce before v13, Metadata, ...) get the id the name
    had at that hour, so each topic is one row: the id first seen latest at or before the hour, else
    (the id only appeared later that day) the earliest id of the name. A name never seen with an id keeps none."""
    F = _f()
    e = F.col
    names = ["cluster", "topic_name"]
    ids = (
        rows.where(e("topic_id").isNotNull() & e("topic_name").isNotNull())
        .groupBy(*names, "topic_id")
        .agg(F.min(F.unix_micros("hour")).alias("first_us"))
    )
    bare = rows.where(e("topic_id").isNull() & e("topic_name").isNotNull())
    hours = bare.select(*names, "hour").distinct().join(ids, names)
    before = e("first_us") <= F.unix_micros("hour")
    rank = F.struct(before, F.when(before, e("first_us")).otherwise(-e("first_us")))
    picked = hours.groupBy(*names, "hour").agg(F.max_by("topic_id", rank).alias("picked_id"))
    filled = bare.join(picked, [*names, "hour"], "left").withColumn("topic_id", e("picked_id")).drop("picked_id")
    rest = rows.where(e("topic_id").isNotNull() | e("topic_name").isNull())
    keys = list(SETS["topic_hour"])
    return rest.unionByName(filled).groupBy(*keys).agg(*[F.sum(c).alias(c) for c in (*_TOPIC_SUMS, "topic_errors")])


def topic_hourly(roll: DataFrame) -> DataFrame:
    """Per topic (name and id, one row) per hour: requests, record bytes and records produced and consumed, errors."""
    F = _f()
    rows = _with_ids(part(roll, "topic_hour", "topic_rows"))
    return rows.select(
        "day", "hour", "cluster", "topic_name", "topic_id", *_traffic(rows), F.col("topic_errors").alias("errors")
    )


def chargeback(roll: DataFrame) -> DataFrame:
    """Per day, cluster, principal, client id and topic name (ids change, names are billed): requests,
    record bytes and records, produced and consumed apart."""
    rows = part(roll, "charge", "topic_rows")
    return rows.select("day", "cluster", "principal", "client_id", "topic_name", *_traffic(rows))


def traffic(roll: DataFrame) -> DataFrame:
    """Record bytes (in + out) per minute (µs since the epoch) and topic name: what the traffic chart buckets."""
    F = _f()
    return part(roll, "traffic", "traffic_rows").select(
        "minute", "topic_name", F.coalesce("traffic_bytes", F.lit(0)).alias("bytes")
    )


def clients(roll: DataFrame) -> DataFrame:
    """Per principal and client id: requests, frame bytes, errors (every api key, topics or not)."""
    F = _f()
    return (
        part(roll, "client", "events")
        .groupBy("day", "principal", "client_id")
        .agg(
            F.sum("events").alias("requests"),
            F.sum("request_bytes").alias("request_bytes"),
            F.coalesce(F.sum("response_bytes"), F.lit(0)).alias("response_bytes"),
            F.sum("errors").alias("errors"),
            F.sum("normal_errors").alias("normal_errors"),
            F.countDistinct("instance").alias("instances"),
        )
    )


def instances(roll: DataFrame) -> DataFrame:
    """Per kgate instance: the load it carried (is the fleet balanced?)."""
    F = _f()
    m = 1 << HLL_P
    alpha = 0.7213 / (1 + 1.079 / m)
    client_ids = (
        part(roll, "client", "events")
        .where(F.col("client_id").isNotNull())
        .groupBy("day", "instance")
        .agg(F.countDistinct("client_id").alias("client_ids"))
    )
    per = (
        part(roll, "instance", "events")
        .groupBy("day", "instance")
        .agg(
            F.sum("events").alias("requests"),
            F.sum("request_bytes").alias("request_bytes"),
            F.coalesce(F.sum("response_bytes"), F.lit(0)).alias("response_bytes"),
            F.sum("errors").alias("errors"),
            F.sum("normal_errors").alias("normal_errors"),
            # HyperLogLog: the registers present, the rest are 0
            (F.sum(F.pow(F.lit(2.0), -F.col("rho"))) + (m - F.count("rho"))).alias("z"),
            (m - F.count("rho")).alias("zeros"),
            F.min("min_us").alias("min_us"),
            F.max("max_us").alias("max_us"),
        )
    )
    raw = F.lit(alpha * m * m) / F.col("z")
    small = (raw <= 2.5 * m) & (F.col("zeros") > 0)
    estimate = F.when(small, F.lit(float(m)) * F.log(F.lit(float(m)) / F.col("zeros"))).otherwise(raw)
    return per.join(client_ids, ["day", "instance"], "left").select(
        "day",
        "instance",
        "requests",
        "request_bytes",
        "response_bytes",
        "errors",
        "normal_errors",
        F.round(estimate).cast("long").alias("client_addresses"),
        F.coalesce("client_ids", F.lit(0)).cast("long").alias("client_ids"),
        _ts("min_us").alias("first_seen"),
        _ts("max_us").alias("last_seen"),
    )


def _latency(roll: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Percentiles from the latency histogram: the smallest bucket whose running count reaches
    ``ceil(p * answered)`` (the rank ``percentile_approx`` answers with), reported as the largest
    latency seen in that bucket: an observed value, so a percentile never exceeds the maximum (a
    bucket's rounded value could: p99 2,010,000 µs over a max of 2,007,939 in an end-to-end run)."""
    from pyspark.sql import Window as W

    F = _f()
    hist = (
        part(roll, "latency", "answered")
        .groupBy(*keys, "lat_bucket")
        .agg(F.sum("answered").alias("n"), F.sum("latency_sum").alias("s"), F.max("latency_max").alias("mx"))
    )
    running = F.sum("n").over(
        W.partitionBy(*keys).orderBy("lat_bucket").rowsBetween(W.unboundedPreceding, W.currentRow)
    )
    ranked = hist.select("*", running.alias("cum"), F.sum("n").over(W.partitionBy(*keys)).alias("total"))

    def pct(p: float) -> Column:
        reached = F.when(F.col("cum") >= F.ceil(F.lit(p) * F.col("total")), F.struct("lat_bucket", "mx"))
        return F.min(reached).getField("mx")  # the first bucket that reaches the rank (structs order by bucket)

    return ranked.groupBy(*keys).agg(
        F.sum("n").alias("answered"),
        pct(PERCENTILES[0]).alias("p50_us"),
        pct(PERCENTILES[1]).alias("p95_us"),
        pct(PERCENTILES[2]).alias("p99_us"),
        F.max("mx").alias("max_us"),
        (F.sum("s") / F.sum("n")).alias("mean_us"),
    )


def latency_api(roll: DataFrame, per_day: bool = True) -> DataFrame:
    """Latency p50/p95/p99 (µs) per api key, answered exchanges only."""
    return _latency(roll, ["day", "api_key", "api_name"] if per_day else ["api_key", "api_name"])


def latency_instance(roll: DataFrame, per_day: bool = True) -> DataFrame:
    """Latency p50/p95/p99 (µs) per kgate instance, answered exchanges only."""
    return _latency(roll, ["day", "instance"] if per_day else ["instance"])


def api_errors(roll: DataFrame) -> DataFrame:
    """Per api key and answer error code: exchanges (code 0 included, so rates can be computed), and
    the code's ``outcome``: ok, normal (the protocol's normal course: :mod:`kgate.pipeline.outcomes`)
    or failure."""
    from kgate.pipeline.outcomes import outcome

    F = _f()
    return (
        part(roll, "latency", "events")
        .groupBy("day", "api_key", "api_name", "error_code")
        .agg(F.sum("events").alias("requests"))
        .withColumn("outcome", outcome(F.col("api_key"), F.col("error_code")))
    )


def _id_uses(roll: DataFrame) -> DataFrame:
    """Uses of topic ids per (day, cluster, name, id, status, principal, client, instance, gone): their
    count ``n`` and first and last use (``min_us``, ``max_us``).

    ``id_gone`` (the id no longer exists) is true for uses answered UNKNOWN_TOPIC_ID (100). An answer of
    only UNKNOWN_TOPIC_OR_PARTITION (3) is also what a live topic gets in passing (a partition moving,
    a topic just created), so it counts as gone only when no use of the id succeeded after it and it
    is not alone: it repeats, or the name has since appeared with a newer id."""
    from pyspark.sql import Window as W

    F = _f()
    e = F.col
    raw = part(roll, "id_use", "id_uses").select(
        "day",
        "cluster",
        "topic_name",
        "topic_id",
        "name_status",
        "principal",
        "client_id",
        "instance",
        e("id_gone").alias("gone_kind"),
        "min_us",
        "max_us",
        e("id_uses").alias("n"),
    )
    by_id = W.partitionBy("cluster", "topic_id")
    with_id = raw.select(
        "*",
        F.max(F.when(e("gone_kind") == 0, e("max_us"))).over(by_id).alias("ok_last_us"),
        F.sum(F.when(e("gone_kind") == 2, e("n"))).over(by_id).alias("weak_n"),
        F.min("min_us").over(by_id).alias("id_first_us"),
    )
    newest = F.max("id_first_us").over(W.partitionBy("cluster", "topic_name"))
    weak = (
        (e("gone_kind") == 2)
        & (e("ok_last_us").isNull() | (e("ok_last_us") < e("min_us")))
        & ((e("weak_n") >= 2) | (e("topic_name").isNotNull() & (newest > e("id_first_us"))))
    )
    return with_id.select(
        "day",
        "cluster",
        "topic_name",
        "topic_id",
        "name_status",
        "principal",
        "client_id",
        "instance",
        ((e("gone_kind") == 1) | weak).alias("id_gone"),
        "min_us",
        "max_us",
        "n",
    )


def unresolved_ids(roll: DataFrame) -> DataFrame:
    """Topic ids that never resolved to a name anywhere in the input, with who sent them."""
    F = _f()
    uses = _id_uses(roll)
    resolved = uses.where(F.col("topic_name").isNotNull() & F.col("name_status").isin(*RESOLVED_STATUSES))
    never = uses.join(resolved.select("cluster", "topic_id").distinct(), ["cluster", "topic_id"], "left_anti")
    return never.groupBy("day", "cluster", "topic_id").agg(
        F.sum("n").alias("requests"),
        F.array_join(F.array_sort(F.collect_set("name_status")), ",").alias("statuses"),
        F.array_join(F.array_sort(F.collect_set(F.coalesce("client_id", F.lit("")))), ",").alias("client_ids"),
        F.timestamp_micros(F.min("min_us")).alias("first_seen"),
        F.timestamp_micros(F.max("max_us")).alias("last_seen"),
    )


def _id_history(uses: DataFrame) -> DataFrame:
    """Per (cluster, topic name, id): first/last use, first gone-id error, and the newest id of the name."""
    from pyspark.sql import Window as W

    F = _f()
    named = uses.where(F.col("topic_name").isNotNull())
    per_id = named.groupBy("cluster", "topic_name", "topic_id").agg(
        F.min("min_us").alias("first_us"),
        F.max("max_us").alias("last_us"),
        F.sum("n").alias("requests"),
        F.min(F.when(F.col("id_gone"), F.col("min_us"))).alias("first_gone_us"),
    )
    by_name = W.partitionBy("cluster", "topic_name")
    newest = F.max_by("topic_id", "first_us").over(by_name)
    newest_first = F.max("first_us").over(by_name)
    return per_id.select(
        "*",
        F.when(newest != F.col("topic_id"), newest).alias("newer_id"),
        F.when(newest != F.col("topic_id"), newest_first).alias("newer_first_us"),
    )


def topic_id_history(roll: DataFrame) -> DataFrame:
    """Every (topic name, id) pair seen: when, how much, whether deleted, and which id replaced it."""
    F = _f()
    h = _id_history(_id_uses(roll))
    return h.select(
        F.to_date(F.timestamp_micros("first_us")).alias("day"),
        "cluster",
        "topic_name",
        "topic_id",
        "requests",
        F.timestamp_micros("first_us").alias("first_seen"),
        F.timestamp_micros("last_us").alias("last_seen"),
        F.timestamp_micros("first_gone_us").alias("first_unknown_id_error"),
        F.col("newer_id").alias("replaced_by"),
        F.timestamp_micros("newer_first_us").alias("replaced_at"),
    )


#: Keys of a topic-id use group without ``id_gone``: what :data:`ExactUses` returns counts for.
USE_KEYS = ("day", "cluster", "topic_name", "topic_id", "name_status", "principal", "client_id", "instance")
#: ``(cluster, topic_name, topic_id, newer_first_us)`` of the ids to count exactly -> their uses at or
#: after ``newer_first_us`` without a gone-id error, per :data:`USE_KEYS`, with ``n``, ``min_us``, ``max_us``.
ExactUses = Callable[["DataFrame"], "DataFrame"]


def late_uses(uses: DataFrame, candidates: DataFrame) -> DataFrame:
    """The exact second pass of :func:`stale_ids`: single uses of the ``candidates``' ids (from
    :func:`kgate.pipeline.ingest.exact_uses`: in the window, without a gone-id error, the same
    conditions as the roll-up's id-use grain) at or after their newer id's first appearance."""
    F = _f()
    e = F.col
    return (
        uses.join(F.broadcast(candidates), ["cluster", "topic_name", "topic_id"])
        .where(e("time_us") >= e("newer_first_us"))
        .withColumn("day", F.date_from_unix_date(e("day").cast("int")))
        .groupBy(*USE_KEYS)
        .agg(F.count(F.lit(1)).alias("n"), F.min("time_us").alias("min_us"), F.max("time_us").alias("max_us"))
    )


def stale_ids(roll: DataFrame, exact: ExactUses) -> DataFrame:
    """Clients still using the id of a deleted (and maybe recreated) topic: who, which id, how often.

    The rule compares single uses with the time the name's newer id first appeared (``T``), but the
    roll-up keeps only each use group's count and first/last use, which settles almost every group:
    a gone-id error makes all of a group's uses stale, a group whose first use is at or after ``T``
    is stale whole, one whose last use is before ``T`` not at all. Only groups that straddle ``T``
    (a client that kept using the old id, without errors, across the recreation) need the single
    uses: their ids (usually none, a few when there are) are counted again exactly by ``exact``, a
    second pass over just the lines that name them (:func:`late_uses`). Keeping a row per use in the
    roll-up instead made the id-use grain as fine as the lines (5.7M of 10M events went through the
    shuffle whole).
    """
    F = _f()
    e = F.col
    uses = _id_uses(roll).where(e("topic_name").isNotNull())
    h = _id_history(uses).select("cluster", "topic_name", "topic_id", "newer_id", "newer_first_us")
    joined = uses.join(h, ["cluster", "topic_name", "topic_id"])
    t = e("newer_first_us")
    straddles = ~e("id_gone") & t.isNotNull() & (e("min_us") < t) & (e("max_us") >= t)
    id_keys = ["cluster", "topic_name", "topic_id"]
    found = joined.where(straddles).select(*id_keys, "newer_first_us").distinct().collect()
    cols = [*USE_KEYS, "newer_id", "n", "gone_n", "min_us", "max_us"]
    gone = joined.where(e("id_gone")).select(*USE_KEYS, "newer_id", "n", e("n").alias("gone_n"), "min_us", "max_us")
    late = joined.where(~e("id_gone") & t.isNotNull() & (e("min_us") >= t))
    parts = [gone]
    if found:
        spark = roll.sparkSession
        cands = spark.createDataFrame(found, "cluster string, topic_name string, topic_id string, newer_first_us long")
        late = late.join(F.broadcast(cands.select(*id_keys)), id_keys, "left_anti")  # counted exactly below
        newer = h.select(*id_keys, "newer_id")
        parts.append(
            exact(cands)
            .join(newer, id_keys)
            .select(*USE_KEYS, "newer_id", "n", F.lit(0).cast("long").alias("gone_n"), "min_us", "max_us")
        )
    parts.append(late.select(*USE_KEYS, "newer_id", "n", F.lit(0).cast("long").alias("gone_n"), "min_us", "max_us"))
    stale = parts[0].select(*cols)
    for p in parts[1:]:
        stale = stale.unionByName(p.select(*cols))
    return stale.groupBy("day", "cluster", "topic_name", "topic_id", "principal", "client_id").agg(
        F.first("newer_id", ignorenulls=True).alias("current_id"),
        F.sum("n").alias("requests"),
        F.coalesce(F.sum("gone_n"), F.lit(0)).alias("unknown_id_errors"),
        F.array_join(F.array_sort(F.collect_set("instance")), ",").alias("instances"),
        F.timestamp_micros(F.min("min_us")).alias("first_seen"),
        F.timestamp_micros(F.max("max_us")).alias("last_seen"),
    )


def id_adoption(roll: DataFrame) -> DataFrame:
    """Per client: the share of its Fetch/Produce requests at versions that carry topic ids."""
    F = _f()
    return (
        part(roll, "client", "fetch_produce")
        .groupBy("day", "principal", "client_id")
        .agg(
            F.sum("fetch_produce").alias("fetch_produce"),
            F.sum("with_ids").alias("with_ids"),
            F.max("max_fetch_version").alias("max_fetch_version"),
            F.max("max_produce_version").alias("max_produce_version"),
        )
        .withColumn("share", F.round(F.col("with_ids") / F.col("fetch_produce"), 4))
    )


def policy_denials(roll: DataFrame) -> DataFrame:
    """Policy refusals per principal and resource (and the filter, operation and code that refused)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type

    F = _f()
    p = F.col("p")
    refused = F.from_json("policy", from_arrow_type(pa.list_(policy_type())))
    return (
        part(roll, "client", "policy_events")
        .select("day", "principal", "client_id", "policy_events", "min_us", "max_us", F.explode(refused).alias("p"))
        .groupBy(
            "day",
            "principal",
            p["resource_type"].alias("resource_type"),
            p["resource"].alias("resource"),
            p["operation"].alias("operation"),
            p["filter"].alias("filter"),
            p["decision"].alias("decision"),
            p["error_code"].alias("error_code"),
        )
        .agg(
            F.sum("policy_events").alias("denials"),
            F.array_join(F.array_sort(F.collect_set(F.coalesce("client_id", F.lit("")))), ",").alias("client_ids"),
            F.timestamp_micros(F.min("min_us")).alias("first_seen"),
            F.timestamp_micros(F.max("max_us")).alias("last_seen"),
        )
    )


#: Every report table, by the name its files get (``DIR/csv/NAME.csv``, ``DIR/parquet/NAME/day=.../``);
#: each takes the roll-up of :func:`merge` (and those in :data:`NEEDS_EXACT` an :data:`ExactUses` too).
REPORTS: dict[str, Callable[..., DataFrame]] = {
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
#: Reports that may need a second, exact pass over some lines (:func:`stale_ids`).
NEEDS_EXACT = frozenset({"stale_ids"})
