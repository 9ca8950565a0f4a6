"""An oracle: a generated hostile fleet log with known answers, the report's tables against an
independent computation, for both audit formats (JSON lines and the audit log's Parquet).

The log (seeded, ~3,000 events over two days, two clusters, three instances) has what real fleets
have and the easy cases do not: events out of time order within a file, null principals and client
ids, unicode names, topics named by id only, record counts the audit log could not know (null with
record bytes), unanswered exchanges (null error code, latency and response bytes), protocol-normal
answer codes beside failures, an empty file, bad lines, and a gzip file. The expected tables are
computed here in plain Python from the same event dicts (never through Spark, Arrow's hash
aggregation or the pipeline's code), then compared row by row.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from kgate.pipeline.outcomes import is_normal

from .conftest import T0, event, topic, write_events

S, HOUR, DAY = 1_000_000, 3_600_000_000, 86_400_000_000
APIS = [
    ("Produce", 0, 9),
    ("Fetch", 1, 12),
    ("Fetch", 1, 13),
    ("Metadata", 3, 12),
    ("JoinGroup", 11, 9),
    ("Heartbeat", 12, 4),
]
CODES = [0] * 12 + [6, 27, 79, 3, 29, 87]


def _fleet(seed: int = 26) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    names = ["orders", "pay-ments", "ünïcode-ţopic", "x" * 200]
    ids = {n: f"{i:022d}" for i, n in enumerate(names)}
    out = []
    for _ in range(3000):
        api, key, version = rng.choice(APIS)
        answered = rng.random() > 0.05
        code = rng.choice(CODES) if answered else None
        topics = []
        if key in (0, 1, 3):
            for name in rng.sample(names, rng.randint(1, 2)):
                by_id = key == 1 and version >= 13
                nbytes = rng.choice([0, rng.randrange(1, 50_000)]) if key in (0, 1) else None
                records = None if key == 3 else (None if rng.random() < 0.03 else rng.randrange(0, 400))
                topics.append(
                    topic(
                        name,
                        ids[name] if by_id else None,
                        status="resolved" if by_id else "given",
                        bytes=nbytes,
                        records=records,
                        errors=[] if code is None else [code],
                    )
                )
        out.append(
            event(
                T0 + rng.randrange(0, 2 * DAY),
                api=api,
                key=key,
                version=version,
                client_id=rng.choice(["app-1", "app-2", None, "kliënt"]),
                principal=rng.choice(["User:alice", "User:bob", None]),
                instance=rng.choice(["kgate-a", "kgate-b", "kgate-c"]),
                cluster=rng.choice(["east", "west"]),
                error_code=code,
                latency_us=rng.randrange(50, 3_000_000) if answered else None,
                request_bytes=rng.randrange(40, 60_000),
                response_bytes=rng.randrange(20, 60_000) if answered else None,
                topics=topics,
                address=f"10.0.0.{rng.randrange(20)}:{rng.randrange(1000, 60000)}",
            )
        )
    return out


def _write_inputs(d: Path, events: list[dict[str, Any]], as_parquet: bool) -> None:
    """Three files per instance-ish split; bad lines and an empty file beside them."""
    d.mkdir(parents=True)
    thirds = [events[0::3], events[1::3], events[2::3]]
    if as_parquet:
        from kgate.filters.builtin.audit.parquet import convert_file

        for n, part in enumerate(thirds):
            hidden = d / f".kgate-audit-{n}.jsonl"
            hidden.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for e in reversed(part)))
            convert_file(hidden)
    else:
        write_events(d / "a.jsonl", list(reversed(thirds[0])), extra_lines=["garbage", '{"schema": 9}'])
        write_events(d / "b.jsonl.gz", thirds[1])
        with gzip.open(d / "c.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(e) + "\n" for e in thirds[2])
    (d / "empty.jsonl").write_text("")


def _expected(events: list[dict[str, Any]]) -> dict[str, dict[Any, dict[str, Any]]]:
    def day(us: int) -> str:
        return str(dt.datetime.fromtimestamp(us / S, dt.UTC).date())

    charge: dict[Any, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    hourly: dict[Any, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    api: dict[Any, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    clients: dict[Any, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    for e in events:
        t, k, code = e["time_us"], e["api"]["key"], e["error_code"]
        a = api[(day(t), k, code)]
        a["requests"] += 1
        a["outcome"] = None if code is None else "ok" if code == 0 else "normal" if is_normal(k, code) else "failure"
        c = clients[(day(t), e["client"]["principal"], e["client"]["id"])]
        c["requests"] += 1
        c["request_bytes"] += e["request_bytes"]
        c["errors"] += code not in (None, 0) and not is_normal(k, code)
        c["normal_errors"] += code not in (None, 0) and is_normal(k, code)
        who = (e["client"]["principal"], e["client"]["id"])
        for tp in e["topics"]:
            for table, key in (
                (charge, (day(t), e["cluster"], *who, tp["name"])),
                (hourly, (day(t), t // HOUR * HOUR, e["cluster"], tp["name"])),
            ):
                r = table[key]
                r["requests"] += 1
                for kind, api_key in (("produced", 0), ("consumed", 1)):
                    if k != api_key:
                        continue
                    r["produce_requests" if k == 0 else "fetch_requests"] += 1
                    r[f"{kind}_bytes"] += tp["bytes"] or 0
                    if tp["records"] is None and (tp["bytes"] or 0) > 0:
                        r[f"{kind}_records_unknown"] += 1
                    r[f"{kind}_records"] += tp["records"] or 0
    for table in (charge, hourly):
        for r in table.values():
            for kind in ("produced", "consumed"):
                r.setdefault(f"{kind}_records", 0)
                if r.get(f"{kind}_records_unknown"):
                    r[f"{kind}_records"] = None
    return {"chargeback": charge, "topic_hourly": hourly, "api_errors": api, "clients": clients}


BILLED = (
    "requests",
    "produce_requests",
    "fetch_requests",
    "produced_bytes",
    "consumed_bytes",
    "produced_records",
    "consumed_records",
    "produced_records_unknown",
    "consumed_records_unknown",
)


@pytest.mark.parametrize("as_parquet", [False, True], ids=["jsonl", "parquet"])
def test_every_table_matches_an_independent_computation(spark: Any, tmp_path: Path, as_parquet: bool) -> None:
    from kgate.pipeline.tables import report_tables

    events = _fleet()
    _write_inputs(tmp_path / "in", events, as_parquet)
    t = report_tables(tmp_path / "in", spark)
    want = _expected(events)

    got_charge = {
        (str(r["day"]), r["cluster"], r["principal"], r["client_id"], r["topic_name"]): {c: r[c] for c in BILLED}
        for r in t["chargeback"]
    }
    assert got_charge == {k: {c: v.get(c, 0) for c in BILLED} for k, v in want["chargeback"].items()}

    hourly: dict[Any, dict[str, Any]] = defaultdict(lambda: dict.fromkeys(BILLED, 0))
    seen: set[Any] = set()
    for r in t["topic_hourly"]:
        key = (str(r["day"]), int(r["hour"].timestamp() * S), r["cluster"], r["topic_name"])
        assert (key, r["topic_id"]) not in seen  # one row per topic (name and id) and hour
        seen.add((key, r["topic_id"]))
        for c in BILLED:
            hourly[key][c] = None if r[c] is None or hourly[key][c] is None else hourly[key][c] + r[c]
    assert dict(hourly) == {k: {c: v.get(c, 0) for c in BILLED} for k, v in want["topic_hourly"].items()}
    # ids: a name seen by id (Fetch v13) gets that id on every row of it, Produce rows included
    assert all(r["topic_id"] is not None for r in t["topic_hourly"] if r["topic_name"] is not None)

    got_api = {
        (str(r["day"]), r["api_key"], r["error_code"]): {"requests": r["requests"], "outcome": r["outcome"]}
        for r in t["api_errors"]
    }
    assert got_api == {k: dict(v) for k, v in want["api_errors"].items()}

    cols = ("requests", "request_bytes", "errors", "normal_errors")
    got_clients = {(str(r["day"]), r["principal"], r["client_id"]): {c: r[c] for c in cols} for r in t["clients"]}
    assert got_clients == {k: {c: v.get(c, 0) for c in cols} for k, v in want["clients"].items()}

    files = {Path(r["file"]).name: (r["ok"], r["malformed"] + r["unknown_schema"]) for r in t["input_files"]}
    assert sum(ok for ok, _ in files.values()) == len(events)
    assert files["empty.jsonl"] == (0, 0)
    if not as_parquet:
        assert files["a.jsonl"][1] == 2
