"""An oracle: a generated hostile fleet log with known answers, the report's tables against an
independent computation, for both audit formats (JSON lines and the audit log's Parquet).

The log (seeded, ~3,000 events over two days, two clusters, three instances) has what real fleets
have and the easy cases do not: events out of time order within a file, null principals and client
ids, unicode names, topics named by id only, record counts the audit log could not know (null with
record bytes), unanswered exchanges (null error code, latency and response bytes), protocol-normal
answer codes beside failures, an empty file, bad lines, and a gzip file. The expected tables are
computed independently from the same event dicts, never through Spark or the pipeline's code: the
billing tables in plain Python, every other table by DuckDB (SQL over an Arrow table of the events),
the topic-id tables in plain Python by the documented rules, then compared row by row. Latency
percentiles are checked against the exact order statistic (the rank ``ceil(p x answered)``) with the
documented bound; distinct client addresses (a HyperLogLog) against the exact count.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import random
from collections import Counter, defaultdict
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
                tcode = 0 if by_id and code == 3 else code  # an id's lone code 3 is weighed by a rule of its own
                nbytes = rng.choice([0, rng.randrange(1, 50_000)]) if key in (0, 1) else None
                records = None if key == 3 else (None if rng.random() < 0.03 else rng.randrange(0, 400))
                errors = [] if tcode is None else [tcode]
                failed = None
                if key == 0 and tcode and nbytes is not None:
                    # a Produce answer that failed partitions: all of them, or some (then a part of the
                    # bytes and records, or records the writer could not match: null)
                    if rng.random() < 0.5:
                        failed = (nbytes, records)
                    else:
                        errors = [0, tcode]
                        lost = None if records is None or rng.random() < 0.1 else rng.randint(0, records)
                        failed = (rng.randint(0, nbytes), lost)
                topics.append(
                    topic(
                        name,
                        ids[name] if by_id else None,
                        status="resolved" if by_id else "given",
                        bytes=nbytes,
                        records=records,
                        errors=errors,
                        failed=failed,
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
                policy=[
                    {
                        "filter": "topic-policy",
                        "decision": "deny",
                        "operation": rng.choice(["Describe", "Write"]),
                        "resource_type": "topic",
                        "resource": rng.choice(["secret", "ßecret"]),
                        "error_code": 29,
                        "reason": "denied",
                    }
                ]
                if key == 3 and rng.random() < 0.1
                else None,
            )
        )
    # a topic deleted and recreated at T0 + 30 h: app-1 moves to the new id; kliënt keeps fetching the old
    # one without an error (stale by recency), app-2 gets UNKNOWN_TOPIC_ID (stale, gone); and an id that
    # never resolves to a name
    remade = T0 + 30 * HOUR
    for i in range(60):
        t = T0 + 20 * HOUR + i * 900 * S
        old_after = t >= remade
        out.append(
            event(
                t,
                api="Fetch",
                key=1,
                version=13,
                client_id="kliënt",
                cluster="east",
                topics=[topic("re-made", "OLDOLDOLDOLDOLDOLDOLD0", status="resolved", bytes=10, records=1)],
            )
        )
        if old_after:
            out.append(
                event(
                    t + S,
                    api="Fetch",
                    key=1,
                    version=13,
                    client_id="app-1",
                    cluster="east",
                    topics=[topic("re-made", "NEWNEWNEWNEWNEWNEWNEW0", status="resolved", bytes=5, records=1)],
                )
            )
            out.append(
                event(
                    t + 2 * S,
                    api="Fetch",
                    key=1,
                    version=13,
                    client_id="app-2",
                    cluster="east",
                    instance="kgate-b",
                    error_code=100,
                    topics=[topic("re-made", "OLDOLDOLDOLDOLDOLDOLD0", status="resolved", errors=[100])],
                )
            )
    out.append(
        event(
            T0 + 5 * HOUR,
            api="Fetch",
            key=1,
            version=13,
            client_id=None,
            cluster="west",
            topics=[topic(None, "GHOSTGHOSTGHOSTGHOST00", status="unresolved", errors=[100])],
        )
    )
    return out


def _damaged_gzip(path: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` gzipped into ``path`` and cut off two thirds of the way (a copy cut short); returns
    the events a reader can still get: every whole line before the cut, found with :mod:`zlib`
    (never the pipeline's decoder)."""
    import zlib

    whole = gzip.compress(b"".join(json.dumps(e).encode() + b"\n" for e in events))
    cut = whole[: len(whole) * 2 // 3]
    path.write_bytes(cut)
    text = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)
    return events[: text.count(b"\n")]


