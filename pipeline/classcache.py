"""A class-data-sharing archive for ``kgate report``'s driver JVM (Java's dynamic AppCDS).

A cold ``kgate report`` spends much of its fixed cost loading, verifying and parsing the ~15,000
classes Spark needs before its first query (docs/performance.md, issue 26). The first run of a given
Spark, Java and JVM-flag combination asks the JVM to write the classes it loaded into an archive at
exit (``-XX:ArchiveClassesAtExit``); later runs map that archive (``-XX:SharedArchiveFile``) instead
of loading the classes again.

The archive is an optimisation, never a requirement: it lives in the user's cache directory
(``$XDG_CACHE_HOME/kgate/cds``, else ``~/.cache/kgate/cds``), its name carries a hash of what must
match (PySpark's version, the ``java`` binary, the JVM options), and a JVM that rejects it (another
build, a damaged file) runs without it: the JVM's own CDS messages go to a log file here instead of
the report's output, and a rejected archive is deleted (logged) so the next run writes a fresh one.
``KGATE_REPORT_CDS=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Set to ``0`` to run without an archive (and never write one).
ENV = "KGATE_REPORT_CDS"
#: How long the first run waits for its JVM to write the archive at exit.
DUMP_WAIT_S = 600.0
#: JVM log lines that mean the archive given was not used.
_REJECTED = (
    "Unable to map",
    "Unable to use shared archive",
    "An error has occurred while processing",
)


def cache_dir() -> Path:
    """Where archives are kept: ``$XDG_CACHE_HOME/kgate/cds`` or ``~/.cache/kgate/cds``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kgate" / "cds"


def _java() -> str | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def java_key(prefix: str, what: Sequence[str], java_opts: str) -> str | None:
    """``prefix-HASH``: a name for the archive of the classes ``what`` names (versions, paths) loaded by
    this ``java`` with ``java_opts`` (None: no ``java`` found). The tests' Kafka JVMs name theirs so too."""
    java = _java()
    if java is None:
        return None
    st = os.stat(java)
    ident = "\0".join([*what, java, str(st.st_mtime_ns), java_opts])
    return f"{prefix}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def archive_key(java_opts: str) -> str | None:
    """A name for the archive of this PySpark, Java and set of JVM options (None: no ``java`` found)."""
    import pyspark

    return java_key(f"spark-{pyspark.__version__}", [pyspark.__version__, os.path.dirname(pyspark.__file__)], java_opts)


@dataclass
class ClassArchive:
    """One run's use of the archive: the JVM options to add, and what to do when the run ends."""

    #: the JVM options (``spark.driver.extraJavaOptions`` gets them appended); empty: no archive
    options: str = ""
    #: the archive this run maps (None: it writes one, or runs without)
    using: Path | None = None
    #: where this run's JVM writes a new archive at exit (renamed to ``final`` once complete)
    writing: Path | None = None
    final: Path | None = None
    #: the JVM's CDS log of this run (rejections are read from it)
    log_file: Path | None = None
    notes: list[str] = field(default_factory=list)

    def check(self) -> bool:
        """After the JVM started: True when the archive given was used. A rejected archive is deleted."""
        if self.using is None or self.log_file is None:
            return False
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            text = ""
        if any(r in text for r in _REJECTED):
            log.info(
                "class archive %s rejected by the JVM, deleted (next run writes a new one): %s",
                self.using,
                text.strip().splitlines()[-1:],
            )
            self.using.unlink(missing_ok=True)
            return False
        log.info("class archive %s in use", self.using)
        return True

    def finish(self, gateway: Any) -> None:
        """After ``spark.stop()``: when this run writes the archive, let its JVM exit (py4j's launcher ends
        it when its stdin closes) and wait for the archive, then publish it under its final name."""
        status: int | None = None
        try:
            proc = getattr(gateway, "proc", None)
            if self.writing is None or self.final is None or proc is None:
                return
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                status = proc.wait(DUMP_WAIT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.info("class archive not written: the JVM did not exit (%s)", exc)
        finally:
            self.publish(status)

    def publish(self, status: int | None, clean: tuple[int, ...] = (0,)) -> None:
        """After the JVM exited with ``status`` (None: unknown, or it did not exit): publish the archive it
        wrote when that exit was ``clean``; remove what is left of this run either way."""
        try:
            if self.writing is None or self.final is None:
                return
            size = self.writing.stat().st_size if self.writing.is_file() else 0
            # only a dump the JVM finished (a clean exit) is published: a truncated archive makes the
            # next JVM die of SIGBUS while mapping it, before any check of its own
            if status in clean and size > 0:
                final = self.final.with_name(f"{self.final.stem}-{size}.jsa")
                os.replace(self.writing, final)
                log.info("class archive written: %s", final)
            else:
                log.info("class archive not written (JVM exit status %s, %d bytes)", status, size)
        finally:
            if self.writing is not None:
                self.writing.unlink(missing_ok=True)
            if self.log_file is not None:
                self.log_file.unlink(missing_ok=True)


def published(directory: Path, key: str) -> Path | None:
    """The archive of ``key`` in ``directory`` whose size is the one it was published with (its name
    says: ``KEY-SIZE.jsa``); one of another size is deleted. None: there is none."""
    for path in directory.glob(f"{key}-*.jsa"):
        size = path.stem.rpartition("-")[2]
        try:
            if size.isdigit() and path.stat().st_size == int(size):
                return path
            log.info("class archive %s is not the size it was published with: deleted", path)
            path.unlink(missing_ok=True)
        except OSError:
            continue
    return None


def prepare(java_opts: str, *, key: str | None = None, directory: Path | None = None, env: str = ENV) -> ClassArchive:
    """The archive options for a driver JVM started with ``java_opts``: map the cached archive when there
    is one, else write one at exit. Nothing (logged) when turned off or the cache cannot be used.

    ``key``, ``directory``, ``env``: another JVM's archive (its name, where it is kept, the variable that
    turns it off), for the tests' Kafka JVMs; by default the report driver's."""
    if os.environ.get(env, "1") == "0":
        return ClassArchive(notes=["off"])
    key = key or archive_key(java_opts)
    directory = directory or cache_dir()
    if key is None:
        log.info("no class archive: java not found")
        return ClassArchive()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.info("no class archive: %s", exc)
        return ClassArchive()
    if any(c.isspace() for c in str(directory)):  # Spark splits the JVM options at spaces
        log.info("no class archive: the cache path %s has a space", directory)
        return ClassArchive()
    final = directory / f"{key}.jsa"
    fd, name = tempfile.mkstemp(prefix=f"{key}.", suffix=".log", dir=directory)
    os.close(fd)
    log_file = Path(name)
    # the JVM's CDS messages to the log file only (by default its warnings go to the report's stdout)
    logging_opts = f"-Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:cds=info,cds+dynamic=info:file={log_file}::filecount=0"
    found = published(directory, key)
    if found is not None:
        # the regions' checksums are verified on mapping (~0.1 s): a damaged archive is refused, not used
        options = f"-XX:SharedArchiveFile={found} -XX:+VerifySharedSpaces {logging_opts}"
        return ClassArchive(options, using=found, log_file=log_file)
    writing = log_file.with_suffix(".tmp")  # as unique as the log's name: JVMs of one process may write at once
    log.info("no class archive yet: this run writes %s at exit", final)
    return ClassArchive(
        f"-XX:ArchiveClassesAtExit={writing} {logging_opts}", writing=writing, final=final, log_file=log_file
    )
