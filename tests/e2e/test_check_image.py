"""tools/check_image.py, the container build checked without a container engine, run as CI runs it.

The full run builds kgate's wheel as the image's build stage does (its hot modules compiled with
mypyc), installs it with requirements.lock into a fresh venv (PyPI is needed for the pinned
dependencies, as in the image build), checks that it runs compiled, and runs the Dockerfile's HEALTHCHECK
against that kgate in front of the module's Tansu.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import check_image  # noqa: E402


@pytest.mark.timeout(600)
def test_image_build_steps(tansu) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools/check_image.py"), "--upstream", tansu.bootstrap],
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok: HEALTHCHECK passes once kgate is ready" in run.stdout
    assert "ok: HEALTHCHECK fails once kgate stopped" in run.stdout


def test_a_root_image_or_a_moving_tag_fails(tmp_path) -> None:
    text = (ROOT / "Dockerfile").read_text()
    bad = tmp_path / "Dockerfile"
    bad.write_text(text.replace("USER 10001:10001", "USER root").replace("python:3.11.7-slim-bookworm", "python:3"))
    c = check_image.Checker()
    check_image.check_dockerfile(c, bad)
    assert any("non-root" in f for f in c.failures), c.failures
    assert any("pinned to a full version" in f for f in c.failures), c.failures


def test_an_image_built_without_the_compiled_hot_path_fails(tmp_path) -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "KGATE_WHEEL_COMPILED=1 pip wheel" in text
    bad = tmp_path / "Dockerfile"
    bad.write_text(text.replace("KGATE_WHEEL_COMPILED=1 pip wheel", "pip wheel"))
    c = check_image.Checker()
    check_image.check_dockerfile(c, bad)
    assert any("compiles the hot modules" in f for f in c.failures), c.failures


def test_dockerfile_parsing_joins_continuations() -> None:
    text = 'FROM a:1.2.3 AS b\n# c\nRUN x \\\n    && y\nFROM a:1.2.3\nCMD ["-c", "f"]\n'
    ins = check_image.parse_dockerfile(text)
    assert [(i.stage, i.keyword) for i in ins] == [(0, "FROM"), (0, "RUN"), (1, "FROM"), (1, "CMD")]
    assert ins[1].args == "x && y"
    assert ins[3].exec_form() == ["-c", "f"]
