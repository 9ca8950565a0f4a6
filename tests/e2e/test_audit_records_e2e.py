"""Issue 26's done-when, end to end: records produced one per batch and consumed back through kgate
with ``audit-log`` on, then ``kgate report``: the chargeback CSV bills exactly what was produced and
consumed.

1,500 records, one per record batch (librdkafka with ``batch.num.messages=1``; Tansu answers a
Fetch with one batch per stored batch): every Fetch answer carries hundreds of batches per
partition. The audit log used to give up counting past 256 batches (``records: null``) and the
report summed null as 0: 2,200 records consumed showed as 0. Real clients (confluent-kafka), a real
broker (Tansu) and the real CLI (in process, on the test session's SparkSession). Once with the audit
log as JSON lines, once as Parquet (``format: parquet``).
"""

from __future__ import annotations

import asyncio
import csv
from pathlib import Path
from typing import Any

import pytest
from support import workloads as w

N = 1500


def _billed(out: Path, topic: str) -> dict[str, int | None]:
    """produced/consumed records of ``topic`` summed over every ``chargeback*.csv`` under ``out``
    (None when a row leaves one empty: a count the audit log could not know)."""
    sums: dict[str, int | None] = {"produced_records": 0, "consumed_records": 0}
    files = sorted(out.glob("**/chargeback*.csv"))
    assert files, f"no chargeback CSV under {out}"
    for path in files:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["topic_name"] != topic:
                    continue
                for col in sums:
                    current = sums[col]
                    sums[col] = None if current is None or row[col] == "" else current + int(row[col])
    return sums


@pytest.mark.timeout(600)
@pytest.mark.parametrize("audit_format", ["jsonl", "parquet"])
async def test_records_one_per_batch_are_billed_exactly(
    audit_format: str, tansu: Any, kgate_factory: Any, spark: Any, tmp_path: Path
) -> None:
    from kgate.proxy.runtime.cli import main

    audit = tmp_path / "audit"
    config: dict[str, Any] = {"directory": str(audit), "instance_id": "e2e-records"}
    if audit_format == "parquet":
        config["format"] = "parquet"
    k = kgate_factory(tansu.bootstrap, extra={"filters": [{"name": "audit-log", "config": config}]})
    topic = w.unique("one-per-batch")
    await asyncio.to_thread(w.confluent_create_topic, k.bootstrap, topic, 1)
    values = w.payloads(N, size=20)
    await asyncio.to_thread(
        w.confluent_produce, k.bootstrap, topic, values, **{"linger.ms": 0, "batch.num.messages": 1}
    )
    got, _ = await asyncio.to_thread(w.confluent_consume, k.bootstrap, topic, N, w.unique("g"))
    w.assert_exact(values, got)
    assert k.stop_and_check() == 0  # SIGTERM: the writer drains and publishes its last file
    published = [p.name for p in audit.iterdir() if not p.name.startswith(".")]
    suffix = ".parquet" if audit_format == "parquet" else ".jsonl.gz"
    assert published, published
    assert all(n.endswith(suffix) for n in published), published

    out = tmp_path / "report"
    assert await asyncio.to_thread(main, ["report", "--input", str(audit), "--output", str(out), "--no-html"]) == 0
    assert _billed(out, topic) == {"produced_records": N, "consumed_records": N}
