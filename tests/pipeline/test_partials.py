"""The roll-up's map side without Spark: decoding audit bytes with Arrow, bad lines, damaged gzip,
the address hash behind the HyperLogLog, latency buckets, and partial aggregates that merge exactly."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow", reason="the pipeline's extra (pyarrow) is not installed")

from kgate.pipeline import decode  # noqa: E402
from kgate.pipeline.partials import Partials, _hash64, lat_bucket  # noqa: E402
from kgate.pipeline.reports import GRAINS, SLOTS  # noqa: E402
from kgate.pipeline.schema import MALFORMED, UNKNOWN_SCHEMA  # noqa: E402

from .conftest import T0, event, topic  # noqa: E402


def _lines(*objs: Any) -> bytes:
    return b"".join((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n" for o in objs)


def test_a_block_with_bad_lines_keeps_every_good_line_and_names_each_bad_one() -> None:
    good = [event(T0 + i) for i in range(40)]
    bad = [
        b"not json",
        b'{"schema": 1, "time_us": "soon"}',
        b"[1, 2]",
        b'{"schema": 2, "time_us": "a v2 field of another type"}',
        b'{"schema": 1, "time_us": 1.5}',
    ]
    block = _lines(*good[:10], bad[0], *good[10:20], bad[1], b"", b"   ", bad[2], *good[20:], bad[3], bad[4])
    tables, found = decode.parse_block(block)
    assert sum(t.num_rows for t in tables) == 40
    times = [x for t in tables for x in t.column("time_us").to_pylist()]
    assert times == [T0 + i for i in range(40)]  # in order, none lost around the bad ones
    assert sorted((b.sample, b.status, b.schema or 0) for b in found) == sorted(
        [
            ("not json", MALFORMED, 0),
            (bad[1].decode(), MALFORMED, 1),
            ("[1, 2]", MALFORMED, 0),
            (bad[3].decode(), UNKNOWN_SCHEMA, 2),
            (bad[4].decode(), MALFORMED, 1),
        ]
    )


def test_lines_arrow_cannot_take_as_they_are() -> None:
    """``null`` (Arrow's reader crashes the process on it), invalid UTF-8 (Arrow would pass it into
    the reports), two values on a line, ``\\r`` line ends, and what kgate's writer escapes as lone
    surrogates (kept, as U+FFFD) or a key given twice (the last value, as Spark's reader took it)."""
    good = [event(T0 + i) for i in range(30)]
    surrogate = json.dumps(
        {**event(T0 + 100), "client": {"address": "a", "id": "x\udc80y", "principal": None}}
    ).encode()
    twice = json.dumps(event(T0 + 101))[:-1].encode() + b', "instance": "last"}'
    block = (
        b"\r".join(
            [
                b"null",
                *(json.dumps(e).encode() for e in good[:10]),
                b'{"schema": 1, "instance": "\xff"}',
                *(json.dumps(e).encode() for e in good[10:20]),
                json.dumps(good[20]).encode() + b" " + b"{}",
                *(json.dumps(e).encode() for e in good[21:]),
                surrogate,
                twice,
            ]
        )
        + b"\r"
    )
    tables, found = decode.parse_block(block)
    rows = [r for t in tables for r in t.to_pylist()]
    assert sorted(r["time_us"] for r in rows) == sorted([T0 + i for i in range(30) if i != 20] + [T0 + 100, T0 + 101])
    assert {r["client"]["id"] for r in rows if r["time_us"] == T0 + 100} == {"x\ufffdy"}
    assert {r["instance"] for r in rows if r["time_us"] == T0 + 101} == {"last"}
    assert sorted(b.sample[:6] for b in found) == sorted(["null", '{"sche', '{"sche'])
    assert all(b.status == MALFORMED for b in found)


def test_a_long_bad_line_keeps_only_a_sample() -> None:
    (_, [bad]) = decode.parse_block(b"x" * 100_000)
    assert bad.status == MALFORMED
    assert bad.sample == "x" * decode.SAMPLE_CHARS


def test_gzip_members_are_read_one_after_another() -> None:
    a, b = _lines(event(T0)), _lines(event(T0 + 1), event(T0 + 2))
    data = gzip.compress(a) + gzip.compress(b)  # what `cat a.gz b.gz` makes
    assert b"".join(decode.blocks(data, gzipped=True)) == a + b


def test_a_damaged_gzip_file_keeps_the_lines_before_the_damage() -> None:
    lines = _lines(*[event(T0 + i, topics=[topic("orders", bytes=10)]) for i in range(5000)])
    data = gzip.compress(lines)
    cut = data[: len(data) // 2]
    parts: list[bytes] = []
    with pytest.raises(decode.Truncated):
        parts.extend(decode.blocks(cut, gzipped=True, block_bytes=64 << 10))  # keeps what came before the raise
    got = b"".join(parts)
    assert got
    assert lines.startswith(got)
    assert got.endswith(b"\n")

    p = Partials()
    p.add_file("/x/cut.jsonl.gz", cut)
    files = pa.Table.from_batches(list(p.batches())).filter(pa.compute.equal(pa.compute.field("gid"), 0))
    slots = SLOTS["files"]
    by_status = {r[slots["status"]]: r[slots["lines"]] for r in files.to_pylist()}
    assert by_status["ok"] == got.count(b"\n")
    assert by_status[MALFORMED] == 1
    sample = next(r[slots["sample"]] for r in files.to_pylist() if r[slots["status"]] == MALFORMED)
    assert "gzip" in sample


def test_plain_blocks_end_on_line_boundaries() -> None:
    data = _lines(*[event(T0 + i) for i in range(3000)])
    blocks = list(decode.blocks(data, gzipped=False, block_bytes=50_000))
    assert len(blocks) > 5
    assert b"".join(blocks) == data
    assert all(b.endswith(b"\n") for b in blocks)


def test_the_address_hash_is_stable_and_spreads_well_enough_for_the_hyperloglog() -> None:
    addrs = pa.array([f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:{40000 + i % 7}" for i in range(200_000)])
    h = _hash64(addrs)
    assert (h == _hash64(addrs)).all()
    assert len(set(h.tolist())) == 200_000
    assert _hash64(pa.array([None], pa.string()))[0] == _hash64(pa.array([""]))[0]
    # registers and ranks as the roll-up takes them: the estimate of 200,000 distinct is within 3%
    from kgate.pipeline.partials import _rho
    from kgate.pipeline.reports import HLL_P

    m = 1 << HLL_P
    regs = [0] * m
    for b, r in zip((h & (m - 1)).tolist(), _rho(h).tolist(), strict=True):
        regs[b] = max(regs[b], r)
    alpha = 0.7213 / (1 + 1.079 / m)
    estimate = alpha * m * m / sum(2.0**-r for r in regs)
    assert abs(estimate - 200_000) / 200_000 < 0.03


def test_latency_buckets_round_half_up_to_three_significant_digits() -> None:
    got = lat_bucket(pa.array([0, 999, 1234, 1235, 99_949, 99_950, None], pa.int64())).to_pylist()
    assert got == [0, 999, 1230, 1240, 99_900, 100_000, None]


def test_partials_combined_across_blocks_equal_one_aggregation() -> None:
    """Blocks aggregated apart and combined must give what one aggregation over every line gives."""
    events = [
        event(
            T0 + i * 1000,
            client_id=f"c{i % 7}",
            latency_us=100 + i % 13,
            topics=[topic(f"t{i % 5}", bytes=i, records=1)],
        )
        for i in range(3000)
    ]
    whole, split = Partials(), Partials()
    raw = _lines(*events)
    whole.add_block("/f", raw)
    for block in decode.blocks(raw, gzipped=False, block_bytes=20_000):
        split.add_block("/f", block)
    import pyarrow.compute as pc

    def rows(p: Partials) -> list[tuple[Any, ...]]:
        t = pa.Table.from_batches(list(p.batches()))
        return sorted(tuple(r.values()) for r in t.to_pylist())

    from kgate.pipeline import partials as mod

    old = mod.COMBINE_ROWS
    mod.COMBINE_ROWS = 500  # force several combines
    try:
        split2 = Partials()
        for block in decode.blocks(raw, gzipped=False, block_bytes=20_000):
            split2.add_block("/f", block)
    finally:
        mod.COMBINE_ROWS = old
    assert rows(whole) == rows(split) == rows(split2)
    t = pa.Table.from_batches(list(whole.batches()))
    client = t.filter(pc.equal(t["gid"], GRAINS.index("client")))
    assert sum(client[SLOTS["client"]["events"]].to_pylist()) == 3000


def test_null_objects_count_as_missing_fields() -> None:
    """``"api": null`` is a missing required field (malformed); ``"client": null`` only leaves the
    client's fields empty; a null entry in ``topics`` is a topic row without a name."""
    ok = {**event(T0, topics=[topic("orders", bytes=5)]), "client": None}
    ok["topics"].append(None)
    p = Partials()
    p.add_block("/f", _lines({**event(T0), "api": None}, ok))
    t = pa.Table.from_batches(list(p.batches()))

    def grain(name: str) -> list[dict[str, Any]]:
        rows = t.filter(pa.compute.equal(t["gid"], GRAINS.index(name))).to_pylist()
        return [{c: r[s] for c, s in SLOTS[name].items()} for r in rows]

    assert sorted((r["status"], r["lines"]) for r in grain("files")) == [(MALFORMED, 1), ("ok", 1)]
    (client,) = grain("client")
    assert (client["principal"], client["client_id"], client["events"]) == (None, None, 1)
    assert sorted((r["topic_name"] or "", r["topic_rows"]) for r in grain("topic_hour")) == [("", 1), ("orders", 1)]


def test_a_line_longer_than_a_block_stays_whole() -> None:
    long_line = json.dumps({**event(T0), "cluster": "c" * 300_000}).encode()
    data = gzip.compress(_lines(event(T0 + 1)) + long_line + b"\n" + _lines(event(T0 + 2)))
    blocks = list(decode.blocks(data, gzipped=True, block_bytes=64 << 10))
    assert b"".join(blocks) == gzip.decompress(data)
    assert all(b.endswith(b"\n") for b in blocks)
    assert any(long_line in b for b in blocks)


def test_bzip2_and_zstd_files_are_read_by_name() -> None:
    import bz2

    lines = _lines(*[event(T0 + i) for i in range(100)])
    for name, data in (
        ("/a.jsonl.bz2", bz2.compress(lines)),
        ("/a.jsonl.zst", pa.compress(lines, "zstd", asbytes=True)),
        ("/a.jsonl.gz", gzip.compress(lines)),
        ("/a.jsonl", lines),
    ):
        p = Partials()
        p.add_file(name, data)
        t = pa.Table.from_batches(list(p.batches()))
        files = t.filter(pa.compute.equal(t["gid"], 0)).to_pylist()
        assert [(r[SLOTS["files"]["status"]], r[SLOTS["files"]["lines"]]) for r in files] == [("ok", 100)], name


def test_a_null_policy_entry_still_makes_a_denial_row_key() -> None:
    p = Partials()
    p.add_block("/f", _lines({**event(T0), "policy": [None]}))
    t = pa.Table.from_batches(list(p.batches()))
    (client,) = t.filter(pa.compute.equal(t["gid"], GRAINS.index("client"))).to_pylist()
    assert client[SLOTS["client"]["policy"]] == "[null]"
    assert client[SLOTS["client"]["policy_events"]] == 1


def test_parquet_audit_files_roll_up_like_their_json_lines(tmp_path: Any) -> None:
    """The same events as JSON lines and as the audit log's Parquet (``format: parquet``, written by
    the filter's converter) give the same partial roll-up but for the file name; a file that is not
    Parquet counts as one malformed line."""
    from kgate.filters.builtin.audit.parquet import convert_file

    events = [
        event(
            T0 + i * 1_000_000,
            api="Produce" if i % 3 else "Fetch",
            version=9 + i % 5,
            client_id=f"c{i % 4}",
            topics=[topic(f"t{i % 2}", bytes=100 + i, records=None if i == 7 else i)],
        )
        for i in range(50)
    ]
    hidden = tmp_path / ".kgate-audit-x.jsonl"
    hidden.write_bytes(_lines(*events))
    parquet = convert_file(hidden)

    def rolled(path: str, content: bytes) -> list[dict[str, Any]]:
        p = Partials()
        p.add_file(path, content)
        rows = [r for b in p.batches() for r in pa.Table.from_batches([b]).to_pylist()]
        for r in rows:
            if r["gid"] == GRAINS.index("files"):
                r.pop(SLOTS["files"]["file"])
        return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))

    assert rolled("a.parquet", parquet.read_bytes()) == rolled("a.jsonl", _lines(*events))
    p = Partials()
    p.add_file("broken.parquet", b"PAR1 not really")
    (row,) = [r for b in p.batches() for r in pa.Table.from_batches([b]).to_pylist()]
    assert row[SLOTS["files"]["status"]] == MALFORMED
    assert row[SLOTS["files"]["lines"]] == 1
