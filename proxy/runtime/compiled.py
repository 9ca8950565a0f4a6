"""Which of kgate's hot modules run compiled (mypyc), and whether a compiled one is stale.

``tools/compile_hot.py`` compiles the modules of ``HOT_MODULES`` in place with mypyc: each gets
an extension module next to its source, which Python imports instead of the ``.py`` file. That is
optional: without the extensions the same sources run as pure Python (the default of a checkout
and of ``pip install``). The container image ships them compiled: its build stage builds the
wheel with ``KGATE_WHEEL_COMPILED=1`` (setup.py), which puts the extensions and ``STAMP`` in it.
Compiled, a Produce or Metadata request runs far fewer user-space instructions, much closer to
the raw relay's (docs/performance.md, "Figures moved out of code comments").

An extension built from an older source would silently run old code (Python prefers it to the
``.py`` file), so the build records each source's SHA-256 in ``STAMP`` and ``stale`` compares:
the test session refuses to start on a stale build (tests/conftest.py), and ``kgate run`` logs a
warning naming the modules.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
from pathlib import Path

#: the modules a passthrough request runs through, framing and header reads first (the order
#: does not matter to mypyc; they are compiled as one group, so calls between them are C calls)
HOT_MODULES = (
    "kgate.codec.framing",
    "kgate.codec.headers",
    "kgate.proxy.sansio.plans",
    "kgate.proxy.sansio.exchange",
    "kgate.proxy.sansio.counter",
    "kgate.proxy.sansio.core",
    "kgate.proxy.sansio.answer_memo",
    "kgate.proxy.sansio.metadata_brokers",
    "kgate.proxy.sansio.rewrite",
    # The asyncio protocol pair: it subclasses asyncio.Protocol, so mypyc compiles its methods but
    # keeps it a regular class (the per-instance ``data_received`` binding still works). It runs on
    # every connection and request, so compiling it cuts instructions on both (docs/performance.md,
    # "the connection objects in the optional compiled build").
    "kgate.proxy.carrier.connection",
    "kgate.proxy.carrier.carrier_states",  # its phase table, read at each phase change of a connection
    # What a connection's set-up and teardown call besides: its read gates, the gentle upstream
    # close and the close reasons: fewer instructions per connection and a few per request
    # (docs/performance.md, "Figures moved out of code comments"). (proxy.sansio.states cannot join as it
    # is: its exception class subclasses RuntimeError, which mypyc compiles only as a non-native
    # class.)
    "kgate.proxy.carrier.flow",
    "kgate.proxy.carrier.gentle_close",
    "kgate.proxy.sansio.close_reason",
)

#: where the build records the SHA-256 of each source it compiled (next to kgate/__init__.py)
STAMP = "_compiled_sources.json"


def _origin(module: str) -> str | None:
    spec = importlib.util.find_spec(module)
    return None if spec is None else spec.origin


def is_extension(path: str | None) -> bool:
    return path is not None and path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled_modules() -> list[str]:
    """The hot modules Python imports from a compiled extension (empty: all pure Python)."""
    return [m for m in HOT_MODULES if is_extension(_origin(m))]


def source_path(module: str, package_dir: Path) -> Path:
    """``kgate.proxy.sansio.core`` -> ``<package_dir>/proxy/sansio/core.py``."""
    return package_dir.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stamp_text(package_dir: Path) -> str:
    """What a build writes to ``STAMP``: each hot module's source SHA-256, as ``stale_among`` reads it.

    Written by both builds: in place (tools/compile_hot.py) and into a wheel (setup.py).
    """
    return json.dumps({m: source_hash(source_path(m, package_dir)) for m in HOT_MODULES}, indent=1) + "\n"


def stale_modules(package_dir: Path | None = None) -> list[str]:
    """Compiled hot modules whose source changed since the build (or that have no record of it)."""
    compiled = compiled_modules()
    if not compiled:
        return []
    if package_dir is None:
        import kgate

        package_dir = Path(kgate.__file__).parent
    return stale_among(compiled, package_dir)


def stale_among(compiled: list[str], package_dir: Path) -> list[str]:
    """Those of ``compiled`` whose source's SHA-256 is not the one ``STAMP`` recorded at the build."""
    try:
        recorded: dict[str, str] = json.loads((package_dir / STAMP).read_text())
    except (OSError, ValueError):
        recorded = {}
    stale = []
    for module in compiled:
        src = source_path(module, package_dir)
        if src.exists() and recorded.get(module) != source_hash(src):
            stale.append(module)
    return stale
