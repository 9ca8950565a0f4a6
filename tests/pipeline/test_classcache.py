"""The driver JVM's class-data archive (kgate.pipeline.classcache), against a real ``java``.

A real JVM writes and maps the archive; the stand-in for Spark's driver is a one-line Java program
that, like py4j's gateway server, exits when its stdin closes (a Spark driver would cost ~30 CPU-s
per start here). What matters is what the options do to a real JVM: the first run writes an archive
at exit, a later one maps it, and a damaged or cut-short archive never stops (nor crashes) a run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")
from kgate.pipeline import classcache

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a Java runtime (java on the PATH)")

WAIT = "public class Wait { public static void main(String[] a) throws Exception {" + (
    " while (System.in.read() >= 0) {} System.exit(0); } }"
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(classcache.ENV, raising=False)
    (tmp_path / "Wait.java").write_text(WAIT)
    return tmp_path


def _jvm(cache: Path, archive: classcache.ClassArchive) -> subprocess.Popen[bytes]:
    """A JVM started with the archive's options, waiting on its stdin like py4j's gateway server."""
    cmd = ["java", *archive.options.split(), str(cache / "Wait.java")]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cache)


def _archives(cache: Path) -> list[Path]:
    return sorted((cache / "cache" / "kgate" / "cds").glob("*.jsa"))


def test_first_run_writes_the_archive_and_the_next_maps_it(cache: Path) -> None:
    first = classcache.prepare("-Xmx64m")
    assert first.writing is not None
    assert "-XX:ArchiveClassesAtExit=" in first.options
    proc = _jvm(cache, first)
    first.finish(SimpleNamespace(proc=proc))
    assert proc.returncode == 0
    assert proc.stdout is not None
    assert proc.stdout.read() == b""
    [published] = _archives(cache)
    assert published.stat().st_size == int(published.stem.rpartition("-")[2])
    assert not list(published.parent.glob("*.tmp"))
    assert not list(published.parent.glob("*.log"))

    second = classcache.prepare("-Xmx64m")
    assert second.using == published
    assert "-XX:SharedArchiveFile=" in second.options
    proc = _jvm(cache, second)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(60) == 0
    assert second.log_file is not None
    assert "Mapped dynamic region" in second.log_file.read_text()
    assert second.check() is True
    second.finish(SimpleNamespace(proc=proc))
    assert _archives(cache) == [published]

    # other JVM options (another GC, the JIT's tiers) are another archive
    assert classcache.prepare("-Xmx64m -XX:+UseSerialGC").writing is not None


def test_a_damaged_archive_is_refused_by_the_jvm_and_deleted(cache: Path) -> None:
    key = classcache.archive_key("-Xmx64m")
    assert key is not None
    directory = classcache.cache_dir()
    directory.mkdir(parents=True)
    bad = directory / f"{key}-65536.jsa"
    bad.write_bytes(os.urandom(65536))
    archive = classcache.prepare("-Xmx64m")
    assert archive.using == bad
    proc = _jvm(cache, archive)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(60) == 0  # the run goes on without it
    assert archive.check() is False
    assert not bad.exists()
    assert classcache.prepare("-Xmx64m").writing is not None  # the next run writes a fresh one


def test_an_archive_cut_short_is_never_given_to_a_jvm(cache: Path) -> None:
    """A truncated archive makes the JVM die of SIGBUS while mapping it (Java 17, even with
    -XX:+VerifySharedSpaces): one whose size is not the published size is deleted unused."""
    key = classcache.archive_key("-Xmx64m")
    assert key is not None
    directory = classcache.cache_dir()
    directory.mkdir(parents=True)
    short = directory / f"{key}-999999.jsa"
    short.write_bytes(b"\0" * 1000)
    archive = classcache.prepare("-Xmx64m")
    assert archive.using is None
    assert archive.writing is not None
    assert not short.exists()


def test_a_jvm_that_did_not_exit_cleanly_publishes_nothing(cache: Path) -> None:
    archive = classcache.prepare("-Xmx64m")
    proc = _jvm(cache, archive)
    proc.kill()
    proc.wait(60)
    archive.finish(SimpleNamespace(proc=proc))
    assert _archives(cache) == []


def test_turned_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(classcache.ENV, "0")
    archive = classcache.prepare("-Xmx64m")
    assert archive.options == ""
    assert archive.using is None
    assert archive.writing is None
    archive.finish(SimpleNamespace(proc=None))
    assert not classcache.cache_dir().exists()
