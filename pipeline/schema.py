"""The explicit Spark schema of audit events, schema v1 (docs/audit-log.md is the contract).

Spark is never asked to infer the schema: inference reads the data twice, and one odd line would
change the types of every report. A line whose fields do not fit these types is *malformed*; a
line whose ``schema`` is a number other than :data:`SCHEMA_VERSION` is an *unknown schema
version*. Both are counted per file and skipped, never fatal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

#: The schema version this pipeline reads.
SCHEMA_VERSION = 1

#: Line statuses the ingest step assigns.
OK, MALFORMED, UNKNOWN_SCHEMA = "ok", "malformed", "unknown_schema"


def event_schema() -> StructType:
    """The v1 event as a Spark ``StructType`` (a function: pyspark is imported only when called)."""
    from pyspark.sql.types import (
        ArrayType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    topic = StructType([
        StructField("id", StringType()),
        StructField("name", StringType()),
        StructField("name_status", StringType()),
        StructField("partitions", IntegerType()),
        StructField("bytes", LongType()),
        StructField("records", LongType()),
        StructField("error_codes", ArrayType(IntegerType())),
    ])
    policy = policy_schema()
    return StructType([
        StructField("schema", IntegerType()),
        StructField("time_us", LongType()),
        StructField("instance", StringType()),
        StructField("cluster", StringType()),
        StructField("client", StructType([
            StructField("address", StringType()),
            StructField("id", StringType()),
            StructField("principal", StringType()),
        ])),
        StructField("api", StructType([
            StructField("key", IntegerType()),
            StructField("name", StringType()),
            StructField("version", IntegerType()),
        ])),
        StructField("correlation_id", IntegerType()),
        StructField("error_code", IntegerType()),
        StructField("latency_us", LongType()),
        StructField("request_bytes", LongType()),
        StructField("response_bytes", LongType()),
        StructField("topics", ArrayType(topic)),
        StructField("policy", ArrayType(policy)),
    ])


def policy_schema() -> StructType:
    """One ``policy`` entry: a decision that refused something."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    return StructType([
        StructField("filter", StringType()),
        StructField("decision", StringType()),
        StructField("operation", StringType()),
        StructField("resource_type", StringType()),
        StructField("resource", StringType()),
        StructField("error_code", IntegerType()),
        StructField("reason", StringType()),
    ])
