"""tools/check_image.py, the container build checked without a container engine, run as CI runs it.

The full run builds kgate's wheel as the image's build stage does (its hot modules compiled with
mypyc), installs it with requirements.lock into a fresh venv (PyPI is needed for the pinned
dependencies, as in the image build), checks that it runs compiled, and runs the Dockerfile's HEALTHCHECK
against that kgate in front of the module's Tansu.

The compile is most of the run's cost (minutes of CPU), so the suite keeps the wheel in a cache
keyed by a digest of every input of the build (``--wheel-cache``; ``KGATE_IMAGE_WHEEL_CACHE``, empty
for none): the first run on given sources builds for real, a later one on the same inputs installs
that wheel and says so. Every other step runs each time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import check_image  # noqa: E402


def _wheel_cache() -> list[str]:
    """``--wheel-cache DIR`` (under the user's cache, like the Kafka tarballs), or nothing."""
    where = os.environ.get("KGATE_IMAGE_WHEEL_CACHE")
    if where is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        where = str(Path(base) / "kgate" / "check-image-wheels")
    return ["--wheel-cache", where] if where else []


# A cold build compiled for 609 s at load ~25: the first run on new sources needs the room
@pytest.mark.timeout(1200)
def test_image_build_steps(tansu) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools/check_image.py"), "--upstream", tansu.bootstrap, *_wheel_cache()],
        capture_output=True,
        text=True,
        timeout=1180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    built = f"ok: kgate's wheel builds ({check_image.BUILD_COMMAND})" in run.stdout
    cached = (
        f"ok: kgate's wheel ({check_image.BUILD_COMMAND}): " in run.stdout and "from these exact inputs" in run.stdout
    )
    assert built or cached, run.stdout
    assert "ok: the installed kgate runs every hot module compiled, none stale" in run.stdout
    assert "ok: HEALTHCHECK passes once kgate is ready" in run.stdout
    assert "ok: HEALTHCHECK fails once kgate stopped" in run.stdout


def test_the_wheel_cache_key_covers_the_build_inputs(tmp_path) -> None:
    """A cached wheel stands for a build only from identical inputs: any file the build reads (the
    packages, linked in or not, the metadata files, the readme) changes the digest; the rest of
    the context (tool caches, docs, tools) does not."""
    src = tmp_path / "src"
    (src / "kgate").mkdir(parents=True)
    (src / "kgate" / "core.py").write_text("x = 1\n")
    (src / "codec").mkdir()
    (src / "codec" / "wire.py").write_text("y = 1\n")
    (src / "kgate" / "codec").symlink_to("../codec")
    (src / "pyproject.toml").write_text('[project]\nreadme = "README.md"\n')
    (src / "README.md").write_text("# kgate\n")
    first = check_image.build_inputs_digest(src)
    for name, text in ((".mypy_cache/x.json", "{}"), ("docs/new.md", "#"), ("tools/t.py", ""), ("CHANGELOG.md", "-")):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
        assert check_image.build_inputs_digest(src) == first, name
    for name, text in (("README.md", "# kgate 2\n"), ("codec/wire.py", "y = 2\n")):
        (src / name).write_text(text)
        assert check_image.build_inputs_digest(src) != first, name
        first = check_image.build_inputs_digest(src)
    (src / "kgate" / "core.py").write_text("x = 2\n")
    changed = check_image.build_inputs_digest(src)
    assert changed != first
    (src / "kgate" / "new.py").write_text("")
    assert check_image.build_inputs_digest(src) not in (first, changed)
    shutil.rmtree(src / "kgate")
    assert check_image.build_inputs_digest(src) not in (first, changed)


def test_a_cached_wheel_is_found_only_under_its_digest(tmp_path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "kgate_proxy-1-cp311-linux.whl").write_bytes(b"wheel")
    cache = tmp_path / "cache"
    check_image._store_wheel(cache, "a" * 64, wheels)
    c = check_image.Checker()
    assert not check_image._cached_wheel(c, cache, "b" * 64, tmp_path / "other")
    assert check_image._cached_wheel(c, cache, "a" * 64, tmp_path / "got")
    assert (tmp_path / "got" / "kgate_proxy-1-cp311-linux.whl").read_bytes() == b"wheel"


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
