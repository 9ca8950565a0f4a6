"""The map side of the roll-up: audit files to partial aggregates per grain, in Arrow, per Spark task.

The roll-up (:mod:`kgate.pipeline.reports`) is one aggregation of every grain (:data:`~kgate.pipeline.reports.SETS`),
its keys and measures in shared slots (:data:`~kgate.pipeline.reports.SLOTS`). Since the measures are
sums, maxima and minima, it splits exactly into a map side (aggregate what one task read) and a
merge (aggregate the partial aggregates). This module is the map side: a Spark task receives whole
files (Spark's ``binaryFile`` source), decodes them with Arrow (:mod:`kgate.pipeline.decode`),
computes every grain's keys and values over a block of lines with Arrow and NumPy kernels, groups
each grain with Arrow's hash aggregation, and combines the partials of all its files before handing
them back. A task's partials are far fewer rows than its lines (a topic and hour, a client and
topic, an instance and HyperLogLog register...), so Spark's own shuffle and merge are small.

Measured at 10M events on 2 cores (docs/performance.md): this replaced Spark's JSON reader plus a
code-generated aggregation of every line (~14 µs of CPU per event).

The rules are those documented in :mod:`kgate.pipeline.reports` and docs/pipeline.md. Which lines a
grain counts: ``files`` every line; ``client``, ``instance`` and ``latency`` every in-report event
(status ok, inside the window); ``topic_hour`` and ``charge`` every (in-report event, topic) row;
``id_use`` those topic rows that carry an id. Everything here is pure (no Spark), so tests call it
directly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import FETCH, PRODUCE, ApiKey
from kgate.pipeline import decode
from kgate.pipeline.decode import BadLine
from kgate.pipeline.outcomes import normal_mask
from kgate.pipeline.reports import (
    ALL_SLOTS,
    FIRST_ID_VERSION,
    GRAINS,
    HLL_P,
    KNOWN_VERSION,
    MEASURES,
    SETS,
    SLOTS,
)
from kgate.pipeline.schema import MALFORMED, OK, SCHEMA_VERSION, UNKNOWN_SCHEMA
from kgate.pipeline.window import ALL_TIME, GONE_ID_ERRORS, Window

DAY_US, HOUR_US, MINUTE_US = 86_400_000_000, 3_600_000_000, 60_000_000
#: A grain's partial rows are combined (re-aggregated) when they pass this many; rows per task stay
#: bounded by the grain's distinct keys, not by the lines read.
COMBINE_ROWS = 1_000_000


def output_schema() -> pa.Schema:
    """The roll-up's columns: ``gid`` and every slot, keys as strings or longs, measures as longs."""
    fields = [pa.field("gid", pa.int32())]
    fields += [pa.field(s, pa.string() if s.startswith("ks") else pa.int64()) for s in ALL_SLOTS]
    return pa.schema(fields)


_OUT = output_schema()
#: A single use of a topic id (the exact pass): the id-use grain's keys without ``id_gone``, and its time.
USES_SCHEMA = pa.schema(
    [
        pa.field(k, pa.int64() if k == "day" else pa.string())
        for k in ("day", "cluster", "topic_name", "topic_id", "name_status", "principal", "client_id", "instance")
    ]
    + [pa.field("time_us", pa.int64())]
)
_AGG = {"sum": "sum", "max": "max", "min": "min"}


def _kind(slot: str) -> str:
    return slot.rstrip("0123456789")


_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)


