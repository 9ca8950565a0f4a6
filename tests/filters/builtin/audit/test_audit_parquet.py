"""``audit-log`` with ``format: parquet``: rotated files are zstd Parquet of the event schema, published
whole by rename, and the configuration refuses the format without pyarrow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kgate.api import FilterConfigError
from kgate.filters.builtin.audit.files import AuditFiles
from kgate.filters.builtin.audit.filter import AuditLog


def _line(i: int, **over: Any) -> bytes:
    e = {
        "schema": 1,
        "time_us": 1_764_000_000_000_000 + i,
        "instance": "k",
        "cluster": "default",
        "client": {"address": "10.0.0.1:5", "id": "c\udc80" if i == 1 else "c", "principal": None},
        "api": {"key": 1, "name": "Fetch", "version": 13},
        "correlation_id": i,
        "error_code": 0,
        "latency_us": 10,
        "request_bytes": 100,
        "response_bytes": 200,
        "topics": [
            {
                "id": "AAAAAAAAAAAAAAAAAAAAAA",
                "name": "t",
                "name_status": "resolved",
                "partitions": 1,
                "bytes": 70,
                "records": 3 if i else None,
                "error_codes": [0],
            }
        ],
        "policy": None,
        **over,
    }
    return (json.dumps(e) + "\n").encode()


def test_rotated_files_are_parquet_of_the_event_schema(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from kgate.pipeline.schema import event_schema

    files = AuditFiles(tmp_path, "k", 1 << 20, 300.0, compress=True, parquet=True)
    files.write([_line(i) for i in range(1000)])
    files.close()
    published = sorted(p.name for p in tmp_path.iterdir())
    assert len(published) == 1
    assert published[0].startswith("kgate-audit-")
    assert published[0].endswith(".parquet")
    t = pq.read_table(tmp_path / published[0])
    assert t.schema.equals(event_schema(), check_metadata=False)
    assert t.num_rows == 1000
    assert pq.ParquetFile(tmp_path / published[0]).metadata.row_group(0).column(0).compression == "ZSTD"
    rows = t.to_pylist()
    assert rows[0]["topics"][0]["records"] is None
    assert rows[5]["topics"][0]["records"] == 3
    assert rows[1]["client"]["id"] == "c\ufffd"  # a lone surrogate escape, as the pipeline reads it


def test_a_dead_writers_hidden_file_is_published_as_parquet(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    (tmp_path / ".kgate-audit-k-20251124T160000Z-000001.jsonl").write_bytes(_line(2) + _line(3))
    AuditFiles(tmp_path, "k", 1 << 20, 300.0, compress=True, parquet=True).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kgate-audit-k-20251124T160000Z-000001.parquet"]


def test_config_refuses_parquet_without_pyarrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    assert AuditLog.validate_config({"directory": str(tmp_path), "format": "parquet"})["format"] == "parquet"
    assert AuditLog.validate_config({"directory": str(tmp_path)})["format"] == "jsonl"
    with pytest.raises(FilterConfigError, match="jsonl or parquet"):
        AuditLog.validate_config({"directory": str(tmp_path), "format": "csv"})
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(FilterConfigError, match="format: parquet needs pyarrow"):
        AuditLog.validate_config({"directory": str(tmp_path), "format": "parquet"})
