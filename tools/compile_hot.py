#!/usr/bin/env python3
"""Compile kgate's hot path with mypyc, in place (optional; pure Python is the default).

    python tools/compile_hot.py          # build: an extension next to each module of HOT_MODULES
    python tools/compile_hot.py --clean  # remove them: the same sources run as pure Python again

Why: a passthrough request is Python bytecode between two syscalls (the relay's syscalls are the
same); compiled, a Produce costs 36,400 -> 22,100 user-space instructions per request and a
Metadata 40,700 -> 28,300 (callgrind, bench/request_cost.py --instructions; docs/performance.md).

Needs mypy (its mypyc; the test extra installs it) and a C compiler. The extensions are built for
this interpreter only and are not tracked by git. The build records each source's SHA-256
(proxy/runtime/compiled.py): after an edit of a compiled module, tests refuse to run and ``kgate run`` warns
until it is rebuilt or cleaned, so old compiled code never runs unnoticed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kgate.proxy.runtime.compiled import HOT_MODULES, STAMP, is_extension, source_path, stamp_text  # noqa: E402

PACKAGE = ROOT / "kgate"


def built_files() -> list[Path]:
    """Every extension a build left: one per hot module, and the group's shared library."""
    found = [p for p in ROOT.glob("*__mypyc.*") if is_extension(str(p))]
    for module in HOT_MODULES:
        src = source_path(module, PACKAGE)
        found += [p for p in src.parent.glob(src.stem + ".*") if is_extension(str(p))]
    return found


def clean() -> None:
    for path in built_files():
        path.unlink()
    (PACKAGE / STAMP).unlink(missing_ok=True)


def build() -> int:
    clean()
    sources = [str(source_path(m, PACKAGE).relative_to(ROOT)) for m in HOT_MODULES]
    stamp = stamp_text(PACKAGE)  # the sources as compiled, read before mypyc runs
    mypyc = [sys.executable, "-m", "mypyc"]
    done = subprocess.run([*mypyc, *sources], cwd=ROOT)  # its C sources go to build/ (not tracked)
    if done.returncode != 0:
        clean()  # nothing half-built stays behind: the pure-Python sources run
        return done.returncode
    (PACKAGE / STAMP).write_text(stamp)
    print(f"compiled {len(sources)} modules: {', '.join(HOT_MODULES)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = ap.parse_args()
    if args.clean:
        clean()
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main())
