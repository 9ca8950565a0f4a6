"""The explicit schema of audit events, schema v1 (docs/audit-log.md is the contract), in Arrow.

Nothing ever infers the schema: inference reads the data twice, and one odd line would
change the types of every report. A line whose fields do not fit these types is *malformed*; a
line whose ``schema`` is a number other than :data:`SCHEMA_VERSION` is an *unknown schema
version*. Both are counted per file and skipped, never fatal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

#: The schema version this pipeline reads.
SCHEMA_VERSION = 1

#: Line statuses the ingest step assigns.
OK, MALFORMED, UNKNOWN_SCHEMA = "ok", "malformed", "unknown_schema"


def policy_type() -> pa.DataType:
    """One ``policy`` entry: a decision that refused something (a function: pyarrow is imported only
    when called, so ``kgate report`` can say what is missing)."""
    import pyarrow as pa

    return pa.struct(
        [
            ("filter", pa.string()),
            ("decision", pa.string()),
            ("operation", pa.string()),
            ("resource_type", pa.string()),
            ("resource", pa.string()),
            ("error_code", pa.int32()),
            ("reason", pa.string()),
        ]
    )


def event_schema() -> pa.Schema:
    """The v1 event as an Arrow schema: what the workers parse each line against
    (:mod:`kgate.pipeline.decode`); Spark sees its types through ``from_arrow_type`` where it needs one."""
    import pyarrow as pa

    topic = pa.struct(
        [
            ("id", pa.string()),
            ("name", pa.string()),
            ("name_status", pa.string()),
            ("partitions", pa.int32()),
            ("bytes", pa.int64()),
            ("records", pa.int64()),
            ("error_codes", pa.list_(pa.int32())),
            # Produce, when the answer failed some of the topic's partitions: what was not stored
            ("failed_bytes", pa.int64()),
            ("failed_records", pa.int64()),
        ]
    )
    return pa.schema(
        [
            ("schema", pa.int32()),
            ("time_us", pa.int64()),
            ("instance", pa.string()),
            ("cluster", pa.string()),
            ("client", pa.struct([("address", pa.string()), ("id", pa.string()), ("principal", pa.string())])),
            ("api", pa.struct([("key", pa.int32()), ("name", pa.string()), ("version", pa.int32())])),
            ("correlation_id", pa.int32()),
            ("error_code", pa.int32()),
            ("latency_us", pa.int64()),
            ("request_bytes", pa.int64()),
            ("response_bytes", pa.int64()),
            ("topics", pa.list_(topic)),
            ("policy", pa.list_(policy_type())),
        ]
    )