def _without_failed(t: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in t.items() if k not in ("failed_bytes", "failed_records")}


def _old_writer_parquet(path: Path, events: list[dict[str, Any]]) -> None:
    """``events`` as Parquet in the event schema before topics[] had failed_bytes/failed_records."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kgate.pipeline.schema import event_schema

    schema = event_schema()
    i = schema.get_field_index("topics")
    entry = schema.field(i).type.value_type
    older = pa.struct([f for f in entry if f.name not in ("failed_bytes", "failed_records")])
    schema = schema.set(i, pa.field("topics", pa.list_(older)))
    pq.write_table(pa.Table.from_pylist(events, schema=schema), path, compression="zstd")


def _write_inputs(d: Path, events: list[dict[str, Any]], as_parquet: bool) -> list[dict[str, Any]]:
    """Three files per instance-ish split; bad lines, an empty file and (JSON lines) a gzip file cut
    short beside them. Returns the events the report must count (those of the damaged file that
    can still be read included)."""
    d.mkdir(parents=True)
    thirds = [events[0::3], events[1::3], events[2::3]]
    if as_parquet:
        from kgate.filters.builtin.audit.parquet import convert_file

        for n, part in enumerate(thirds[:2]):
            hidden = d / f".kgate-audit-{n}.jsonl"
            hidden.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for e in reversed(part)))
            convert_file(hidden)
        # an older writer's file: its topics lack failed_bytes / failed_records (added 2026-11-27), which
        # read as null: what it wrote is billed as before
        old = [{**e, "topics": [_without_failed(t) for t in e["topics"]]} for e in thirds[2]]
        _old_writer_parquet(d / "kgate-audit-old.parquet", old)
        events = thirds[0] + thirds[1] + old
        (d / "broken.parquet").write_bytes(b"PAR1 not really")  # counted as one malformed line, never fatal
    else:
        write_events(d / "a.jsonl", list(reversed(thirds[0])), extra_lines=["garbage", '{"schema": 9}'])
        write_events(d / "b.jsonl.gz", thirds[1])
        with gzip.open(d / "c.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(e) + "\n" for e in thirds[2])
        extra = [{**e, "time_us": e["time_us"] + 1, "client": {**e["client"], "id": "cut-short"}} for e in events[:400]]
        events = events + _damaged_gzip(d / "damaged.jsonl.gz", extra)
    (d / "empty.jsonl").write_text("")
    return events


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
                    nbytes, records = tp["bytes"] or 0, tp["records"]
                    if "failed_bytes" in tp:  # a Produce's failed partitions: not stored, not billed
                        nbytes -= tp["failed_bytes"]
                        lost = tp["failed_records"]
                        records = None if records is None or lost is None else records - lost
                    r[f"{kind}_bytes"] += nbytes
                    if records is None and nbytes > 0:
                        r[f"{kind}_records_unknown"] += 1
                    r[f"{kind}_records"] += records or 0
    for table in (charge, hourly):
        for r in table.values():
            for kind in ("produced", "consumed"):
                r.setdefault(f"{kind}_records", 0)
                if r.get(f"{kind}_records_unknown"):
                    r[f"{kind}_records"] = None
    return {"chargeback": charge, "topic_hourly": hourly, "api_errors": api, "clients": clients}


def _duck(events: list[dict[str, Any]]) -> Any:
    """A DuckDB connection holding the events (``ev``, the v1 schema as an Arrow table) and the
    protocol-normal codes (``normal``: the documented list, as data)."""
    duckdb = pytest.importorskip("duckdb", reason="duckdb is a test dependency (pip install -e '.[test]')")
    import pyarrow as pa

    from kgate.pipeline.outcomes import ANY_API, PER_API
    from kgate.pipeline.schema import event_schema

    con = duckdb.connect()
    ev = pa.Table.from_pylist(events, schema=event_schema())  # noqa: F841  (DuckDB reads it by name)
    con.execute(
        "CREATE TABLE e AS SELECT *, make_date(1970, 1, 1) + CAST(time_us // 86400000000 AS INTEGER) AS day FROM ev"
    )
    pairs = [(k, c) for k in range(100) for c in ANY_API] + [(k, c) for k, cs in PER_API.items() for c in cs]
    con.execute("CREATE TABLE normal (api_key INTEGER, code INTEGER)")
    con.executemany("INSERT INTO normal VALUES (?, ?)", pairs)
    con.execute(
        "CREATE VIEW x AS SELECT e.*, error_code IS NOT NULL AND error_code <> 0 AND n.code IS NOT NULL "
        "AS is_normal, error_code IS NOT NULL AND error_code <> 0 AND n.code IS NULL AS is_failure FROM e "
        "LEFT JOIN normal n ON n.api_key = e.api.key AND n.code = e.error_code"
    )
    return con


def _naive(v: Any) -> Any:
    """A time from Spark (UTC, aware) compared with one from DuckDB (UTC, naive)."""
    return v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v


def _rows(con: Any, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _keyed(rows: list[dict[str, Any]], keys: tuple[str, ...], cols: tuple[str, ...]) -> dict[Any, dict[str, Any]]:
    out = {tuple(str(r[k]) if k == "day" else r[k] for k in keys): {c: r[c] for c in cols} for r in rows}
    assert len(out) == len(rows), "duplicate keys"
    return out


def _check_duckdb_tables(t: dict[str, list[dict[str, Any]]], events: list[dict[str, Any]]) -> None:
    """clients, instances, api_errors, id_adoption, policy_denials and both latency tables against DuckDB."""
    con = _duck(events)
    cols = ("requests", "request_bytes", "response_bytes", "errors", "normal_errors", "instances")
    want = _rows(
        con,
        "SELECT day, client.principal AS principal, client.id AS client_id, count(*) AS requests, "
        "sum(request_bytes) AS request_bytes, coalesce(sum(response_bytes), 0) AS response_bytes, "
        "count(*) FILTER (is_failure) AS errors, count(*) FILTER (is_normal) AS normal_errors, "
        "count(DISTINCT instance) AS instances FROM x GROUP BY ALL",
    )
    keys = ("day", "principal", "client_id")
    assert _keyed(t["clients"], keys, cols) == _keyed(want, keys, cols)

    cols = (
        "requests",
        "request_bytes",
        "response_bytes",
        "errors",
        "normal_errors",
        "client_ids",
        "first_seen",
        "last_seen",
    )
    want = _rows(
        con,
        "SELECT day, instance, count(*) AS requests, sum(request_bytes) AS request_bytes, "
        "coalesce(sum(response_bytes), 0) AS response_bytes, count(*) FILTER (is_failure) AS errors, "
        "count(*) FILTER (is_normal) AS normal_errors, count(DISTINCT client.id) AS client_ids, "
        "make_timestamp(min(time_us)) AS first_seen, make_timestamp(max(time_us)) AS last_seen, "
        "count(DISTINCT client.address) AS addresses FROM x GROUP BY ALL",
    )
    got = {(str(r["day"]), r["instance"]): r for r in t["instances"]}
    assert set(got) == {(str(r["day"]), r["instance"]) for r in want}
    for w in want:
        g = got[(str(w["day"]), w["instance"])]
        assert {c: _naive(g[c]) for c in cols} == {c: w[c] for c in cols}
        # HyperLogLog, 4,096 registers, in its linear-counting range here: within 3 standard errors
        # (sqrt(m (e^t - t - 1)) for t = n / m: ~1.1% at 500 addresses)
        n, m = w["addresses"], 4096
        assert abs(g["client_addresses"] - n) <= 1 + 3 * math.sqrt(m * (math.exp(n / m) - n / m - 1)), (g, w)

    cols = ("requests", "outcome")
    want = _rows(
        con,
        "SELECT day, api.key AS api_key, api.name AS api_name, error_code, count(*) AS requests, "
        "CASE WHEN error_code = 0 THEN 'ok' WHEN bool_or(is_normal) THEN 'normal' "
        "WHEN error_code IS NOT NULL THEN 'failure' END AS outcome FROM x "
        "GROUP BY day, api.key, api.name, error_code",
    )
    keys = ("day", "api_key", "api_name", "error_code")
    assert _keyed(t["api_errors"], keys, cols) == _keyed(want, keys, cols)

    cols = ("fetch_produce", "with_ids", "max_fetch_version", "max_produce_version", "share")
    want = _rows(
        con,
        "SELECT day, client.principal AS principal, client.id AS client_id, count(*) AS fetch_produce, "
        "count(*) FILTER (api.version >= 13) AS with_ids, max(api.version) FILTER (api.key = 1) "
        "AS max_fetch_version, max(api.version) FILTER (api.key = 0) AS max_produce_version, "
        "round(count(*) FILTER (api.version >= 13) / count(*), 4) AS share FROM x "
        # a version past Kafka 4.3.1's (Fetch 18, Produce 13) counts only where the broker answered it
        "WHERE api.key IN (0, 1) AND (latency_us IS NOT NULL OR api.version <= CASE api.key WHEN 1 THEN 18 "
        "ELSE 13 END) GROUP BY ALL",
    )
    keys = ("day", "principal", "client_id")
    assert _keyed(t["id_adoption"], keys, cols) == _keyed(want, keys, cols)

    cols = ("denials", "client_ids", "first_seen", "last_seen")
    want = _rows(
        con,
        "SELECT day, client.principal AS principal, p.resource_type, p.resource, p.operation, "
        "p.filter, p.decision, p.error_code, count(*) AS denials, "
        "string_agg(DISTINCT coalesce(client.id, ''), ',' ORDER BY coalesce(client.id, '')) "
        "AS client_ids, "
        "make_timestamp(min(time_us)) AS first_seen, make_timestamp(max(time_us)) AS last_seen "
        "FROM (SELECT *, unnest(policy) AS p FROM x WHERE len(policy) > 0) GROUP BY ALL",
    )
    keys = ("day", "principal", "resource_type", "resource", "operation", "filter", "decision", "error_code")
    got_p = {k: {c: _naive(v[c]) for c in cols} for k, v in _keyed(t["policy_denials"], keys, cols).items()}
    assert got_p == _keyed(want, keys, cols)
    assert got_p, "the fleet has denials"

    for table, group in (("latency_api", "api.key AS api_key, api.name AS api_name"), ("latency_instance", "instance")):
        want = _rows(
            con,
            f"SELECT day, {group}, count(latency_us) AS answered, max(latency_us) AS max_us, "
            f"avg(latency_us) AS mean_us, list(latency_us ORDER BY latency_us) FILTER "
            f"(latency_us IS NOT NULL) AS values FROM x WHERE latency_us IS NOT NULL GROUP BY ALL",
        )
        keys = ("day", "api_key", "api_name") if table == "latency_api" else ("day", "instance")
        got = _keyed(t[table], keys, ("answered", "max_us", "mean_us", "p50_us", "p95_us", "p99_us"))
        assert set(got) == set(_keyed(want, keys, ()))
        for w in want:
            g = got[tuple(str(w[k]) if k == "day" else w[k] for k in keys)]
            assert (g["answered"], g["max_us"]) == (w["answered"], w["max_us"])
            assert g["mean_us"] == pytest.approx(w["mean_us"], rel=1e-12)
            values = w["values"]
            for p, col in ((0.5, "p50_us"), (0.95, "p95_us"), (0.99, "p99_us")):
                exact = values[math.ceil(p * len(values)) - 1]
                # the documented bound: an observed latency, never below the exact order statistic and
                # less than 1% above it (exact below 1,000 µs)
                assert g[col] in values, (g, p, exact)
                assert exact <= g[col] < exact * 1.01 + (0 if exact >= 1000 else 1), (g, p, exact)
                if exact < 1000:
                    assert g[col] == exact


def _check_id_tables(t: dict[str, list[dict[str, Any]]], events: list[dict[str, Any]]) -> None:
    """topic_id_history, unresolved_ids and stale_ids by the documented rules, in plain Python (the fleet
    answers by-id uses with 0 or 100 only, so UNKNOWN_TOPIC_OR_PARTITION's own rule does not arise)."""
    uses = [(e, tp) for e in events for tp in e["topics"] if tp["id"] is not None]
    first: dict[Any, int] = {}
    for e, tp in uses:
        if tp["name"] is not None:
            k = (e["cluster"], tp["name"], tp["id"])
            first[k] = min(first.get(k, e["time_us"]), e["time_us"])
    newest: dict[Any, tuple[int, str]] = {}
    for (cluster, name, tid), us in first.items():
        newest[(cluster, name)] = max(newest.get((cluster, name), (us, tid)), (us, tid))
    hist: dict[Any, dict[str, Any]] = {}
    for e, tp in uses:
        if tp["name"] is None:
            continue
        k = (e["cluster"], tp["name"], tp["id"])
        h = hist.setdefault(k, {"requests": 0, "first": e["time_us"], "last": e["time_us"], "gone": None})
        h["requests"] += 1
        h["first"], h["last"] = min(h["first"], e["time_us"]), max(h["last"], e["time_us"])
        if 100 in (tp["error_codes"] or []):
            h["gone"] = e["time_us"] if h["gone"] is None else min(h["gone"], e["time_us"])
    got = {(r["cluster"], r["topic_name"], r["topic_id"]): r for r in t["topic_id_history"]}
    assert set(got) == set(hist)
    for k, h in hist.items():
        g = got[k]
        new_us, new_id = newest[k[:2]]
        replaced = new_id if new_id != k[2] else None
        assert (g["requests"], g["first_seen"].timestamp() * S, g["last_seen"].timestamp() * S, g["replaced_by"]) == (
            h["requests"],
            h["first"],
            h["last"],
            replaced,
        ), (k, g, h)
        assert (g["replaced_at"] and g["replaced_at"].timestamp() * S) == (new_us if replaced else None)
        assert (g["first_unknown_id_error"] and g["first_unknown_id_error"].timestamp() * S) == h["gone"]

    resolved = {
        (e["cluster"], tp["id"])
        for e, tp in uses
        if tp["name"] is not None and tp["name_status"] in ("given", "resolved")
    }
    never = [(e, tp) for e, tp in uses if (e["cluster"], tp["id"]) not in resolved]
    got_never = [
        (r["cluster"], r["topic_id"], r["requests"], r["statuses"], r["client_ids"]) for r in t["unresolved_ids"]
    ]
    counts = Counter((e["cluster"], tp["id"]) for e, tp in never)
    want_never = sorted((c, i, n, "unresolved", "") for (c, i), n in counts.items())
    # one ghost per copy of the fleet: cluster west, and the Parquet copy's west-pq
    assert [r[:2] for r in want_never] == [("west", "GHOSTGHOSTGHOSTGHOST00"), ("west-pq", "GHOSTGHOSTGHOSTGHOST00")]
    assert sorted(got_never) == want_never

    stale: dict[Any, dict[str, Any]] = {}
    for e, tp in uses:
        if tp["name"] is None:
            continue
        new_us, new_id = newest[(e["cluster"], tp["name"])]
        gone = 100 in (tp["error_codes"] or [])
        if not gone and not (new_id != tp["id"] and e["time_us"] >= new_us):
            continue
        k = (_day(e["time_us"]), e["cluster"], tp["name"], tp["id"], e["client"]["principal"], e["client"]["id"])
        r = stale.setdefault(
            k,
            {
                "requests": 0,
                "unknown_id_errors": 0,
                "instances": set(),
                "current_id": new_id if new_id != tp["id"] else None,
            },
        )
        r["requests"] += 1
        r["unknown_id_errors"] += gone
        r["instances"].add(e["instance"])
    want_stale = {k: {**v, "instances": ",".join(sorted(v["instances"]))} for k, v in stale.items()}
    got_stale = {
        (str(r["day"]), r["cluster"], r["topic_name"], r["topic_id"], r["principal"], r["client_id"]): {
            c: r[c] for c in ("requests", "unknown_id_errors", "instances", "current_id")
        }
        for r in t["stale_ids"]
    }
    assert got_stale == want_stale
    assert any(v["unknown_id_errors"] == 0 for v in want_stale.values())  # stale by recency


def _day(us: int) -> str:
    return str(dt.datetime.fromtimestamp(us / S, dt.UTC).date())


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


#: the Parquet copy of the fleet: days later and clusters renamed (``east-pq``, ``west-pq``), so every
#: table keeps the two formats' rows apart (a format's miscount shows on its own rows)
PARQUET_DAYS, PARQUET_CLUSTER = 3, "-pq"


def oracle_inputs(d: Path) -> list[dict[str, Any]]:
    """The oracle's inputs under ``d`` (conftest ``oracle_run``): the fleet as JSON lines (``jsonl/``),
    another seed's fleet as the audit log's Parquet on later days and clusters of its own
    (``parquet/``), and test_reports' small stories (``stories/``, ``audit/``, cluster ``default``,
    later still). Returns the events a report must count, the stories' read back from their files."""
    from .test_reports import small_stories

    moved = [
        {**e, "time_us": e["time_us"] + PARQUET_DAYS * DAY, "cluster": e["cluster"] + PARQUET_CLUSTER}
        for e in _fleet(seed=27)
    ]
    events = _write_inputs(d / "jsonl", _fleet(), as_parquet=False)
    events += _write_inputs(d / "parquet", moved, as_parquet=True)
    small_stories(d)
    for path in sorted([*d.glob("stories/*"), *d.glob("audit/*")]):
        opened = gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)
        with opened as f:
            events += [json.loads(line) for line in f if line.strip()]
    return events


