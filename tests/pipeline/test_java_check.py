"""``kgate report``'s Java check reads the JDK's ``release`` file instead of starting a JVM (no Spark)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _fake_jdk(tmp_path: Path, release: str | None) -> Path:
    """A JAVA_HOME whose ``bin/java`` leaves a mark when run and claims Java 17, and an optional ``release``."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\ntouch "{tmp_path}/ran"\necho \'openjdk version "17.0.9" 2023-10-17\' >&2\n')
    java.chmod(0o755)
    if release is not None:
        (home / "release").write_text(release)
    return home


@pytest.mark.parametrize(
    ("release", "problem"),
    [
        ('IMPLEMENTOR="Debian"\nJAVA_VERSION="17.0.15"\n', None),
        ('JAVA_VERSION="21"\n', None),
        ('JAVA_VERSION="11.0.2"\n', "Java 11 found"),
        ('JAVA_VERSION="1.8.0_292"\n', "Java 8 found"),
    ],
)
def test_the_release_file_answers_without_starting_java(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str, problem: str | None
) -> None:
    from kgate.pipeline.cli import _java_problem

    monkeypatch.setenv("JAVA_HOME", str(_fake_jdk(tmp_path, release)))
    found = _java_problem()
    assert (found is None) if problem is None else (problem in str(found))
    assert not (tmp_path / "ran").exists(), "java was started although its release file says the version"


def test_without_a_release_file_java_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kgate.pipeline.cli import _java_problem

    monkeypatch.setenv("JAVA_HOME", str(_fake_jdk(tmp_path, None)))
    assert _java_problem() is None
    assert (tmp_path / "ran").exists()


def test_an_old_java_without_release_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kgate.pipeline.cli import _java_problem

    home = _fake_jdk(tmp_path, None)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'java version \"1.8.0_292\"' >&2\n")
    os.chmod(java, 0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert "Java 8 found" in str(_java_problem())
