"""Cross-check our decoder against kio (an independent Kafka protocol implementation).

For every corpus frame both decoders must consume the same number of bytes and yield the same
field values. Normalisation (all of it on kio's side, to compare like with like):

* kio models ``*_ms`` durations/timestamps as ``timedelta``/``datetime`` and drops the ``_ms``
  suffix from the field name: converted back to integer milliseconds and matched to ``<name>_ms``.
* kio maps a timestamp of -1 to ``None`` (e.g. Produce ``log_append_time_ms``): ``None`` -> -1.
* kio maps the all-zero uuid to ``None``; we use ``UUID(int=0)``.
* kio's error codes are ``ErrorCode`` enums and arrays are tuples: ints and lists.
* kio's classes are per version and only hold the fields of that version; ours hold every
  field of the api (absent ones keep defaults), so only kio's fields are compared. Every kio
  field must exist on our side.
* ``records`` are compared as bytes (ours is a memoryview).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import typing
import uuid

import pytest
from codec_support import CORPUS_DIR, KAFKA43_CORPUS_DIR, KAFKA_CORPUS_DIR, corpus_rows, load_frame, row_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hypothesis_roundtrip import struct_strategy  # the codec's own random-message strategy

from kgate.codec import api
from kgate.codec.schema import Struct

kio_serial = pytest.importorskip("kio.serial")
kio_index = pytest.importorskip("kio.index")

# the Tansu corpus where ../shared is present, and the Kafka 4.0.2 and 4.3.1 corpora (in the
# repository) always
TANSU_ROWS = corpus_rows() if (CORPUS_DIR / "index.jsonl").is_file() else []
ROWS = TANSU_ROWS + corpus_rows(KAFKA_CORPUS_DIR) + corpus_rows(KAFKA43_CORPUS_DIR)
ZERO = uuid.UUID(int=0)


def _norm_kio(v, field_type=None):
    if dataclasses.is_dataclass(v):
        return {f.name: _norm_kio(getattr(v, f.name), f.metadata.get("kafka_type")) for f in dataclasses.fields(v)}
    if isinstance(v, tuple):
        return [_norm_kio(x, field_type) for x in v]
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)
    if isinstance(v, datetime.datetime):
        return round(v.timestamp() * 1000)
    if v is None and field_type in ("datetime_i64", "timedelta_i64", "timedelta_i32"):
        return -1
    if v is None and field_type == "uuid":
        return ZERO
    if isinstance(v, enum.Enum):
        return v.value
    return v


def _norm_ours(v):
    if isinstance(v, Struct):
        return {f.name: _norm_ours(getattr(v, f.name)) for f in v._FIELDS}
    if isinstance(v, list):
        return [_norm_ours(x) for x in v]
    if isinstance(v, memoryview):
        return bytes(v)
    return v


def _compare(kio_val, ours, path, problems):
    if isinstance(kio_val, dict):
        assert isinstance(ours, dict), path
        for key, kv in kio_val.items():
            if key in ours:
                ok = key
            elif key + "_ms" in ours:
                ok = key + "_ms"
            else:
                problems.append(f"{path}.{key}: field missing on our side")
                continue
            _compare(kv, ours[ok], f"{path}.{ok}", problems)
    elif isinstance(kio_val, list):
        if not isinstance(ours, list) or len(ours) != len(kio_val):
            problems.append(f"{path}: {kio_val!r:.60} != {ours!r:.60}")
            return
        for i, (a, b) in enumerate(zip(kio_val, ours, strict=True)):
            _compare(a, b, f"{path}[{i}]", problems)
    elif kio_val != ours or (type(kio_val) is bool and type(ours) is not bool):
        problems.append(f"{path}: kio {kio_val!r:.60} != ours {ours!r:.60}")


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_matches_kio(row):
    frame = load_frame(row)
    body = frame[row["body_offset"] :]
    key, ver = row["api_key"], row["api_version"]
    if row["direction"] == "req":
        kio_cls = kio_index.load_request_schema(key, ver)
        ours, consumed = api.decode_request_ex(key, ver, body)
    else:
        kio_cls = kio_index.load_response_schema(key, ver)
        ours, consumed = api.decode_response_ex(key, ver, body)
    kio_msg, kio_size = kio_serial.entity_reader(kio_cls)(body, 0)
    assert consumed == kio_size
    problems: list[str] = []
    _compare(_norm_kio(kio_msg), _norm_ours(ours), row["api_name"], problems)
    assert not problems, "\n".join(problems[:20])


def test_kio_reads_our_encoding():
    """Our encoder's output (tagged defaults omitted) is readable by kio with equal values."""
    checked = 0
    for row in ROWS:
        if row["direction"] != "resp" or row["api_key"] not in (1, 3, 10, 18, 19, 60):
            continue
        frame = load_frame(row)
        key, ver = row["api_key"], row["api_version"]
        ours = api.decode_response(key, ver, frame[row["body_offset"] :])
        encoded = bytes(ours.encode(ver))
        kio_msg, size = kio_serial.entity_reader(kio_index.load_response_schema(key, ver))(encoded, 0)
        assert size == len(encoded)
        problems: list[str] = []
        _compare(_norm_kio(kio_msg), _norm_ours(ours), row["api_name"], problems)
        assert not problems, "\n".join(problems[:20])
        checked += 1
    assert checked > 30


