"""Build hook for one option: ``KGATE_WHEEL_COMPILED=1`` builds a wheel with kgate's hot modules compiled.

Everything else about the package is in pyproject.toml. Without the variable the wheel is pure
Python (``py3-none-any``), as ``pip install .`` and ``dev/setup`` build it. With it, the modules of
``HOT_MODULES`` (kgate/proxy/runtime/compiled.py) are compiled with mypyc into one extension group,
``kgate.hot__mypyc`` (inside the package: nothing lands at the top of site-packages), and the
wheel also carries the sources' SHA-256 record (``STAMP``), so ``kgate run`` can tell a current
build from a stale one. The container image builds it this way (Dockerfile, build stage); the build
needs mypy and a C compiler and runs without build isolation (``pip wheel --no-build-isolation``),
so the mypy that compiles is the one pinned there (docker/build-requirements.txt). Measured gain:
docs/performance.md ("the hot path compiled with mypyc"). A checkout compiles in place instead
(``tools/compile_hot.py``, or ``KGATE_COMPILE=1 dev/setup``): a different variable, so that an
editable install never tries to build extensions.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
COMPILE = os.environ.get("KGATE_WHEEL_COMPILED") == "1"


def _compiled_module() -> Any:
    """kgate/proxy/runtime/compiled.py on its own (it imports only the standard library): the list of hot
    modules and the stamp's rules, without importing kgate (or its dependencies) at build time."""
    spec = importlib.util.spec_from_file_location("_kgate_compiled", ROOT / "proxy" / "runtime" / "compiled.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithStamp(build_py):
    """``build_py``, plus the compiled sources' SHA-256 record when the hot modules are compiled."""

    def run(self) -> None:
        super().run()
        if COMPILE:
            compiled = _compiled_module()
            (Path(self.build_lib) / "kgate" / compiled.STAMP).write_text(compiled.stamp_text(ROOT / "kgate"))


def _ext_modules() -> list[Any]:
    if not COMPILE:
        return []
    from mypyc.build import mypycify  # the build stage installs mypy; only this option needs it

    compiled = _compiled_module()
    sources = [str(compiled.source_path(m, ROOT / "kgate").relative_to(ROOT)) for m in compiled.HOT_MODULES]
    return list(mypycify(sources, group_name="kgate.hot", opt_level="3"))


setup(ext_modules=_ext_modules(), cmdclass={"build_py": BuildPyWithStamp})
