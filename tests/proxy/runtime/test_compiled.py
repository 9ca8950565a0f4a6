"""The optional compiled hot path (tools/compile_hot.py, proxy/runtime/compiled.py): which modules run
compiled, and the stale-build guard that keeps an extension built from an older source from
running in its place (Python imports an extension before the ``.py`` next to it)."""

from __future__ import annotations

import json
from pathlib import Path

from kgate.proxy.runtime import compiled
from kgate.proxy.runtime.compiled import HOT_MODULES, STAMP, compiled_modules, source_hash, source_path, stale_among


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "kgate"
    (pkg / "proxy" / "sansio").mkdir(parents=True)
    (pkg / "proxy" / "sansio" / "core.py").write_text("X = 1\n")
    return pkg


def test_a_build_of_the_current_source_is_fresh(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    src = source_path("kgate.proxy.sansio.core", pkg)
    assert src == pkg / "proxy" / "sansio" / "core.py"
    (pkg / STAMP).write_text(json.dumps({"kgate.proxy.sansio.core": source_hash(src)}))
    assert stale_among(["kgate.proxy.sansio.core"], pkg) == []


def test_an_edit_after_the_build_makes_it_stale(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    src = source_path("kgate.proxy.sansio.core", pkg)
    (pkg / STAMP).write_text(json.dumps({"kgate.proxy.sansio.core": source_hash(src)}))
    src.write_text("X = 2\n")
    assert stale_among(["kgate.proxy.sansio.core"], pkg) == ["kgate.proxy.sansio.core"]


def test_a_build_without_its_record_counts_as_stale(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    assert stale_among(["kgate.proxy.sansio.core"], pkg) == ["kgate.proxy.sansio.core"]  # no stamp file
    (pkg / STAMP).write_text("not json")
    assert stale_among(["kgate.proxy.sansio.core"], pkg) == ["kgate.proxy.sansio.core"]


def test_compiled_modules_are_those_imported_from_an_extension() -> None:
    """Whatever this checkout runs (pure Python or built), the report matches what Python imports."""
    import importlib

    for name in HOT_MODULES:
        module = importlib.import_module(name)
        assert (name in compiled_modules()) == compiled.is_extension(module.__file__), name