def test_every_table_matches_an_independent_computation(oracle_run: Any) -> None:
    """Both audit formats in one report (one Spark run, not one per format; a fleet mid-migration has
    both), with test_reports' small stories beside them (``oracle_inputs``)."""
    from kgate.pipeline.tables import PROBLEMS

    events = oracle_run.events
    t = {name: table.to_pylist() for name, table in oracle_run.result.tables.items()}
    t[PROBLEMS] = oracle_run.result.problems.to_pylist()
    want = _expected(events)
    assert {r["cluster"] for r in t["chargeback"]} == {"east", "west", "east-pq", "west-pq", "default"}

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
    # ids: a name seen by id (Fetch v13) gets that id on every row of it, Produce rows included (the
    # small stories' names t and u are never seen by id)
    by_id = {(e["cluster"], tp["name"]) for e in events for tp in e["topics"] if tp["id"] and tp["name"]}
    assert {n for c, n in by_id if c == "east"} >= {"orders", "pay-ments", "re-made"}
    assert all(r["topic_id"] is not None for r in t["topic_hourly"] if (r["cluster"], r["topic_name"]) in by_id)

    got_api = {
        (str(r["day"]), r["api_key"], r["error_code"]): {"requests": r["requests"], "outcome": r["outcome"]}
        for r in t["api_errors"]
    }
    assert got_api == {k: dict(v) for k, v in want["api_errors"].items()}

    cols = ("requests", "request_bytes", "errors", "normal_errors")
    got_clients = {(str(r["day"]), r["principal"], r["client_id"]): {c: r[c] for c in cols} for r in t["clients"]}
    assert got_clients == {k: {c: v.get(c, 0) for c in cols} for k, v in want["clients"].items()}

    _check_duckdb_tables(t, events)
    _check_id_tables(t, events)

    files = {
        (Path(r["file"]).parent.name, Path(r["file"]).name): (r["ok"], r["malformed"] + r["unknown_schema"])
        for r in t["input_files"]
    }
    assert sum(ok for ok, _ in files.values()) == len(events)
    assert files["jsonl", "empty.jsonl"] == files["parquet", "empty.jsonl"] == (0, 0)
    assert files["parquet", "broken.parquet"] == (0, 1)
    assert sum(ok for (d, _), (ok, _) in files.items() if d == "parquet") == sum(
        e["cluster"].endswith(PARQUET_CLUSTER) for e in events
    )
    assert files["jsonl", "a.jsonl"][1] == 2
    # the damaged gzip: its readable lines counted, the damage one malformed line
    readable = sum(1 for e in events if e["client"]["id"] == "cut-short")
    assert 0 < readable < 400
    assert files["jsonl", "damaged.jsonl.gz"] == (readable, 1)


def test_parquet_reaches_the_roll_up_without_a_python_worker(spark: Any, tmp_path: Path) -> None:
    """Parquet audit files are read by Spark's own Parquet reader and rolled up in SQL expressions:
    no ``mapInArrow`` (nor any Python UDF) in the plan; JSON lines still take the Python map side.
    (Only the plans are built: nothing runs.)"""
    from kgate.pipeline import ingest

    d = tmp_path / "in"
    _write_inputs(d, _fleet()[:30], as_parquet=True)
    parquet = [str(p) for p in d.glob("*.parquet") if p.name != "broken.parquet"]
    write_events(tmp_path / "a.jsonl", _fleet()[:5])

    def plan(paths: list[str]) -> str:
        return str(ingest.read_partials(spark, paths)._jdf.queryExecution().executedPlan().toString())

    native = plan(parquet)
    assert "FileScan parquet" in native
    assert "MapInArrow" not in native, native
    assert "Python" not in native, native
    assert "ArrowEval" not in native, native
    assert "MapInArrow" in plan([str(tmp_path / "a.jsonl")])
