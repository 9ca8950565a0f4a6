"""Shared helpers for the codec tests (corpus location, frame/header parsing)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared"
CORPUS_DIR = SHARED / "corpus-tansu"
#: recorded against Apache Kafka 4.0.2 by tools/record_kafka_corpus.py; in the repository
KAFKA_CORPUS_DIR = REPO_ROOT / "tests" / "data" / "corpus-kafka"
#: recorded against Apache Kafka 4.3.1 and its Java clients (``--kafka 4.3.1``); in the repository
KAFKA43_CORPUS_DIR = REPO_ROOT / "tests" / "data" / "corpus-kafka43"
SPEC_DIR = SHARED / "kafka-message-specs"


def corpus_rows(corpus_dir: Path = CORPUS_DIR) -> list[dict]:
    """The corpus's index rows; each knows its corpus (``load_frame`` reads from there)."""
    with open(corpus_dir / "index.jsonl", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    for row in rows:
        row["corpus_dir"] = corpus_dir
    return rows


def row_id(row: dict) -> str:
    tag = {KAFKA_CORPUS_DIR: "kafka-", KAFKA43_CORPUS_DIR: "kafka43-"}.get(row.get("corpus_dir"), "")
    return f"{tag}{row['seq']:06d}-{row['direction']}-{row['api_name']}-v{row['api_version']}"


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
            client_id = frame[pos : pos + n].decode()
            pos += n
    if header_version >= 2:
        pos = skip_tagged(frame, pos)
    hdr = {"api_key": api_key, "api_version": api_version, "correlation_id": correlation_id, "client_id": client_id}
    return hdr, pos


def parse_response_header(frame: bytes, header_version: int) -> tuple[dict, int]:
    (correlation_id,) = struct.unpack_from(">i", frame, 4)
    pos = 8
    if header_version >= 1:
        pos = skip_tagged(frame, pos)
    return {"correlation_id": correlation_id}, pos


def load_frame(row: dict) -> bytes:
    return (row.get("corpus_dir", CORPUS_DIR) / row["file"]).read_bytes()
