"""An answer's top-level error code, read at a fixed offset without decoding the answer.

Most Kafka responses start with a few fixed-size fields and then ``error_code`` (ApiVersions:
first; Fetch v7+: after ``throttle_time_ms``; FindCoordinator v1-3, SaslHandshake, ...). Where
every field before it is fixed-size in that version, its offset in the body is a constant,
computed once per (api key, version) from the generated message's field list. Reading it is an
``int.from_bytes`` of two bytes after one dict lookup, cheap enough for the per-exchange metrics
on the event loop (a full decode of even a small answer costs several microseconds).

Answers whose error codes sit only per topic or partition (Produce, Metadata, ListOffsets,
OffsetCommit, Fetch before v7) have no top-level code: ``None``. The audit log's event builder
walks those (filters/builtin/audit/event.py); the metrics count them under their top-level code
only.
"""

from __future__ import annotations

from kgate.codec import api
from kgate.codec.headers import HeaderError, response_body_offset

_FIXED = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "float64": 8, "uuid": 16, "uint16": 2}
_NONE = -1  # cached "no fixed offset"
_offsets: dict[tuple[int, int], int] = {}


def error_offset(api_key: int, version: int) -> int | None:
    """Offset of the top-level ``error_code`` in the body of that answer; None if it has none at a fixed place."""
    key = (api_key, version)
    found = _offsets.get(key)
    if found is None:
        found = _offsets[key] = _compute(api_key, version)
    return None if found == _NONE else found


def _compute(api_key: int, version: int) -> int:
    info = api.API_INFO.get(api_key)
    if info is None or not info.min_version <= version <= info.max_version:
        return _NONE
    pos = 0
    for f in info.response_class._FIELDS:
        if not f.present(version) or f.is_tagged(version):
            continue
        if f.name == "error_code" and f.type == "int16" and not f.array:
            return pos
        size = _FIXED.get(f.type)
        if size is None or f.array:
            return _NONE
        pos += size
    return _NONE


_positions: dict[tuple[int, int], tuple[int, bool] | None] = {}


def _position(api_key: int, version: int) -> tuple[int, bool] | None:
    off = error_offset(api_key, version)
    if off is None:
        return None
    flexible = api.response_header_version(api_key, version) >= 1
    return (8 + off, flexible)  # after size and correlation id; flexible: after the header's tagged fields


def top_error_code(api_key: int, version: int, frame: bytes | memoryview) -> int | None:
    """The answer's top-level error code, or None (none at a fixed place, or ``frame`` too short).

    One dict lookup for where it is; a flexible header's tagged fields are nearly always empty
    (one zero byte), and only otherwise parsed.
    """
    key = (api_key, version)
    try:
        where = _positions[key]
    except KeyError:
        where = _positions[key] = _position(api_key, version)
    if where is None:
        return None
    pos, flexible = where
    if flexible:
        if len(frame) > 8 and frame[8] == 0:
            pos += 1
        else:
            try:
                pos += response_body_offset(frame, 1) - 8
            except (HeaderError, IndexError, ValueError):
                return None
    if len(frame) < pos + 2:
        return None
    return int.from_bytes(frame[pos : pos + 2], "big", signed=True)
