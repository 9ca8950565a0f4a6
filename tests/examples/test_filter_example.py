"""Run the example filter plugin's own test suite (examples/kgate-filter-example/tests).

The example is a separate distribution with its own pytest configuration and fixtures, as a
third-party plugin would be, so its tests run in their own pytest process, from its directory.
kgate's suite collects them only here (its testpaths are ``tests/``): they run exactly once.
They need the example installed (dev/setup does ``pip install -e examples/kgate-filter-example``)
so that kgate discovers the filter through its ``kgate.filters`` entry point.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kgate-filter-example"


def _installed_from_here() -> bool:
    try:
        dist = distribution("kgate-filter-example")
    except PackageNotFoundError:
        return False
    return any(ep.name == "client-id-policy" for ep in dist.entry_points if ep.group == "kgate.filters")


@pytest.mark.timeout(240)
@pytest.mark.skipif(
    not _installed_from_here(),
    reason="the example plugin kgate-filter-example is not installed in this environment; "
    "run dev/setup (or: pip install -e examples/kgate-filter-example)",
)
def test_example_plugin_suite(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", "tests"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=220,
    )
    output = proc.stdout[-20_000:] + proc.stderr[-5_000:]
    assert proc.returncode == 0, f"example plugin tests failed (exit {proc.returncode}):\n{output}"
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    # installed plugin + the broker from kgate's test extras: nothing may be skipped, e2e included
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0, f"{counts}\n{output}"
    names = {case.get("name") for case in suite.iter("testcase")}
    assert "test_allowed_client_writes_refused_client_gets_authorization_errors" in names, names
    assert counts["tests"] >= 20, counts
