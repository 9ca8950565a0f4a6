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
import uuid

import pytest
from codec_support import CORPUS_DIR, KAFKA_CORPUS_DIR, corpus_rows, load_frame, row_id

from kgate.codec import api
from kgate.codec.schema import Struct

kio_serial = pytest.importorskip("kio.serial")
kio_index = pytest.importorskip("kio.index")

# the Tansu corpus where ../shared is present, and the Kafka corpus (in the repository) always
TANSU_ROWS = corpus_rows() if (CORPUS_DIR / "index.jsonl").is_file() else []
ROWS = TANSU_ROWS + corpus_rows(KAFKA_CORPUS_DIR)
ZERO = uuid.UUID(int=0)


def _norm_kio(v, field_type=None):
    if dataclasses.is_dataclass(v):
        return {f.name: _norm_kio(getattr(v, f.name), f.metadata.get("kafka_type"))
                for f in dataclasses.fields(v)}
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
    body = frame[row["body_offset"]:]
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
        ours = api.decode_response(key, ver, frame[row["body_offset"]:])
        encoded = bytes(ours.encode(ver))
        kio_msg, size = kio_serial.entity_reader(kio_index.load_response_schema(key, ver))(encoded, 0)
        assert size == len(encoded)
        problems: list[str] = []
        _compare(_norm_kio(kio_msg), _norm_ours(ours), row["api_name"], problems)
        assert not problems, "\n".join(problems[:20])
        checked += 1
    assert checked > 30
