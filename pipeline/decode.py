"""Audit file bytes to Arrow tables: the parse behind the roll-up, run in Spark's Python workers.

Spark's JSON reader cost ~6.7 µs of CPU per 450-byte event (gunzip included; docs/performance.md),
the largest single part of the pipeline. Arrow's JSON reader (RapidJSON underneath) parses the same
lines against the same explicit schema in ~2.7 µs, and gunzip by :mod:`zlib` adds ~0.65 µs. So Spark
now reads each file's *bytes* (its ``binaryFile`` source: any Hadoop file system, HDFS and S3
included) and hands them to these functions in a Python worker, which decodes them into Arrow.

What counts as a bad line is as before, but for the few details docs/pipeline.md lists: a line that
is not a JSON object or has a field of the wrong type is *malformed*, one whose ``schema`` is another
number an *unknown schema version*; required fields are checked on the parsed table
(:mod:`kgate.pipeline.partials`). Arrow's
reader refuses a whole block for one bad line, so a refused block is halved until the bad lines
stand alone (:func:`parse_block`): a clean block costs one parse, a block with ``k`` bad lines about
``2k log n`` small ones. Blank lines are skipped, as Spark's reader did.

Memory stays bounded whatever a file's size: it is inflated piece by piece and parsed in blocks of
whole lines of about :data:`BLOCK_BYTES`. A gzip file that ends early (a copy cut short, a crash
while writing) keeps the lines decoded before the damage and reports the damage as one malformed
line, instead of failing the whole run as Spark's reader did.
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pj

from kgate.pipeline.schema import MALFORMED, SCHEMA_VERSION, UNKNOWN_SCHEMA, event_schema

#: Bytes of whole lines parsed at once: large enough that Arrow's per-call cost vanishes (4 MiB
#: blocks parsed ~20% faster than 256 KiB ones), small enough to keep a worker's memory flat.
BLOCK_BYTES = 8 << 20
#: How much inflated output one :mod:`zlib` call may produce.
_INFLATE_PIECE = 4 << 20
#: How much of a bad line the problems table keeps as a sample.
SAMPLE_CHARS = 200
#: Below this many lines a refused block is parsed line by line instead of halved further.
_LINEWISE = 16

_INT32 = (-(2**31), 2**31 - 1)


_SCHEMA = event_schema()
_PARSE = pj.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="ignore")


@dataclass(frozen=True)
class BadLine:
    """A line that did not fit the schema: its status, its ``schema`` number if it had one, a sample."""

    status: str
    schema: int | None
    sample: str


def classify(line: bytes) -> BadLine:
    """Why ``line`` (which Arrow refused) is bad: an unknown schema version or malformed.

    A line whose ``schema`` is an integer other than :data:`SCHEMA_VERSION` belongs to another
    version of the contract, whatever its other fields hold (a v2 field may well have another type).
    """
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    version = obj.get("schema") if isinstance(obj, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or not _INT32[0] <= version <= _INT32[1]:
        version = None
    status = UNKNOWN_SCHEMA if version is not None and version != SCHEMA_VERSION else MALFORMED
    return BadLine(status, version, _sample(line))


def _sample(line: bytes) -> str:
    """The first :data:`SAMPLE_CHARS` characters of a bad line (invalid UTF-8 replaced)."""
    return line[: SAMPLE_CHARS * 4].decode("utf-8", "replace")[:SAMPLE_CHARS]


def _read(block: bytes) -> pa.Table:
    options = pj.ReadOptions(use_threads=False, block_size=max(len(block), 1 << 16))
    return pj.read_json(io.BytesIO(block), read_options=options, parse_options=_PARSE)


def _plain(block: bytes) -> int:
    """How many lines ``block`` has if every line starts with ``{`` (no blank lines) and the bytes are
    valid UTF-8 (what kgate's writer produces: the only blocks handed to Arrow whole), else 0.

    Arrow's reader crashes the process on a line that is JSON ``null`` (apache/arrow#47409) and
    passes invalid UTF-8 through into its strings (which fail later, in every report); Spark's
    reader called both malformed. The checks are byte counts and a scan that stops early for ASCII.
    """
    lines = block.count(b"\n") + (not block.endswith(b"\n"))
    objects = block.count(b"\n{") + block.startswith(b"{")
    if objects != lines:
        return 0
    if block.isascii():
        return lines
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        return 0
    return lines


def _normalized(line: bytes) -> bytes | None:
    """``line`` written again by Python's JSON, for a line Arrow refused that Spark's reader took.

    kgate's writer escapes a client id's undecodable bytes as lone surrogates (``\\udc80``), which
    Arrow refuses; they become U+FFFD here. A key given twice keeps its last value, as Spark's reader
    did. None when the line is not a JSON object (it is bad, see :func:`classify`).
    """
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    text = json.dumps(obj, ensure_ascii=False)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def _rows(block: bytes, lines: int) -> pa.Table | None:
    """Arrow's table of ``block`` if it parses into exactly ``lines`` rows (a line holding two JSON
    values, ``{...} {...}``, parses into two), else None."""
    try:
        t = _read(block)
    except pa.ArrowInvalid:
        return None
    return t if t.num_rows == lines else None


def _one_line(line: bytes) -> tuple[list[pa.Table], list[BadLine]]:
    t = _rows(line, 1)
    if t is None:
        fixed = _normalized(line)
        t = None if fixed is None else _rows(fixed, 1)
    return ([t], []) if t is not None else ([], [classify(line)])


def _bisect(lines: list[bytes]) -> tuple[list[pa.Table], list[BadLine]]:
    """Parse lines that each start with ``{`` and are valid UTF-8: halve a refused run until the bad
    lines stand alone."""
    if not lines:
        return [], []
    t = _rows(b"\n".join(lines), len(lines))
    if t is not None:
        return [t], []
    if len(lines) <= _LINEWISE:
        tables: list[pa.Table] = []
        bad: list[BadLine] = []
        for line in lines:
            t, b = _one_line(line)
            tables += t
            bad += b
        return tables, bad
    half = len(lines) // 2
    left, right = _bisect(lines[:half]), _bisect(lines[half:])
    return left[0] + right[0], left[1] + right[1]


def parse_block(block: bytes, trusted: bool = False) -> tuple[list[pa.Table], list[BadLine]]:
    """Parse whole lines: the tables of the good ones (in order) and the bad ones, never an exception.

    A block as kgate writes them (:func:`_plain`) is parsed at once. Any other (a line that is not
    an object, invalid UTF-8, blank lines, ``\\r`` line ends) is taken apart line by line first:
    what cannot be an object is bad without asking Arrow, the rest is parsed (:func:`_bisect`).
    """
    if not block or block.isspace():
        return [], []
    if trusted:
        # ``trusted``: written by kgate's own audit writer on this machine (the Parquet converter), so
        # every line is an object in valid UTF-8 and the byte scans of :func:`_plain` are skipped (~15%
        # of the parse); a block Arrow refuses or miscounts (a torn last line) takes the careful path
        t = _rows(block, block.count(b"\n") + (not block.endswith(b"\n")))
        if t is not None:
            return [t], []
    lines = _plain(block)
    if lines:
        t = _rows(block, lines)
        if t is not None:
            return [t], []
    candidates: list[bytes] = []
    bad: list[BadLine] = []
    for raw in block.splitlines():  # \n, \r\n and \r, as Hadoop's line reader
        line = raw.strip()
        if not line:
            continue
        if not line.startswith(b"{"):
            bad.append(classify(line))
            continue
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(BadLine(MALFORMED, None, _sample(line)))
            continue
        candidates.append(line)
    tables, more = _bisect(candidates)
    return tables, bad + more


class Truncated(Exception):
    """The compressed stream ended early or is damaged; the lines before the damage were handed out."""


def _inflate(content: bytes) -> Iterator[bytes]:
    """gzip (one member or several, as ``cat a.gz b.gz`` makes) to bytes, a piece at a time."""
    tail = content
    while tail:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            while True:
                out = d.decompress(tail, _INFLATE_PIECE)
                if out:
                    yield out
                if d.eof:
                    tail = d.unused_data.lstrip(b"\0")  # some writers pad members with zeros
                    break
                tail = d.unconsumed_tail
                if not tail:
                    raise Truncated("gzip stream ends before its end marker (file cut short?)")
        except zlib.error as exc:
            raise Truncated(f"gzip stream damaged: {exc}") from None


def blocks(content: bytes, gzipped: bool, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """A file's contents as blocks of whole lines (the last may lack its newline).

    Raises :class:`Truncated` after the last whole block when a gzip stream is damaged.
    """
    if not gzipped:
        start = 0
        while start < len(content):
            end = content.find(b"\n", start + block_bytes) if start + block_bytes < len(content) else -1
            end = len(content) if end < 0 else end + 1
            yield content[start:end]
            start = end
        return
    # pieces gathered in a list and joined once per block: appending to one bytes object would copy
    # everything gathered so far on each piece (quadratic on a file with a very long line)
    parts: list[bytes] = []
    size = 0
    try:
        for piece in _inflate(content):
            parts.append(piece)
            size += len(piece)
            if size >= block_bytes:
                cut = piece.rfind(b"\n") + 1
                if cut:  # else the line goes on: keep gathering
                    parts[-1] = piece[:cut]
                    yield b"".join(parts)
                    parts = [piece[cut:]] if cut < len(piece) else []
                    size = len(piece) - cut
    except Truncated:
        pending = b"".join(parts)
        cut = pending.rfind(b"\n") + 1
        if cut:
            yield pending[:cut]  # the partial last line, if any, is lost with the damage
        raise
    if parts:
        yield b"".join(parts)


def is_gzip(path: str) -> bool:
    """Compressed with gzip, by name (``.gz``), as Spark's readers decide."""
    return path.endswith(".gz")


#: Other compressions Hadoop's readers recognised by name, read through Arrow's codecs.
_CODECS = {".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd"}


def inflate_other(path: str, content: bytes) -> bytes | None:
    """The contents of a ``.bz2`` or ``.zst`` file, inflated; None for any other name (read as it is).

    Raises :class:`Truncated` when the stream is damaged.
    """
    codec = next((c for suffix, c in _CODECS.items() if path.endswith(suffix)), None)
    if codec is None:
        return None
    try:
        with pa.CompressedInputStream(pa.BufferReader(content), codec) as stream:
            return bytes(stream.read())
    except (OSError, pa.ArrowException) as exc:
        raise Truncated(f"{codec} stream damaged: {exc}") from None


def is_parquet(path: str) -> bool:
    """An audit file written as Parquet (``format: parquet``), by name."""
    return path.endswith(".parquet")


def parquet_tables(content: bytes, batch_rows: int = 65_536) -> Iterator[pa.Table]:
    """A Parquet audit file's rows as tables of the event schema, a batch at a time.

    Columns missing from the file (an older writer) come out null; a file that is not Parquet or whose
    columns do not cast to the schema raises :class:`Truncated` (counted as one malformed line)."""
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(pa.BufferReader(content))
        names = [n for n in _SCHEMA.names if n in f.schema_arrow.names]
        for batch in f.iter_batches(batch_size=batch_rows, columns=names):
            t = pa.Table.from_batches([batch])
            for field in _SCHEMA:
                if field.name not in t.column_names:
                    t = t.append_column(field.name, pa.nulls(t.num_rows, field.type))
            yield t.select(_SCHEMA.names).cast(_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise Truncated(f"not a readable Parquet audit file: {exc}") from None