def _unrecorded_pairs() -> list:
    """(message class, version) of every client-facing api Kafka 4.x added or moved (Produce,
    Fetch, EndTxn, the KIP-848, share and streams group RPCs) in a version no corpus holds: the
    Streams group RPCs need the Streams library (not in the 4.3.1 build here), and clients use
    only their newest versions, so random messages stand in for the versions nothing recorded."""
    recorded = {(r["api_key"], r["api_version"], r["direction"]) for r in ROWS}
    out = []
    for key, info in sorted(api.API_INFO.items()):
        if key not in RANDOM_KEYS:
            continue
        for kind, cls in (("req", info.request_class), ("resp", info.response_class)):
            for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
                if (key, v, kind) not in recorded:
                    out.append(pytest.param(cls, v, kind, id=f"{info.name}-{kind}-v{v}"))
    return out


RANDOM_KEYS = {0, 1, 26, *range(68, 70), *range(76, 80), *range(88, 93)}


def _drop_unknown_tags(v) -> None:
    if isinstance(v, Struct):
        v._unknown_tagged = None
        for f in v._FIELDS:
            _drop_unknown_tags(getattr(v, f.name))
    elif isinstance(v, list):
        for x in v:
            _drop_unknown_tags(x)


#: kio types values as enums and time: a random int16 is rarely a known error code, a random
#: int64 no datetime; such values are mapped into what kio can represent (the wire is the same)
_KNOWN_CODES = sorted(e.value for e in __import__("kio.schema.errors", fromlist=["ErrorCode"]).ErrorCode)


def _fit_to_kio(ours, kio_cls) -> None:
    hints = typing.get_type_hints(kio_cls)
    for f in dataclasses.fields(kio_cls):
        name = f.name if hasattr(ours, f.name) else f.name + "_ms"
        value = getattr(ours, name, None)
        kind = f.metadata.get("kafka_type")
        if value is None:
            continue
        if kind == "error_code":
            setattr(ours, name, _KNOWN_CODES[value % len(_KNOWN_CODES)])
        elif kind in ("datetime_i64", "timedelta_i64", "timedelta_i32"):
            setattr(ours, name, -1 if value < 0 and kind == "datetime_i64" else abs(value) % 2**31)
        else:
            inner = [a for a in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(a)]
            if inner:
                for item in value if isinstance(value, list) else [value]:
                    _fit_to_kio(item, inner[0])


@pytest.mark.parametrize(("cls", "version", "kind"), _unrecorded_pairs())
@settings(
    max_examples=6,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_kio_reads_random_messages_of_unrecorded_versions(cls, version: int, kind: str, data) -> None:
    msg = data.draw(struct_strategy(cls, version, cls.is_flexible(version)))
    _drop_unknown_tags(msg)  # kio refuses tags it does not know; known fields are what is compared
    load = kio_index.load_request_schema if kind == "req" else kio_index.load_response_schema
    kio_cls = load(cls.API_KEY, version)
    _fit_to_kio(msg, kio_cls)
    encoded = bytes(msg.encode(version))
    kio_msg, size = kio_serial.entity_reader(kio_cls)(encoded, 0)
    assert size == len(encoded)
    problems: list[str] = []
    _compare(_norm_kio(kio_msg), _norm_ours(msg), cls.__name__, problems)
    assert not problems, "\n".join(problems[:20])
