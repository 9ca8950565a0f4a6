"""The audit log's files: JSON lines, rotated by size and age, rotated files gzip-compressed.

Naming (docs/audit-log.md, "Files"): the file being written is hidden,
``.kgate-audit-<instance>-<UTC start>-<seq>.jsonl``, so readers that skip dot files (Spark's
file sources do, and so does ``kgate report``'s glob) never see a half-written file. At rotation
it becomes ``kgate-audit-<instance>-<UTC start>-<seq>.jsonl.gz`` (or ``.jsonl`` with gzip off),
appearing whole, by rename, exactly once. The writer holds an ``flock`` on its open file; at
start a writer finalizes hidden files nobody holds (left by a kgate that died), so no event is
stranded in a hidden file across restarts.

Compression runs on its own thread (gzip of a full file takes a noticeable share of a core,
docs/performance.md, "Figures moved out of code comments"; the writer thread must keep draining
its queue meanwhile). Used only from the audit writer thread.
"""

from __future__ import annotations

import fcntl
import gzip
import logging
import os
import queue
import re
import shutil
import threading
import time
from pathlib import Path
from typing import IO

log = logging.getLogger("kgate.audit")

PREFIX = "kgate-audit-"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_instance(instance: str) -> str:
    """The instance id as it appears in file names (``host:123`` -> ``host_123``)."""
    return _UNSAFE.sub("_", instance) or "kgate"


class AuditFiles:
    """The current audit file of one writer, and its rotation."""

    def __init__(
        self,
        directory: Path,
        instance: str,
        max_file_bytes: int,
        max_file_age_s: float,
        compress: bool,
        parquet: bool = False,
    ) -> None:
        """``parquet``: published files are Parquet (parquet.py), converted where gzip would run."""
        self.directory = directory
        self.instance = safe_instance(instance)
        self.max_file_bytes = max_file_bytes
        self.max_file_age_s = max_file_age_s
        self.compress = compress
        self.parquet = parquet
        self._seq = 0
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self._opened = 0.0  # time.monotonic() when the current file was opened
        self._size = 0
        self._compressions: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._compressor: threading.Thread | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self._finalize_orphans()

    # -- writing -----------------------------------------------------------------------------
    def write(self, lines: list[bytes]) -> None:
        """Append lines (each ending in ``\\n``), rotating whenever the file is full or old. OSError on failure.

        A file holds whole lines only, and at least one (a line larger than ``max_file_bytes`` gets
        a file of its own).
        """
        start = 0
        while start < len(lines):
            if self._file is not None and time.monotonic() - self._opened >= self.max_file_age_s:
                self.rotate()
            if self._file is None:
                self._open()
            room = self.max_file_bytes - self._size
            end = start
            taken = 0
            while end < len(lines) and (taken + len(lines[end]) <= room or (end == start and self._size == 0)):
                taken += len(lines[end])
                end += 1
            if end == start:
                self.rotate()  # full: the next line starts a new file
                continue
            assert self._file is not None
            self._file.write(b"".join(lines[start:end]))
            self._file.flush()  # to the OS: a kgate crash loses nothing already handed to write()
            self._size += taken
            start = end

    def tick(self) -> None:
        """Rotate a file that got old while no event came (called when the writer is idle)."""
        if self._file is not None and self._size and time.monotonic() - self._opened >= self.max_file_age_s:
            self.rotate()

    def _open(self) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        while True:  # never reuse a published name (a restart within the same second, same instance id)
            self._seq += 1
            base = f"{PREFIX}{self.instance}-{stamp}-{self._seq:06d}.jsonl"
            path = self.directory / f".{base}"
            published = (base, base + ".gz", base.removesuffix(".jsonl") + ".parquet")
            if any((self.directory / n).exists() for n in published):
                continue
            try:  # O_EXCL: two writers (same instance id by mistake) never share a file
                f = open(path, "xb")
            except FileExistsError:
                continue
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                raise
            if not _same_file(path, f.fileno()):
                # another writer starting up took it for an empty orphan and removed it before our lock
                f.close()
                continue
            if any((self.directory / n).exists() for n in published):
                # the writer that held this hidden name published it after our check above (a reload's
                # old and new writers in one second): publishing ours would replace its file
                f.close()
                path.unlink(missing_ok=True)
                continue
            break
        self._file, self._path, self._size, self._opened = f, path, 0, time.monotonic()

    def rotate(self) -> None:
        """Close the current file and publish it (renamed visible, compressed if configured)."""
        f, path = self._file, self._path
        self._file = self._path = None
        if f is None or path is None:
            return
        try:
            f.close()  # releases the flock
        finally:
            if self._size == 0:
                path.unlink(missing_ok=True)
            else:
                self._publish(path)

    def _publish(self, hidden: Path) -> None:
        if not self.compress and not self.parquet:
            os.replace(hidden, hidden.with_name(hidden.name[1:]))
            return
        if self._compressor is None:
            self._compressor = threading.Thread(target=self._compress_loop, name="kgate-audit-gzip", daemon=True)
            self._compressor.start()
        self._compressions.put(hidden)

    def _compress_loop(self) -> None:
        while True:
            hidden = self._compressions.get()
            if hidden is None:
                return
            try:
                self._finish(hidden)
            except Exception as exc:  # the plain file is published instead: no event is lost
                log.error(
                    "audit: cannot %s %s (%s); keeping it uncompressed",
                    "convert to Parquet" if self.parquet else "gzip",
                    hidden,
                    exc,
                )
                try:
                    os.replace(hidden, hidden.with_name(hidden.name[1:]))
                except OSError:
                    log.exception("audit: cannot publish %s", hidden)

    def close(self) -> None:
        """Publish the current file and wait for compressions still running."""
        try:
            self.rotate()
        finally:
            if self._compressor is not None:
                self._compressions.put(None)
                self._compressor.join()
                self._compressor = None

    def _finalize_orphans(self) -> None:
        """Publish hidden files of writers that are gone (no flock held on them)."""
        for path in sorted(self.directory.glob(f".{PREFIX}*.jsonl")):
            try:
                with open(path, "rb") as f:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    empty = os.fstat(f.fileno()).st_size == 0
            except OSError:
                continue  # a live writer holds it
            if empty:
                path.unlink(missing_ok=True)
                continue
            log.info("audit: publishing %s left by a writer that is gone", path.name)
            if self.compress or self.parquet:
                try:
                    self._finish(path)
                except Exception as exc:  # published as it is: no event is lost
                    log.error("audit: cannot compress %s (%s); keeping it uncompressed", path, exc)
                    os.replace(path, path.with_name(path.name[1:]))
            else:
                os.replace(path, path.with_name(path.name[1:]))

    def _finish(self, hidden: Path) -> Path:
        """Publish a closed hidden file compressed: as Parquet or as gzip."""
        if self.parquet:
            from kgate.filters.builtin.audit.parquet import convert_file

            return convert_file(hidden)
        return compress_file(hidden)


def compress_file(hidden: Path) -> Path:
    """``.name.jsonl`` -> ``name.jsonl.gz`` (written hidden, then renamed: readers see it whole)."""
    final = hidden.with_name(hidden.name[1:] + ".gz")
    tmp = hidden.with_name(hidden.name + ".gz.tmp")
    with open(hidden, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(tmp, final)
    hidden.unlink()
    return final


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the open file ``fd`` (not unlinked or replaced since)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)
