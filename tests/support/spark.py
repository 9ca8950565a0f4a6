"""The session's local SparkSession, for the pipeline tests and the audit-to-report end-to-end test.

Spark is optional for the rest of kgate's suite: without pyspark (or without Java 17+) a test that
asks for it is skipped with the reason instead of failing the run. Registered for the whole suite by
tests/conftest.py, so a test outside tests/pipeline gets the same session (one per run).

The session is ``kgate report``'s own (``build_session``), sized for the tests' inputs of a few
dozen events: one shuffle partition, a 1 GiB heap, queries run interpreted (``INTERPRETED``), and a
JVM that starts fast (``java_options``, and the class archive of :mod:`kgate.pipeline.classcache`).
An in-process ``kgate report`` (``main(["report", ...])``, or :func:`run_report`) joins that session
and sets the CLI's SQL settings on it (16 shuffle partitions), so the tests' ones are set again after
every test.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

#: How the tests' Spark runs a query, never what it computes: interpreted, without generating and
#: compiling Java for each plan. A test's query runs once over a few hundred rows, so compiling it
#: cost more than running it (docs/performance.md, issue 29); Spark's own tests run both paths alike.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
#: SQL settings a test's session runs with (runtime settings: an in-process report changes them)
TEST_SQL = {"spark.sql.shuffle.partitions": "1", **INTERPRETED}


def _java_major() -> int | None:
    java = shutil.which("java")
    if java is None:
        return None
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    for token in out.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and "." in token:
            return int(head) if head != "1" else int(token.split(".")[1])
    return None


def java_options() -> str:
    """The tests' driver JVM options (local mode: the executors too): a small ``kgate report``'s own
    (C1 only and the serial collector). The tests' jobs are small and short, so the C2 compiler's and
    the parallel collector's threads would mostly compete with the other tests for the two cores; and
    with a real small run's options the session maps the same class archive (:func:`settings_for_tests`)."""
    from kgate.pipeline.session import local_settings

    return local_settings(small=True)["spark.driver.extraJavaOptions"]


def settings_for_tests() -> dict[str, str]:
    """``build_session``'s ``extra`` for the tests' session and for a ``kgate report`` subprocess of
    the tests (``--conf``): queries run interpreted (:data:`INTERPRETED`), and the JVM options,
    mapping the class archive a small ``kgate report`` run published, if any (never writing one: a
    ``--follow`` JVM ends by Ctrl-C, not a clean exit, and a session's write would cost a fresh
    machine's run minutes)."""
    from kgate.pipeline import classcache

    opts = java_options()
    key = classcache.archive_key(opts) if os.environ.get(classcache.ENV, "1") != "0" else None
    found = classcache.published(classcache.cache_dir(), key) if key else None
    if found is not None and not any(c.isspace() for c in str(found)):
        # a refused archive only costs the time it saved: the JVM's CDS warnings are off
        opts += f" -XX:SharedArchiveFile={found} -Xlog:cds=off -Xlog:cds+dynamic=off"
    return {"spark.driver.extraJavaOptions": opts, **INTERPRETED}


_session: Any = None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    global _session
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[pipeline]')")
    major = _java_major()
    if major is None or major < 17:
        pytest.skip(f"PySpark 4 needs Java 17+ (found: {major}); dev/setup installs openjdk-17-jre-headless")
    from kgate.pipeline.session import build_session

    # maps a published class archive, never writes one: writing costs the session's last test
    # 25-50 CPU-s and up to 2 min, on every run of a fresh machine (CI), for ~10 CPU-s saved later
    _session = build_session(
        shuffle_partitions=1, driver_memory="1g", app_name="kgate-pipeline-tests", extra=settings_for_tests()
    )
    yield _session
    _session.stop()
    _session = None


@pytest.fixture(autouse=True)
def _spark_test_settings() -> Iterator[None]:
    """After each test, the session's SQL settings are the tests' again: an in-process report in
    the test set the CLI's (16 shuffle partitions), which every later test on the worker, and the
    module fixtures that build tables, would otherwise run with."""
    yield
    if _session is not None:
        for key, value in TEST_SQL.items():
            _session.conf.set(key, value)


@dataclass(frozen=True)
class ReportRun:
    """One in-process ``kgate report`` run: its exit status, its stderr, and the report it wrote."""

    status: int
    err: str
    #: the ``tables.Result`` the run built and wrote (None when it built none: a usage error)
    result: Any


def run_report(args: Sequence[str]) -> ReportRun:
    """``kgate report ARGS`` in process, on the session's SparkSession (the CLI's own code path without
    a JVM of its own), its stderr captured. The run's ``tables.build`` is wrapped to keep what it
    returned: a test checks the tables and the files of one run (one Spark job, not two), and the
    files are then those very tables written. Call it from one thread at a time."""
    from kgate.pipeline import tables
    from kgate.proxy.runtime.cli import main

    built: list[Any] = []
    real = tables.build

    def build(*a: Any, **kw: Any) -> Any:
        built.append(real(*a, **kw))
        return built[-1]

    err = io.StringIO()
    tables.build = build
    try:
        with contextlib.redirect_stderr(err):
            status = main(["report", *args])
    finally:
        tables.build = real
        if _session is not None:  # the run set the CLI's SQL settings on the shared session
            for key, value in TEST_SQL.items():
                _session.conf.set(key, value)
    return ReportRun(status, err.getvalue(), built[-1] if built else None)
