"""Known answers: a small hand-made fleet log, every report table checked against it.

The story (T0 = 2025-11-24 16:00 UTC): alice produces to ``orders`` through two kgate instances,
bob consumes it by name and by id; at T0+2h ``orders`` is deleted and recreated (new id NEW), carol
fetches NEW while bob's ``consumer-old`` keeps fetching the old id OLD and gets error 100; dave
sends an id that never resolves; eve is refused ``secret`` by the policy. One file lists its
events newest first (the writer logs in order of completion), one is gzip, and the plain one holds
two malformed lines, a blank line and a line of an unknown schema version.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from .conftest import HOUR, T0, CliRun, event, rows, topic, write_events

S = 1_000_000
DENY = {
    "filter": "topic-policy",
    "decision": "deny",
    "operation": "Read",
    "resource_type": "topic",
    "resource": "secret",
    "error_code": 29,
    "reason": "topic matches deny pattern secret*",
}


def fleet(tmp: Path) -> Path:
    d = tmp / "audit"
    a = [  # kgate-a, written newest first
        event(
            T0 + 2 * HOUR + 30 * S,
            version=13,
            client_id="consumer-old",
            principal="User:bob",
            instance="kgate-a",
            error_code=100,
            topics=[topic("orders", "OLD", status="resolved", errors=[100])],
        ),
        event(
            T0 + 2 * HOUR + 10 * S,
            version=13,
            client_id="consumer-new2",
            principal="User:carol",
            instance="kgate-a",
            topics=[topic("orders", "NEW", status="resolved", bytes=200, records=2)],
        ),
        event(
            T0 + 50 * S,
            api="Metadata",
            version=12,
            client_id="snoop",
            principal="User:eve",
            instance="kgate-a",
            error_code=29,
            latency_us=500,
            topics=[topic("secret", errors=[29])],
            policy=[DENY],
        ),
        event(
            T0 + 20 * S,
            version=12,
            client_id="consumer",
            principal="User:bob",
            instance="kgate-a",
            latency_us=1000,
            topics=[topic("orders", bytes=1500, records=15)],
        ),
        event(
            T0 + 10 * S,
            api="Produce",
            version=9,
            client_id="producer",
            principal="User:alice",
            instance="kgate-a",
            latency_us=2000,
            request_bytes=1100,
            topics=[topic("orders", bytes=1000, records=10)],
        ),
    ]
    write_events(
        d / "kgate-a" / "audit-1.jsonl",
        a,
        extra_lines=["", "this is not json", '{"schema": 1, "time_us": 17', '{"schema": 2, "when": "now"}'],
    )
    b = [
        event(
            T0 + 30 * S,
            version=13,
            client_id="consumer-new",
            principal="User:bob",
            instance="kgate-b",
            topics=[topic("orders", "OLD", status="resolved", bytes=300, records=3)],
        ),
        event(
            T0 + 40 * S,
            version=13,
            client_id="ghost",
            principal="User:dave",
            instance="kgate-b",
            error_code=100,
            latency_us=None,
            response_bytes=None,
            topics=[topic(None, "GHOST", status="unresolved", errors=[100])],
        ),
        event(
            T0 + HOUR + 5 * S,
            api="Produce",
            version=9,
            client_id="producer",
            principal="User:alice",
            instance="kgate-b",
            latency_us=4000,
            request_bytes=600,
            topics=[topic("orders", bytes=500, records=5)],
        ),
        event(
            T0 + 2 * HOUR + 20 * S,
            version=13,
            client_id="consumer-old",
            principal="User:bob",
            instance="kgate-b",
            error_code=100,
            topics=[topic("orders", "OLD", status="resolved", errors=[100])],
        ),
    ]
    write_events(d / "kgate-b" / "audit-0.jsonl.gz", b)
    return d


@pytest.fixture(scope="module")
def tables(fleet_result: Any) -> dict[str, list[dict[str, Any]]]:
    """The fleet's tables as rows (``report_tables``'s form), from the run's one fleet report (conftest)."""
    return rows(fleet_result)


