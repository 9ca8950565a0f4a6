"""The session's local SparkSession, for the pipeline tests and the audit-to-report end-to-end test.

Spark is optional for the rest of kgate's suite: without pyspark (or without Java 17+) a test that
asks for it is skipped with the reason instead of failing the run. Registered for the whole suite by
tests/conftest.py, so a test outside tests/pipeline gets the same session (one per run).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[pipeline]')")
    major = _java_major()
    if major is None or major < 17:
        pytest.skip(f"PySpark 4 needs Java 17+ (found: {major}); dev/setup installs openjdk-17-jre-headless")
    from kgate.pipeline.session import build_session

    session = build_session(shuffle_partitions=1, driver_memory="1g", app_name="kgate-pipeline-tests")
    yield session
    session.stop()
