"""Issue 26's done-when, end to end: records produced one per batch and consumed back through kgate
with ``audit-log`` on, then ``kgate report``: the chargeback CSV bills exactly what was produced and
consumed.

1,500 records, one per record batch (librdkafka with ``batch.num.messages=1``; Tansu answers a
Fetch with one batch per stored batch): every Fetch answer carries hundreds of batches per
partition. The audit log used to give up counting past 256 batches (``records: null``) and the
report summed null as 0: 2,200 records consumed showed as 0. Real clients (confluent-kafka), a real
broker (Tansu) and the real CLI (in process, on the test session's SparkSession). One kgate writes
its audit log as JSON lines, another as Parquet (``format: parquet``); one report reads both.
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
async def test_records_one_per_batch_are_billed_exactly(
    tansu: Any, kgate_factory: Any, spark: Any, tmp_path: Path
) -> None:
    """Two kgates, one writing its audit log as JSON lines and one as Parquet, each carrying its own
    topic; one ``kgate report`` over both logs (one Spark run, not one per format) bills each topic
    exactly: a format's miscount shows on its own topic."""
    from support.spark import run_report

    topics: dict[str, str] = {}
    audits = []
    for audit_format in ("jsonl", "parquet"):
        audit = tmp_path / f"audit-{audit_format}"
        config: dict[str, Any] = {"directory": str(audit), "instance_id": f"e2e-records-{audit_format}"}
        if audit_format == "parquet":
            config["format"] = "parquet"
        k = kgate_factory(tansu.bootstrap, extra={"filters": [{"name": "audit-log", "config": config}]})
        topic = topics[audit_format] = w.unique(f"one-per-batch-{audit_format}")
        await asyncio.to_thread(w.confluent_create_topic, k.bootstrap, topic, 1)
        values = w.payloads(N, size=20)
        await asyncio.to_thread(
            w.confluent_produce, k.bootstrap, topic, values, **{"linger.ms": 0, "batch.num.messages": 1}
        )
        got = await asyncio.to_thread(w.confluent_read_topic, k.bootstrap, topic, N)  # no group: not under test
        w.assert_exact(values, got)
        assert k.stop_and_check() == 0  # SIGTERM: the writer drains and publishes its last file
        published = [p.name for p in audit.iterdir() if not p.name.startswith(".")]
        suffix = ".parquet" if audit_format == "parquet" else ".jsonl.gz"
        assert published, published
        assert all(n.endswith(suffix) for n in published), published
        audits.append(str(audit))

    out = tmp_path / "report"
    run = await asyncio.to_thread(run_report, ["--input", *audits, "--output", str(out), "--no-html"])
    assert run.status == 0, run.err
    for audit_format, topic in topics.items():
        assert _billed(out, topic) == {"produced_records": N, "consumed_records": N}, audit_format


@pytest.mark.timeout(300)
async def test_refused_records_are_not_billed_as_produced(
    tansu: Any, kgate_factory: Any, spark: Any, tmp_path: Path
) -> None:
    """Records the broker never stored are not billed: the authorizer refuses a producer's writes to
    one topic (TOPIC_AUTHORIZATION_FAILED, answered by kgate) while its writes to another are stored,
    the two often in one Produce request. The chargeback bills exactly the acknowledged records; it
    billed every record sent (found by a new-user review). Real client, real broker, real kgate."""
    from confluent_kafka import Producer
    from support.spark import run_report

    audit = tmp_path / "audit"
    rules = [{"deny": ["write"], "topic": {"glob": "denied-*"}}]
    k = kgate_factory(
        tansu.bootstrap,
        extra={
            "filters": [
                {"name": "authorizer", "config": {"default": "allow", "rules": rules}},
                {"name": "audit-log", "config": {"directory": str(audit), "instance_id": "e2e-refused"}},
            ]
        },
    )
    allowed, denied = w.unique("allowed"), w.unique("denied")
    for topic in (allowed, denied):
        await asyncio.to_thread(w.confluent_create_topic, k.bootstrap, topic, 1)

    def produce() -> dict[str, list[int]]:
        p = Producer({"bootstrap.servers": k.bootstrap, "linger.ms": 20})
        outcome = {allowed: [0, 0], denied: [0, 0]}  # topic -> [acknowledged, refused]

        def on_delivery(err: Any, msg: Any) -> None:
            outcome[msg.topic()][0 if err is None else 1] += 1

        for i in range(30):
            p.produce(allowed, value=f"a{i}".encode(), on_delivery=on_delivery)
            if i % 3 == 0:
                p.produce(denied, value=f"d{i}".encode(), on_delivery=on_delivery)
        assert p.flush(30) == 0
        return outcome

    outcome = await asyncio.to_thread(produce)
    assert outcome == {allowed: [30, 0], denied: [0, 10]}, outcome
    got = await asyncio.to_thread(w.confluent_read_topic, k.bootstrap, allowed, 30)
    assert len(got) == 30
    assert k.stop_and_check() == 0

    out = tmp_path / "report"
    run = await asyncio.to_thread(run_report, ["--input", str(audit), "--output", str(out), "--no-html"])
    assert run.status == 0, run.err
    assert _billed(out, allowed) == {"produced_records": 30, "consumed_records": 30}
    assert _billed(out, denied) == {"produced_records": 0, "consumed_records": 0}
