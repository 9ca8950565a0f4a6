"""The audit log as Parquet: a rotated file of JSON lines rewritten as one zstd Parquet file.

``format: parquet`` keeps the writer thread exactly as it is (events built as JSON lines into the
hidden file, docs/audit-log.md "Files"); at rotation the hidden file is converted on the
compression thread, where gzip would have run: parsed with Arrow's JSON reader against the event
schema (the same versioned schema, :func:`kgate.pipeline.schema.event_schema`), written as
``.NAME.parquet.tmp`` and renamed ``NAME.parquet`` once complete, so a reader never sees a partial
file. Nothing of it runs on the event loop.

pyarrow is an optional dependency of the proxy: imported here only, when the first file is
converted; the filter's configuration refuses ``format: parquet`` without it (:func:`missing`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

log = logging.getLogger("kgate.audit")

#: Rows per Parquet row group: large enough for zstd and column statistics, small enough for readers.
ROW_GROUP = 128 * 1024
#: Bytes of whole lines parsed at once.
BLOCK = 8 << 20


def missing() -> str | None:
    """Why ``format: parquet`` cannot work here (pyarrow not installed), or None."""
    if importlib.util.find_spec("pyarrow") is None:
        return "format: parquet needs pyarrow, which is not installed (pip install 'kgate-proxy[parquet]' or pyarrow)"
    return None


def parquet_name(hidden: Path) -> Path:
    """``.kgate-audit-X.jsonl`` -> ``kgate-audit-X.parquet``."""
    return hidden.with_name(hidden.name[1:].removesuffix(".jsonl") + ".parquet")


def convert_file(hidden: Path) -> Path:
    """Rewrite the hidden JSON-lines file ``hidden`` as Parquet (zstd), published by rename; returns it.

    Lines that do not fit the schema (none, from kgate's writer; a torn last line after a full disk)
    are left out and counted in the log. The JSON file is removed once the Parquet file is in place.
    """
    import pyarrow.parquet as pq

    from kgate.pipeline.decode import blocks, parse_block
    from kgate.pipeline.schema import event_schema

    schema = event_schema()
    final = parquet_name(hidden)
    tmp = hidden.with_name(f".{final.name}.tmp")
    bad = 0
    with open(hidden, "rb") as f:
        content = f.read()
    try:
        # no dictionary encoding: cheaper to write and, for these columns (addresses with ports, times,
        # sizes), smaller too (docs/performance.md, "the audit log's Parquet format")
        with pq.ParquetWriter(tmp, schema, compression="zstd", use_dictionary=False) as writer:
            for block in blocks(content, gzipped=False, block_bytes=BLOCK):
                tables, bad_lines = parse_block(block, trusted=True)
                bad += len(bad_lines)
                for t in tables:
                    if not t.schema.equals(schema):
                        t = t.select(schema.names).cast(schema)
                    writer.write_table(t, row_group_size=ROW_GROUP)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if bad:
        log.error("audit: %d lines of %s did not fit the event schema; left out of %s", bad, hidden.name, final.name)
    hidden.unlink()
    return final