def _hash64(addresses: pa.Array) -> np.ndarray:
    """A 64-bit hash per address, for the HyperLogLog of distinct client addresses.

    FNV-1a over the UTF-8 bytes, then MurmurHash3's 64-bit finalizer so every output bit depends on
    every input bit (the estimate takes its register from the low bits and its rank from the high
    ones). Vectorized over the block with NumPy, one step per byte position: addresses carry their
    port, so nearly every one is distinct and hashing the distinct values one by one in Python
    (BLAKE2b) cost ~1.2 µs per event. Stable across processes and machines (Python's ``hash`` is
    salted per process); a missing address hashes like the empty string.
    """
    a = pc.fill_null(addresses.cast(pa.string()), "")
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    n = len(a)
    offsets = np.frombuffer(a.buffers()[1], dtype=np.int32, count=n + 1, offset=a.offset * 4)
    data = np.frombuffer(a.buffers()[2], dtype=np.uint8) if a.buffers()[2] is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    active = np.arange(n)
    j = 0
    while True:
        active = active[lengths[active] > j]
        if not len(active):
            break
        h[active] = (h[active] ^ data[starts[active] + j].astype(np.uint64)) * _FNV_PRIME
        j += 1
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


def _rho(h: np.ndarray) -> np.ndarray:
    """HyperLogLog rank of each hash's top ``64 - HLL_P`` bits: leading zeros + 1 (``width + 1`` for zero)."""
    width = 64 - HLL_P
    rest = h >> np.uint64(HLL_P)
    # exponent of the float is floor(log2) + 1, exact for integers below 2**53 (rest < 2**52)
    bits = np.frexp(rest.astype(np.float64))[1].astype(np.int64)
    return np.where(rest == 0, width + 1, width - (bits - 1)).astype(np.int64)


