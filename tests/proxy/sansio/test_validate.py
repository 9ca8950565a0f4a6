"""Request validation (proxy/sansio/validate.py) on real frames: the Tansu corpus passes, damage does not."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from support.wire import metadata_request

from kgate.codec import api
from kgate.codec.headers import peek_request
from kgate.proxy.sansio.validate import check_batches, check_request

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "corpus-tansu"

needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"{CORPUS} not present (../shared is beside the repo in CI)"
)


def _requests() -> list[bytes]:
    out = []
    for line in (CORPUS / "index.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["direction"] == "req":
            data = (CORPUS / row["file"]).read_bytes()
            if int.from_bytes(data[:4], "big") != len(data) - 4:
                data = len(data).to_bytes(4, "big") + data
            out.append(data)
    return out


@needs_corpus
def test_every_real_client_request_passes() -> None:
    frames = _requests()
    assert len(frames) > 100
    for data in frames:
        key, version, _cid = peek_request(memoryview(data))
        problem, _msg = check_request(memoryview(data), key, version)
        assert problem is None, (api.API_INFO[key].name, version, problem)


def test_a_forged_array_count_is_refused() -> None:
    """What made a broker try to allocate 106 GB: a count far beyond the bytes that follow."""
    data = metadata_request(7, ["a-topic", "b-topic"], version=1)
    body_at = 4 + 10 + struct.unpack(">h", data[12:14])[0]  # size, key, version, cid, client id
    assert check_request(memoryview(data), 3, 1)[0] is None
    forged = data[:body_at] + struct.pack(">i", 0x7FFFFFFF) + data[body_at + 4 :]
    problem, _ = check_request(memoryview(forged), 3, 1)
    assert problem is not None
    assert "does not decode" in problem


@needs_corpus
def test_truncated_body_is_refused_and_unknown_versions_pass() -> None:
    for data in _requests():
        key, version, _cid = peek_request(memoryview(data))
        if key == 0:
            break
    short = (len(data) - 4 - 20).to_bytes(4, "big") + data[4:-20]
    assert check_request(memoryview(short), key, version)[0] is not None
    assert check_request(memoryview(data), key, 999) == (None, None)  # the broker answers what it does not know
    assert check_request(memoryview(data), 9999, 0) == (None, None)


def _batch(payload: bytes = b"r" * 20, magic: int = 2) -> bytes:
    length = 49 + len(payload)
    return struct.pack(">qi", 0, length) + struct.pack(">ib", 0, magic) + b"\0" * 44 + payload


def test_record_batches_must_fit_and_be_magic_2() -> None:
    good = _batch() + _batch(b"x" * 5)
    assert check_batches(good) is None
    assert "does not fit" in (check_batches(good[:-1]) or "")
    assert "magic 1" in (check_batches(_batch(magic=1)) or "")
    assert "truncated" in (check_batches(b"\0" * 30) or "")
    bad_len = struct.pack(">qi", 0, 10**9) + _batch()[12:]
    assert "does not fit" in (check_batches(bad_len) or "")
