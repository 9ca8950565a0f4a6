"""Shared helpers for the codec tests (corpus location, frame/header parsing)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared"
CORPUS_DIR = SHARED / "corpus-tansu"
SPEC_DIR = SHARED / "kafka-message-specs"


def corpus_rows() -> list[dict]:
    with open(CORPUS_DIR / "index.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def row_id(row: dict) -> str:
    return f"{row['seq']:06d}-{row['direction']}-{row['api_name']}-v{row['api_version']}"


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def skip_tagged(buf, pos: int) -> int:
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def parse_request_header(frame: bytes, header_version: int) -> tuple[dict, int]:
    """Parse a request header after the 4-byte size prefix; return (fields, body offset)."""
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 4)
    pos = 12
    client_id = None
    if header_version >= 1:
        (n,) = struct.unpack_from(">h", frame, pos)
        pos += 2
        if n >= 0:
            client_id = frame[pos:pos + n].decode()
            pos += n
    if header_version >= 2:
        pos = skip_tagged(frame, pos)
    hdr = {"api_key": api_key, "api_version": api_version, "correlation_id": correlation_id,
           "client_id": client_id}
    return hdr, pos


def parse_response_header(frame: bytes, header_version: int) -> tuple[dict, int]:
    (correlation_id,) = struct.unpack_from(">i", frame, 4)
    pos = 8
    if header_version >= 1:
        pos = skip_tagged(frame, pos)
    return {"correlation_id": correlation_id}, pos


def load_frame(row: dict) -> bytes:
    return (CORPUS_DIR / row["file"]).read_bytes()