def _one(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, f"{match}: {found}"
    return found[0]


def test_bad_lines_are_counted_per_file_never_fatal(tables: dict[str, list[dict[str, Any]]]) -> None:
    files = {Path(r["file"]).name: r for r in tables["input_files"]}
    assert set(files) == {"audit-1.jsonl", "audit-0.jsonl.gz"}
    plain = files["audit-1.jsonl"]
    assert (plain["lines"], plain["ok"], plain["malformed"], plain["unknown_schema"]) == (8, 5, 2, 1)
    assert plain["unknown_versions"] == "2"
    assert plain["sample"] in {"this is not json", '{"schema": 1, "time_us": 17'}
    gz = files["audit-0.jsonl.gz"]
    assert (gz["lines"], gz["ok"], gz["malformed"], gz["unknown_schema"]) == (4, 4, 0, 0)


def test_topic_hourly(tables: dict[str, list[dict[str, Any]]]) -> None:
    """One row per topic and hour: rows naming the topic without its id (Produce v9, Fetch v12) carry
    the id the name had then (they were rows of their own, id null, beside the Fetch v13 rows)."""
    rows = tables["topic_hourly"]
    assert len(rows) == 6, rows
    assert not [r for r in rows if r["topic_name"] == "orders" and r["topic_id"] is None]
    h0 = _one(rows, topic_name="orders", hour=_hour(T0))
    assert h0["topic_id"] == "OLD"
    assert (h0["requests"], h0["produce_requests"], h0["fetch_requests"], h0["errors"]) == (3, 1, 2, 0)
    assert (h0["produced_bytes"], h0["consumed_bytes"], h0["produced_records"], h0["consumed_records"]) == (
        1000,
        1800,
        10,
        18,
    )
    h1 = _one(rows, topic_name="orders", hour=_hour(T0 + HOUR))
    assert (h1["topic_id"], h1["produced_bytes"], h1["consumed_bytes"], h1["produced_records"]) == ("OLD", 500, 0, 5)
    old = _one(rows, topic_id="OLD", hour=_hour(T0 + 2 * HOUR))
    assert (old["requests"], old["consumed_bytes"], old["errors"]) == (2, 0, 2)
    assert _one(rows, topic_id="NEW")["consumed_bytes"] == 200
    assert _one(rows, topic_id="GHOST")["topic_name"] is None
    assert _one(rows, topic_name="secret")["errors"] == 1
    assert {str(r["day"]) for r in rows} == {"2025-11-24"}


def _hour(us: int) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(us // HOUR * HOUR / S, dt.UTC)


def test_chargeback(tables: dict[str, list[dict[str, Any]]]) -> None:
    """Produced and consumed apart (records once summed both into one column)."""
    rows = tables["chargeback"]
    alice = _one(rows, principal="User:alice", topic_name="orders")
    assert (alice["client_id"], alice["requests"], alice["produce_requests"], alice["fetch_requests"]) == (
        "producer",
        2,
        2,
        0,
    )
    assert (alice["produced_bytes"], alice["consumed_bytes"], alice["produced_records"], alice["consumed_records"]) == (
        1500,
        0,
        15,
        0,
    )
    bob = {r["client_id"]: (r["consumed_bytes"], r["consumed_records"]) for r in rows if r["principal"] == "User:bob"}
    assert bob == {"consumer": (1500, 15), "consumer-new": (300, 3), "consumer-old": (0, 0)}
    carol = _one(rows, principal="User:carol")
    assert (carol["consumed_bytes"], carol["consumed_records"], carol["produced_records"]) == (200, 2, 0)
    assert all(r["produced_records_unknown"] == r["consumed_records_unknown"] == 0 for r in rows)


def test_instances_and_clients(tables: dict[str, list[dict[str, Any]]]) -> None:
    inst = {r["instance"]: r for r in tables["instances"]}
    assert {k: v["requests"] for k, v in inst.items()} == {"kgate-a": 5, "kgate-b": 4}
    assert {k: v["errors"] for k, v in inst.items()} == {"kgate-a": 2, "kgate-b": 2}
    assert inst["kgate-a"]["request_bytes"] == 1100 + 4 * 100
    assert inst["kgate-b"]["response_bytes"] == 3 * 200  # the ghost fetch had no answer
    assert inst["kgate-a"]["first_seen"].timestamp() == (T0 + 10 * S) / S  # ordered by time, not by file
    assert inst["kgate-a"]["last_seen"].timestamp() == (T0 + 2 * HOUR + 30 * S) / S
    alice = _one(tables["clients"], principal="User:alice")
    assert (alice["requests"], alice["request_bytes"], alice["instances"]) == (2, 1700, 2)


def test_latency(tables: dict[str, list[dict[str, Any]]]) -> None:
    produce = _one(tables["latency_api"], api_name="Produce")
    assert (produce["answered"], produce["p50_us"], produce["p99_us"], produce["max_us"]) == (2, 2000, 4000, 4000)
    fetch = _one(tables["latency_api"], api_name="Fetch")
    assert fetch["answered"] == 5  # the unanswered ghost fetch is not a latency
    assert {r["instance"]: r["answered"] for r in tables["latency_instance"]} == {"kgate-a": 5, "kgate-b": 3}


DAY = 24 * HOUR
#: the days of the small stories (carried by the oracle's report, test_oracle): each story on its own
#: day, after the oracle's fleets (2025-11-24 to 29), so none changes another's rows
NORMAL_T0, UNKNOWN_T0, PERCENTILE_T0, PAY_T0 = T0 + 8 * DAY, T0 + 10 * DAY, T0 + 12 * DAY, T0 + 14 * DAY
NORMAL_DAY = dt.date(2025, 12, 2)


@pytest.fixture(scope="module")
def small(oracle_run: Any) -> dict[str, list[dict[str, Any]]]:
    """Four small stories (``small_stories``), in the session's oracle report (conftest ``oracle_run``:
    one Spark run for the oracle's fleets and these stories, not two)."""
    return rows(oracle_run.result)


def small_stories(d: Path) -> Path:
    """Four small stories under ``d`` (cluster ``default``), each on a day of its own: a consumer group's
    normal answers (``NORMAL_T0``, instance kgate-a, client app, topic t), unknown record counts
    (``UNKNOWN_T0``, instance kgate-u, client u-app, topic u), latencies for the percentiles
    (``PERCENTILE_T0``, instance kgate-p, client p-app) and a recreated topic's stale uses (``PAY_T0``,
    ``_recreated_payments``)."""
    join = {"api": "JoinGroup", "key": 11, "version": 9}
    normal = [
        event(NORMAL_T0 + S, **join, error_code=79),
        event(NORMAL_T0 + 2 * S, **join, error_code=0),
        event(NORMAL_T0 + 3 * S, **join, error_code=27),
        event(NORMAL_T0 + 4 * S, **join, error_code=0),
        event(
            NORMAL_T0 + 5 * S,
            api="Produce",
            version=9,
            error_code=6,
            topics=[topic("t", bytes=10, records=1, errors=[6])],
        ),
        event(
            NORMAL_T0 + 6 * S,
            api="Produce",
            version=9,
            error_code=87,
            topics=[topic("t", bytes=10, records=1, errors=[87])],
        ),
        event(NORMAL_T0 + 7 * S, key=12, api="Heartbeat", version=4, error_code=79),  # 79 is no Heartbeat answer
    ]
    u = {"instance": "kgate-u", "client_id": "u-app"}
    unknown = [
        event(UNKNOWN_T0 + S, api="Produce", version=9, **u, topics=[topic("u", bytes=100, records=7)]),
        event(UNKNOWN_T0 + 2 * S, version=12, **u, topics=[topic("u", bytes=500, records=None)]),
        event(UNKNOWN_T0 + 3 * S, version=12, **u, topics=[topic("u", bytes=50, records=4)]),
        event(UNKNOWN_T0 + 4 * S, api="Metadata", version=12, **u, topics=[topic("u")]),  # no records: not unknown
    ]
    p = {"instance": "kgate-p", "client_id": "p-app"}
    latencies = [event(PERCENTILE_T0 + i, api="Metadata", latency_us=v, **p) for i, v in enumerate(LATENCIES)]
    latencies += [
        event(PERCENTILE_T0 + i, api="ApiVersions", key=18, latency_us=v, **p) for i, v in enumerate(WORST_BUCKET)
    ]
    # versions past kgate's codec: a made-up one the broker closed on (no answer), a newer Kafka's answered
    versions = [
        event(UNKNOWN_T0 + 5 * S, api="Produce", version=99, client_id="made-up", error_code=None, latency_us=None),
        event(UNKNOWN_T0 + 6 * S, api="Fetch", version=40, client_id="future"),
        event(UNKNOWN_T0 + 7 * S, api="Fetch", version=12, client_id="future"),
    ]
    write_events(d / "stories" / "audit.jsonl", normal + unknown + latencies + versions)
    _recreated_payments(d)  # d/audit: a.jsonl, b.jsonl.gz
    return d


def test_unknown_record_counts_are_marked_never_summed_as_zero(small: dict[str, list[dict[str, Any]]]) -> None:
    """A Fetch whose record count the audit log could not know (null) makes the group's consumed
    records null and counted in ``consumed_records_unknown``; the known produced count stays exact."""
    row = _one(small["chargeback"], topic_name="u")
    assert (row["produced_records"], row["produced_records_unknown"]) == (7, 0)
    assert (row["consumed_records"], row["consumed_records_unknown"], row["consumed_bytes"]) == (None, 1, 550)
    hourly = _one(small["topic_hourly"], topic_name="u")
    assert (hourly["consumed_records"], hourly["consumed_records_unknown"], hourly["requests"]) == (None, 1, 4)


def test_versions_past_the_codec_count_in_id_adoption_only_when_answered(
    small: dict[str, list[dict[str, Any]]],
) -> None:
    """A Produce v99 the broker closed on is no client on topic ids (it showed as with_ids=1,
    max_produce_version=99: found by a new-user review); a newer Kafka's Fetch it answered is."""
    adoption = {r["client_id"]: r for r in small["id_adoption"]}
    made_up = adoption.get("made-up")
    assert made_up is None or (made_up["with_ids"], made_up["max_produce_version"]) == (0, None), made_up
    future = adoption["future"]
    assert (future["with_ids"], future["fetch_produce"], future["max_fetch_version"]) == (1, 2, 40)


def test_protocol_normal_codes_are_not_failures(small: dict[str, list[dict[str, Any]]]) -> None:
    """A healthy consumer group's JoinGroup rounds (MEMBER_ID_REQUIRED 79, REBALANCE_IN_PROGRESS 27) and
    a leader move (NOT_LEADER_OR_FOLLOWER 6) are normal answers, apart from failures (JoinGroup showed
    50% errors)."""
    outcome = {
        (r["api_name"], r["error_code"]): (r["requests"], r["outcome"])
        for r in small["api_errors"]
        if r["day"] == NORMAL_DAY
    }
    assert outcome == {
        ("JoinGroup", 0): (2, "ok"),
        ("JoinGroup", 79): (1, "normal"),
        ("JoinGroup", 27): (1, "normal"),
        ("Produce", 6): (1, "normal"),
        ("Produce", 87): (1, "failure"),
        ("Heartbeat", 79): (1, "failure"),
    }
    inst = _one(small["instances"], instance="kgate-a", day=NORMAL_DAY)
    assert (inst["errors"], inst["normal_errors"]) == (2, 3)
    client = _one(small["clients"], client_id="app")
    assert (client["errors"], client["normal_errors"]) == (2, 3)
    assert _one(small["topic_hourly"], topic_name="t")["errors"] == 1  # the leader move is not a topic error


def test_api_errors(tables: dict[str, list[dict[str, Any]]]) -> None:
    by = {(r["api_name"], r["error_code"]): r["requests"] for r in tables["api_errors"]}
    assert by == {("Fetch", 0): 3, ("Fetch", 100): 3, ("Produce", 0): 2, ("Metadata", 29): 1}


def test_stale_id_of_a_recreated_topic(tables: dict[str, list[dict[str, Any]]]) -> None:
    stale = tables["stale_ids"]
    assert len(stale) == 1, stale  # consumer-new used OLD before the topic was recreated: not stale
    row = stale[0]
    assert (row["topic_name"], row["topic_id"], row["current_id"]) == ("orders", "OLD", "NEW")
    assert (row["principal"], row["client_id"], row["requests"], row["unknown_id_errors"]) == (
        "User:bob",
        "consumer-old",
        2,
        2,
    )
    assert row["instances"] == "kgate-a,kgate-b"
    history = {r["topic_id"]: r for r in tables["topic_id_history"]}
    assert set(history) == {"OLD", "NEW"}
    assert history["OLD"]["replaced_by"] == "NEW"
    assert history["OLD"]["replaced_at"].timestamp() == (T0 + 2 * HOUR + 10 * S) / S
    assert history["OLD"]["first_unknown_id_error"].timestamp() == (T0 + 2 * HOUR + 20 * S) / S
    assert history["NEW"]["replaced_by"] is None


def test_never_resolved_ids(tables: dict[str, list[dict[str, Any]]]) -> None:
    (row,) = tables["unresolved_ids"]
    assert (row["topic_id"], row["requests"], row["statuses"], row["client_ids"]) == ("GHOST", 1, "unresolved", "ghost")


def test_id_adoption(tables: dict[str, list[dict[str, Any]]]) -> None:
    share = {r["client_id"]: (r["with_ids"], r["fetch_produce"], r["share"]) for r in tables["id_adoption"]}
    assert share == {
        "producer": (0, 2, 0.0),
        "consumer": (0, 1, 0.0),
        "consumer-new": (1, 1, 1.0),
        "consumer-new2": (1, 1, 1.0),
        "consumer-old": (2, 2, 1.0),
        "ghost": (1, 1, 1.0),
    }
    assert _one(tables["id_adoption"], client_id="producer")["max_produce_version"] == 9


def test_policy_denials(tables: dict[str, list[dict[str, Any]]]) -> None:
    (row,) = tables["policy_denials"]
    assert (row["principal"], row["resource_type"], row["resource"], row["denials"], row["client_ids"]) == (
        "User:eve",
        "topic",
        "secret",
        1,
        "snoop",
    )
    assert (row["filter"], row["decision"], row["error_code"]) == ("topic-policy", "deny", 29)


#: ``windowed``'s --since/--until, and where its copy of the payments story starts (T0+1h): all of that
#: copy but lagger's last use (+2h) is inside, so lagger's use groups straddle the newer id's first use
WINDOW_SINCE, WINDOW_UNTIL, WINDOWED_PAY_T0 = T0 + HOUR, T0 + 2 * HOUR + 25 * S, T0 + HOUR


def windowed_inputs(d: Path, fleet_dir: Path) -> list[str]:
    """The inputs of the session's windowed run (conftest ``windowed_run``): the fleet, a copy of the
    payments story (``_recreated_payments``) from T0+1h on instances pay-a and pay-b, and test_cli's
    stale-id story (instance kgate-w, files ``stale-*``)."""
    from .test_cli import stale_story

    pay = _recreated_payments(d / "pay", WINDOWED_PAY_T0, ("pay-a", "pay-b"))
    return [str(fleet_dir), str(pay), str(stale_story(d / "stale"))]


@pytest.fixture(scope="module")
def windowed(windowed_run: CliRun) -> dict[str, list[dict[str, Any]]]:
    """The session's one report with a time window (``windowed_inputs``): what the window does to the
    fleet (test_time_window) and to the exact stale-id pass (test_stale_uses_...)."""
    assert windowed_run.status == 0, windowed_run.err
    return rows(windowed_run.result)


def test_time_window(windowed: dict[str, list[dict[str, Any]]]) -> None:
    fleet = {"kgate-a", "kgate-b"}  # the payments copy is on pay-a and pay-b, its files a.jsonl and b.jsonl.gz
    # produce at +1h, carol and the first stale fetch
    assert sum(r["requests"] for r in windowed["instances"] if r["instance"] in fleet) == 3
    # the input is still read (and checked) whole
    assert sum(r["lines"] for r in windowed["input_files"] if Path(r["file"]).name.startswith("audit-")) == 12


#: Metadata latencies: the last two round into one bucket (3 significant digits)
LATENCIES = [1_500, 1_502, 2_007_939, 2_004_001]
#: ApiVersions latencies in one bucket (1,010): p50 is exactly 1,005, reported 1,014 (+0.9%)
WORST_BUCKET = [1_005, 1_014]


def test_percentiles_are_observed_latencies_never_above_the_max(small: dict[str, list[dict[str, Any]]]) -> None:
    """Latencies above 1 ms share rounded buckets; a percentile is the largest value seen in its bucket,
    so it never exceeds the maximum (an end-to-end run once reported p99 2,010,000 over a max of 2,007,939)."""
    day = _day(PERCENTILE_T0)
    row = _one(small["latency_api"], api_name="Metadata", day=day)
    # the documented bound (docs/pipeline.md): never below the exact order statistic, less than 1% above
    # (the docs said 0.5%, which this case breaks)
    worst = WORST_BUCKET
    p50 = _one(small["latency_api"], api_name="ApiVersions", day=day)["p50_us"]
    assert worst[0] <= p50 < worst[0] * 1.01
    assert p50 > worst[0] * 1.005
    assert row["max_us"] == 2_007_939
    assert 0 < row["p50_us"] <= row["p95_us"] <= row["p99_us"] <= row["max_us"]
    assert (row["p50_us"], row["p99_us"]) == (1_502, 2_007_939)


def _day(us: int) -> dt.date:
    return dt.datetime.fromtimestamp(us / S, dt.UTC).date()


def _recreated_payments(tmp: Path, t0: int = PAY_T0, instances: tuple[str, str] = ("kgate-a", "kgate-b")) -> Path:
    """``payments`` recreated at t0+1h (id P2 first seen then); ``lagger`` keeps using the old id P1
    *without errors* across that moment on two instances, so each of its use groups (per client,
    instance and day) has uses before and after: the roll-up's first/last use cannot tell how many are
    stale, the exact second pass must. ``early`` used P1 only before, ``late`` only after (T included).
    From ``t0`` (``PAY_T0`` by default, apart from the other small stories) on ``instances`` (A, B)."""
    p1, p2 = "Pay1AAAAAAAAAAAAAAAAAA", "Pay2AAAAAAAAAAAAAAAAAA"
    a1, a2 = "Aud1AAAAAAAAAAAAAAAAAA", "Aud2AAAAAAAAAAAAAAAAAA"

    def use(t: int, client: str, inst: str, tid: str, name: str = "payments") -> dict[str, Any]:
        return event(
            t,
            version=13,
            client_id=client,
            principal="User:frank",
            instance=inst,
            topics=[topic(name, tid, status="resolved", bytes=10, records=1)],
        )

    ia, ib = instances
    d = tmp / "audit"
    write_events(
        d / "a.jsonl",
        [
            use(t0 + 2 * HOUR, "lagger", ia, p1),  # written newest first
            use(t0 + HOUR + 5 * S, "lagger", ia, p1),
            use(t0 + HOUR, "carol", ia, p2),  # the new id appears: T
            use(t0 + 20 * S, "early", ia, p1),
            use(t0 + 10 * S, "lagger", ia, p1),
            use(t0 + 3 * HOUR, "slow", ia, a1, "audits"),  # audits: A2 at t0+1h, slow on A1 only after
            use(t0 + HOUR, "carol", ia, a2, "audits"),
            use(t0 + 5 * S, "slow", ia, a1, "audits"),
        ],
    )
    write_events(
        d / "b.jsonl.gz",
        [
            use(t0 + 30 * S, "lagger", ib, p1),
            use(t0 + HOUR, "lagger", ib, p1),  # exactly at T: stale (at or after)
            use(t0 + 3 * HOUR, "late", ib, p1),
        ],
    )
    return d


def test_stale_uses_across_the_recreation_are_counted_exactly(
    small: dict[str, list[dict[str, Any]]], windowed: dict[str, list[dict[str, Any]]]
) -> None:
    """Only the uses at or after the newer id's first appearance are stale, even when the same client and
    instance used the old id before it too (a use group straddling that moment: counted again exactly)."""
    # the other small stories have no ids; the oracle's fleets are on clusters of their own
    stale = {(r["topic_name"], r["client_id"]): r for r in small["stale_ids"] if r["cluster"] == "default"}
    assert set(stale) == {("payments", "lagger"), ("payments", "late"), ("audits", "slow")}
    lag = stale["payments", "lagger"]
    assert (lag["topic_id"], lag["current_id"], lag["requests"], lag["unknown_id_errors"]) == (
        "Pay1AAAAAAAAAAAAAAAAAA",
        "Pay2AAAAAAAAAAAAAAAAAA",
        3,
        0,
    )
    assert lag["instances"] == "kgate-a,kgate-b"
    assert (lag["first_seen"].timestamp(), lag["last_seen"].timestamp()) == (
        (PAY_T0 + HOUR) / S,
        (PAY_T0 + 2 * HOUR) / S,
    )
    assert (stale["payments", "late"]["requests"], stale["payments", "late"]["instances"]) == (1, "kgate-b")
    slow = stale["audits", "slow"]  # a group wholly after its T: settled by the roll-up alone
    assert (slow["requests"], slow["first_seen"].timestamp()) == (1, (PAY_T0 + 3 * HOUR) / S)

    # the exact pass honours the window like the roll-up: in the windowed run's copy of the story (from
    # T0+1h, on pay-a and pay-b), lagger's +2h use is outside it
    (lag,) = [r for r in windowed["stale_ids"] if r["client_id"] == "lagger"]
    assert (lag["requests"], lag["instances"]) == (2, "pay-a,pay-b")
    assert lag["last_seen"].timestamp() == (WINDOWED_PAY_T0 + HOUR + 5 * S) / S


def test_each_grain_comes_back_from_the_shared_slots_with_its_own_types(spark: Any, fleet_dir: Path) -> None:
    """The roll-up keeps every grain's keys and measures in shared slots (strings, longs); a table must
    still see its grain's own column types (dates, timestamps, ints, booleans), or the Parquet tables'
    schemas would change with the roll-up's layout."""
    from kgate.pipeline import ingest, reports

    roll = reports.merge(ingest.read_partials(spark, ingest.resolve_inputs([str(fleet_dir)])))
    spark_types = {
        "string": "string",
        "long": "bigint",
        "int": "int",
        "date": "date",
        "timestamp": "timestamp",
        "boolean": "boolean",
    }
    for name, keys in reports.SETS.items():
        measures = reports.MEASURES[name]
        got = reports.part(roll, name, measures[0][0]).dtypes
        want = [(k, spark_types[reports.KEY_TYPES[k]]) for k in keys] + [(c, spark_types[t]) for c, *_, t in measures]
        assert got == want, name
    hours = {r["hour"].hour for r in reports.part(roll, "topic_hour", "topic_rows").collect()}
    assert hours == {16, 17, 18}  # timestamps back from their µs slot, in the session's UTC
    uses: dict[tuple[str, bool], int] = {}
    for r in reports.part(roll, "id_use", "id_uses").collect():
        uses[(r["client_id"], r["id_gone"])] = uses.get((r["client_id"], r["id_gone"]), 0) + r["id_uses"]
    assert uses == {
        ("consumer-old", True): 2,
        ("consumer-new2", False): 1,
        ("consumer-new", False): 1,
        ("ghost", True): 1,
    }  # booleans back from their long slot