def lat_bucket(latency: pa.Array) -> pa.Array:
    """A latency rounded half-up to three significant digits (exact below 1,000 µs); null stays null."""
    valid = latency.is_valid().to_numpy(zero_copy_only=False)
    c = latency.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    out = c.copy()
    for digits in range(4, 19):
        q = 10 ** (digits - 3)
        band = (c >= 10 ** (digits - 1)) & (c < 10**digits)
        out[band] = (c[band] + q // 2) // q * q
    return pa.array(out, mask=~valid)


def _nz(a: pa.Array) -> np.ndarray:
    return a.fill_null(0).to_numpy(zero_copy_only=False)


def _policy_json(policy: pa.Array) -> pa.Array:
    """The refusals of an event as one JSON string (the client grain's key), null when there are none.

    Rare (only refused exchanges carry any), so built in Python; field order and separators are
    fixed, so the same refusals always give the same key.
    """
    lengths = pc.list_value_length(policy).fill_null(0).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(lengths > 0)
    out: list[str | None] = [None] * len(policy)
    for i in rows:
        # null fields left out, as Spark's to_json wrote them; a null entry stays null (one denial row
        # with empty keys, as before)
        entries = [None if e is None else {k: v for k, v in e.items() if v is not None} for e in policy[int(i)].as_py()]
        out[i] = json.dumps(entries, separators=(",", ":"))
    return pa.array(out, pa.string())


class Partials:
    """The partial roll-up of one task: feed it files, take its rows once at the end."""

    def __init__(self, window: Window = ALL_TIME, uses_of: Iterable[str] | None = None) -> None:
        """``uses_of``: instead of the roll-up, collect the single uses of these topic ids (the
        stale-id report's exact second pass; :data:`USES_SCHEMA`)."""
        self.window = window
        self.uses_of = None if uses_of is None else sorted(set(uses_of))
        self._needles = [i.encode() for i in self.uses_of or ()] + [b"\\u"]  # an escape could spell an id
        self._uses: list[pa.Table] = []
        self._parts: dict[str, list[pa.Table]] = {g: [] for g in GRAINS}
        self._rows: dict[str, int] = dict.fromkeys(GRAINS, 0)
        self._file_rows = 0  # ``files`` rows added so far: tells an empty file

    # -- feeding --------------------------------------------------------------------------------

    def add_file(self, path: str, content: bytes) -> None:
        """Every line of one file (gzip, bzip2 or zstd by name), bad lines and a damaged stream included.
        A file without a line is listed too (one ``files`` row of 0 lines), so every input is in the table."""
        before = self._file_rows
        if decode.is_parquet(path):
            self._add_parquet(path, content)
        else:
            self._add_lines(path, content)
        if self._file_rows == before and self.uses_of is None:
            self._group(
                "files",
                pa.table(
                    {
                        "file": pa.array([path], pa.string()),
                        "status": pa.array([OK], pa.string()),
                        "schema": pa.nulls(1, pa.int64()),
                        "sample": pa.nulls(1, pa.string()),
                        "lines": pa.array([0], pa.int64()),
                        "entries": pa.array([1], pa.int64()),
                    }
                ),
            )

    def _add_parquet(self, path: str, content: bytes) -> None:
        """An audit file written as Parquet (``format: parquet``): its row groups, already typed. A file
        that is not Parquet or lacks the schema's columns counts as one malformed line."""
        try:
            for t in decode.parquet_tables(content):
                self.add_events(path, t)
        except decode.Truncated as exc:
            self._add_files_rows(path, [BadLine(MALFORMED, None, f"<{exc}>")])

    def _add_lines(self, path: str, content: bytes) -> None:
        try:
            inflated = decode.inflate_other(path, content)
            if inflated is not None:
                content = inflated
            for block in decode.blocks(content, inflated is None and decode.is_gzip(path)):
                self.add_block(path, block)
        except decode.Truncated as exc:
            self._add_files_rows(path, [BadLine(MALFORMED, None, f"<{exc}>")])

    def add_block(self, path: str, block: bytes) -> None:
        if self.uses_of is not None and not any(n in block for n in self._needles):
            return  # no line here can name one of the ids: not even parsed
        tables, bad = decode.parse_block(block)
        for t in tables:
            self.add_events(path, t)
        if bad and self.uses_of is None:
            self._add_files_rows(path, bad)

    def _add_files_rows(self, path: str, bad: list[BadLine]) -> None:
        t = pa.table(
            {
                "file": pa.array([path] * len(bad), pa.string()),
                "status": pa.array([b.status for b in bad], pa.string()),
                "schema": pa.array([b.schema for b in bad], pa.int64()),
                "sample": pa.array([b.sample for b in bad], pa.string()),
                "lines": pa.array(np.ones(len(bad), dtype=np.int64)),
                "entries": pa.array(np.ones(len(bad), dtype=np.int64)),
            }
        )
        self._group("files", t)

    def add_events(self, path: str, t: pa.Table) -> None:
        """One parsed block (:func:`kgate.pipeline.schema.event_schema` columns): every grain's keys and values."""
        n = t.num_rows
        if n == 0:
            return
        col = {name: t.column(name).combine_chunks() for name in t.column_names}
        client, api = col["client"], col["api"]
        version = col["schema"]
        required = [col["time_us"], col["instance"], _child(api, "key"), _child(api, "version"), col["request_bytes"]]
        required_ok = np.ones(n, dtype=bool)
        for r in required:
            required_ok &= r.is_valid().to_numpy(zero_copy_only=False)
        v = version.fill_null(-1).to_numpy(zero_copy_only=False)
        has_v = version.is_valid().to_numpy(zero_copy_only=False)
        # status as in the contract: schema 1 with every required field -> ok; schema 1 without -> malformed;
        # another schema number -> unknown_schema; no schema -> malformed
        is_ok = has_v & (v == SCHEMA_VERSION) & required_ok
        unknown = has_v & (v != SCHEMA_VERSION)
        status = np.where(is_ok, OK, np.where(unknown, UNKNOWN_SCHEMA, MALFORMED))
        if self.uses_of is None:
            self._group(
                "files",
                pa.table(
                    {
                        "file": pa.array(np.full(n, path, dtype=object), pa.string()),
                        "status": pa.array(status, pa.string()),
                        "schema": pa.array(v, pa.int64(), mask=~has_v),
                        "sample": pa.nulls(n, pa.string()),
                        "lines": pa.array(np.ones(n, dtype=np.int64)),
                        "entries": pa.array(np.ones(n, dtype=np.int64)),
                    }
                ),
            )

        us = _nz(col["time_us"]).astype(np.int64)
        in_report = is_ok.copy()
        if self.window.since_us is not None:
            in_report &= us >= self.window.since_us
        if self.window.until_us is not None:
            in_report &= us < self.window.until_us
        if not in_report.any():
            return
        keep = pa.array(in_report)
        if not in_report.all():
            t = t.filter(keep)
            col = {name: t.column(name).combine_chunks() for name in t.column_names}
            client, api = col["client"], col["api"]
            us = us[in_report]
        n = t.num_rows
        self._events(n, col, client, api, us)

    def _events(self, n: int, col: dict[str, Any], client: Any, api: Any, us: np.ndarray) -> None:
        fetch, produce = FETCH, PRODUCE
        key = _nz(_child(api, "key")).astype(np.int64)
        version = _nz(_child(api, "version")).astype(np.int64)
        is_fetch, is_produce = key == fetch, key == produce
        day = us // DAY_US
        hour = us // HOUR_US * HOUR_US
        h = _hash64(_child(client, "address"))
        error = col["error_code"]
        code = _nz(error).astype(np.int64)
        answered_error = error.is_valid().to_numpy(zero_copy_only=False) & (code != int(ErrorCode.NONE))
        normal = answered_error & normal_mask(key, code)
        errors = (answered_error & ~normal).astype(np.int64)
        latency = col["latency_us"]
        one = np.ones(n, dtype=np.int64)
        # the id-adoption counts: a version past the codec's only where the broker answered it
        # (reports.KNOWN_VERSION)
        answered = latency.is_valid().to_numpy(zero_copy_only=False)
        fetches = is_fetch & (answered | (version <= KNOWN_VERSION[ApiKey.FETCH]))
        produces = is_produce & (answered | (version <= KNOWN_VERSION[ApiKey.PRODUCE]))
        with_ids = (fetches & (version >= FIRST_ID_VERSION[ApiKey.FETCH])) | (
            produces & (version >= FIRST_ID_VERSION[ApiKey.PRODUCE])
        )
        policy = _policy_json(col["policy"]) if self.uses_of is None else pa.nulls(n, pa.string())
        ev: dict[str, Any] = {
            "day": day,
            "hour": hour,
            "cluster": col["cluster"],
            "instance": col["instance"],
            "principal": _child(client, "principal"),
            "client_id": _child(client, "id"),
            "api_key": key,
            "api_name": _child(api, "name"),
            "error_code": error.cast(pa.int64()),
            "policy": policy,
            "hll_bucket": (h & np.uint64((1 << HLL_P) - 1)).astype(np.int64),
            "lat_bucket": lat_bucket(latency),
        }
        values: dict[str, Any] = {
            "one": one,
            "request_bytes": col["request_bytes"],
            "response_bytes": col["response_bytes"],
            "errors": errors,
            "normal_errors": normal.astype(np.int64),
            "time_us": us,
            "fetch_produce": (fetches | produces).astype(np.int64),
            "with_ids": with_ids.astype(np.int64),
            "fetch_version": pa.array(version, mask=~fetches),
            "produce_version": pa.array(version, mask=~produces),
            "rho": _rho(h),
            "answered": latency.is_valid().cast(pa.int64()),
            "latency": latency,
            "policy_events": policy.is_valid().cast(pa.int64()),
        }
        if self.uses_of is None:
            for grain in ("client", "instance", "latency"):
                self._group(grain, self._grain_table(grain, ev, values))

        topics = col["topics"]
        flat = pc.list_flatten(topics)
        if len(flat) == 0:
            return
        parent = pc.list_parent_indices(topics).to_numpy(zero_copy_only=False)
        tb = _child(flat, "bytes")
        codes = _child(flat, "error_codes")
        failed, gone = _code_flags(codes, key[parent])
        tev = {
            k: (v[parent] if isinstance(v, np.ndarray) else v.take(pa.array(parent)))
            for k, v in ev.items()
            if k in ("day", "hour", "cluster", "principal", "client_id", "instance")
        }
        tev.update(
            {
                "minute": us[parent] // MINUTE_US * MINUTE_US,
                "topic_name": _child(flat, "name"),
                "topic_id": _child(flat, "id"),
                "name_status": _child(flat, "name_status"),
                "id_gone": gone,
            }
        )
        pk = key[parent]
        tp, tf = pk == produce, pk == fetch
        records = _child(flat, "records")
        # unknown: record bytes went through but their count is null (no bytes: nothing to count)
        no_count = ~records.is_valid().to_numpy(zero_copy_only=False) & (_nz(tb) > 0)
        nothing = pa.nulls(len(tb), pa.int64())
        # what the broker stored of a Produce topic entry: its failed partitions taken out (records
        # unknown where a failed count is: the sum is then marked, never guessed)
        fb = _child(flat, "failed_bytes")
        stored_bytes = pc.subtract(tb, pc.fill_null(fb, 0))
        stored_records = pc.if_else(fb.is_valid(), pc.subtract(records, _child(flat, "failed_records")), records)
        stored_unknown = ~stored_records.is_valid().to_numpy(zero_copy_only=False) & (_nz(stored_bytes) > 0)
        tvalues: dict[str, Any] = {
            "one": np.ones(len(parent), dtype=np.int64),
            "is_produce": tp.astype(np.int64),
            "is_fetch": tf.astype(np.int64),
            "produced_bytes": pc.if_else(pa.array(tp), stored_bytes, nothing),
            "consumed_bytes": pc.if_else(pa.array(tf), tb, nothing),
            "produced_records": pc.if_else(pa.array(tp), stored_records, nothing),
            "consumed_records": pc.if_else(pa.array(tf), records, nothing),
            "produced_unknown": (tp & stored_unknown).astype(np.int64),
            "consumed_unknown": (tf & no_count).astype(np.int64),
            "topic_errors": failed.astype(np.int64),
            "time_us": us[parent],
            "record_bytes": tb,
        }
        if self.uses_of is not None:
            # the exact pass: single uses of the candidate ids, without a gone-id error (docs/pipeline.md)
            wanted = pc.and_(pc.is_in(_child(flat, "id"), pa.array(self.uses_of, pa.string())), pa.array(gone == 0))
            tev["time_us"] = tvalues["time_us"]
            self._uses.append(pa.table({c: _arr(tev[c]) for c in USES_SCHEMA.names}).filter(wanted))
            return
        self._group("topic_hour", self._grain_table("topic_hour", tev, tvalues))
        self._group("charge", self._grain_table("charge", tev, tvalues))
        self._group("traffic", self._grain_table("traffic", tev, tvalues))
        with_id = _child(flat, "id").is_valid()
        if pc.any(with_id).as_py():
            use = self._grain_table("id_use", tev, tvalues)
            self._group("id_use", use.filter(with_id))

    @staticmethod
    def _grain_table(grain: str, keys: dict[str, Any], values: dict[str, Any]) -> pa.Table:
        """Grain ``grain``'s columns under their slot names: keys, then a column per measure."""
        slots = SLOTS[grain]
        cols: dict[str, Any] = {}
        for k in SETS[grain]:
            cols[slots[k]] = keys[k]
        for name, _agg, value, _type in MEASURES[grain]:
            cols[slots[name]] = values[value]
        return pa.table({s: _arr(c) for s, c in cols.items()})

    # -- aggregation ----------------------------------------------------------------------------

    def _group(self, grain: str, t: pa.Table) -> None:
        slots = SLOTS[grain]
        if grain == "files":  # plain column names (the other grains arrive under their slot names)
            t = t.rename_columns([slots[c] for c in t.column_names])
            self._file_rows += t.num_rows
        for k in SETS[grain]:
            s = slots[k]
            if not s.startswith("ks") and t.schema.field(s).type != pa.int64():
                t = t.set_column(t.schema.get_field_index(s), s, t.column(s).cast(pa.int64()))
        # Blocks are kept as they are and aggregated together once they pass COMBINE_ROWS rows: one
        # block (~18,000 events) hardly collapses (a client and topic, an address's register), so
        # grouping each block first only added a pass.
        self._parts[grain].append(t)
        self._rows[grain] += t.num_rows
        if self._rows[grain] > COMBINE_ROWS:
            combined = _aggregate(grain, pa.concat_tables(self._parts[grain]))
            self._parts[grain] = [combined]
            self._rows[grain] = combined.num_rows

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every grain's combined partials, in the roll-up's columns (``gid`` and every slot); or the
        single uses (:data:`USES_SCHEMA`) when made with ``uses_of``."""
        if self.uses_of is not None:
            for t in self._uses:
                yield from t.cast(USES_SCHEMA).to_batches()
            return
        for gid, grain in enumerate(GRAINS):
            parts = self._parts[grain]
            if not parts:
                continue
            t = _aggregate(grain, pa.concat_tables(parts))
            n = t.num_rows
            cols = [pa.array(np.full(n, gid, dtype=np.int32))]
            for field in _OUT:
                if field.name == "gid":
                    continue
                cols.append(
                    t.column(field.name).cast(field.type) if field.name in t.column_names else pa.nulls(n, field.type)
                )
            yield from pa.Table.from_arrays(cols, schema=_OUT).to_batches(max_chunksize=100_000)


def _child(struct: Any, name: str) -> pa.Array:
    """A struct's field, null wherever the struct itself is null (``StructArray.field`` ignores that)."""
    return pc.struct_field(struct, name)


def _arr(c: Any) -> pa.Array | pa.ChunkedArray:
    return c if isinstance(c, pa.Array | pa.ChunkedArray) else pa.array(c)


def _code_flags(codes: pa.Array, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per topic row (of an exchange with api key ``keys[row]``): any answer code that is a failure
    (not 0 and not normal for the api, :mod:`kgate.pipeline.outcomes`; a null code counts, as Spark's
    ``array_remove`` left it), and what its codes say of the id: 1 UNKNOWN_TOPIC_ID (gone), 2 only
    UNKNOWN_TOPIC_OR_PARTITION (gone, or a passing answer on a live topic: weighed by
    :func:`kgate.pipeline.reports._id_uses`), 0 neither."""
    n = len(codes)
    values = pc.list_flatten(codes)
    if len(values) == 0:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    parent = pc.list_parent_indices(codes).to_numpy(zero_copy_only=False)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    v = _nz(values)
    failed = np.bincount(parent, weights=(~valid | ((v != 0) & ~normal_mask(keys[parent], v))), minlength=n) > 0
    unknown_id = np.bincount(parent, weights=(valid & (v == GONE_ID_ERRORS[0])), minlength=n) > 0
    unknown_topic = np.bincount(parent, weights=(valid & (v == GONE_ID_ERRORS[1])), minlength=n) > 0
    return failed, np.where(unknown_id, 1, np.where(unknown_topic, 2, 0)).astype(np.int64)


def _aggregate(grain: str, t: pa.Table) -> pa.Table:
    """Group ``t`` (slot columns of one grain) by its key slots; sum, max or min each measure slot."""
    slots = SLOTS[grain]
    keys = [slots[k] for k in SETS[grain]]
    measures = [slots[m] for m, _a, _v, _t in MEASURES[grain]]
    out = t.group_by(keys, use_threads=False).aggregate([(m, _AGG[_kind(m)]) for m in measures])
    return out.rename_columns([c.rsplit("_", 1)[0] if c not in keys else c for c in out.column_names])


def run_task(
    batches: Iterable[pa.RecordBatch],
    window: Window = ALL_TIME,
    uses_of: Iterable[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: ``path``/``content`` rows of whole files in, partial roll-up out
    (or single uses of the ids ``uses_of``)."""
    partials = Partials(window, uses_of)
    for batch in batches:
        paths = batch.column("path").to_pylist()
        contents = batch.column("content")
        for i, path in enumerate(paths):
            partials.add_file(path, contents[i].as_py() or b"")
    yield from partials.batches()
