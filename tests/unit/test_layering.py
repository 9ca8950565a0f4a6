"""kgate's layering, and its Kafka constants, checked on the source so neither can regress.

Layers (a package may import only the ones listed for it; see docs/architecture.md, "Layering"):

    codec    <- api <- filters <- config <- proxy <- kgate (python -m kgate)
                 ^  ^                        |
                 |  topic_ids <---------------+  (the id -> name resolver: api and codec only)
                 testing (a plugin's test kit: api and codec only)
    codec <- pipeline <- proxy (kgate report: reads audit files; the CLI dispatches to it lazily)

``kgate.api`` is what plugins import; it must not reach the proxy, the configuration or the
filter runtime, or a plugin would depend on kgate's internals (and on their import cost). The
check reads every import statement, including lazy ones inside functions and those under
``TYPE_CHECKING``, so a type-only import is a dependency too.

Api keys and error codes come from the generated ``ApiKey`` and ``ErrorCode``; a number written
by hand drifts from Kafka silently. The AST checks below catch the shapes such numbers took
before: ``METADATA = 3`` at module level, ``api_key == 3`` / ``error_code != 0`` comparisons, and
dicts keyed by bare api-key numbers.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import ApiKey

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "codec": REPO / "codec",
    "config": REPO / "config",
    "filters": REPO / "filters",
    "proxy": REPO / "proxy",
    "api": REPO / "kgate" / "api",
    "testing": REPO / "kgate" / "testing",
    "topic_ids": REPO / "kgate" / "topic_ids",
    "pipeline": REPO / "pipeline",
}
ALLOWED: dict[str, set[str]] = {
    "codec": set(),
    "api": {"codec"},
    "testing": {"api", "codec"},
    # audit-log's Parquet format writes the pipeline's own event schema (one definition of it); pipeline
    # imports only codec, so this adds no cycle, and pyarrow is imported only when the format is on
    "filters": {"api", "codec", "pipeline"},
    "topic_ids": {"api", "codec"},
    "config": {"api", "codec", "filters"},
    "proxy": {"api", "codec", "filters", "config", "topic_ids", "pipeline"},
    # kgate report reads audit files only: no proxy, filters or config (codec for ApiKey/ErrorCode)
    "pipeline": {"codec"},
}
OLD_TOP_LEVEL = {"codec", "config", "filters", "proxy"}


def _modules(package: str) -> list[Path]:
    root = PACKAGES[package]
    return sorted(p for p in root.rglob("*.py") if "generated" not in p.parts and p.name != "error_codes.py")


def _module_name(path: Path) -> str:
    """``kgate.proxy.sansio.core`` for proxy/sansio/core.py, ``kgate.topic_ids`` for kgate/topic_ids/__init__.py."""
    for package, root in PACKAGES.items():
        if path.is_relative_to(root):
            parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
            return ".".join(["kgate", package, *parts])
    parts = [p for p in path.relative_to(REPO).with_suffix("").parts if p != "__init__"]
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module an ``from ... import`` names, relative ones (``from .x import y``) resolved."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imported(tree: ast.AST, module: str = "", is_package: bool = False) -> set[str]:
    """Every module name ``tree`` imports (and ``module.name`` for each name it takes from one)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.level == 0 or module):
            source = _absolute(node, module, is_package)
            if source:
                names.add(source)
                names.update(f"{source}.{a.name}" for a in node.names)
    return names


def _imports_of(path: Path) -> set[str]:
    return _imported(ast.parse(path.read_text(), str(path)), _module_name(path), path.name == "__init__.py")


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "kgate" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in PACKAGES else None


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_its_lower_layers(package: str) -> None:
    wrong = []
    for path in _modules(package):
        for name in _imports_of(path):
            layer = _layer(name)
            if layer is not None and layer != package and layer not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_allowed_layers_have_no_cycle() -> None:
    seen: dict[str, int] = {}

    def visit(p: str, depth: int = 0) -> None:
        assert depth <= len(ALLOWED), f"cycle through {p}"
        for q in ALLOWED[p]:
            visit(q, depth + 1)
        seen[p] = depth

    for p in ALLOWED:
        visit(p)


def _edges(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (every import statement, as above).

    ``from pkg import sub`` is an edge to ``pkg.sub`` when that is a module, else to ``pkg`` (its
    ``__init__``); a package's ``__init__`` re-exporting its submodules is an edge like any other.
    """
    paths = {_module_name(p): p for p in PACKAGES[package].rglob("*.py")}

    def nearest(name: str) -> str:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {}
    for name, path in paths.items():
        out = edges[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(nearest(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, name, path.name == "__init__.py")
                for a in node.names:
                    sub = f"{source}.{a.name}"
                    out.add(sub if sub in paths else nearest(source))
        out.discard(name)
        out.discard("")
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


#: cycles tolerated for now, each to go (the test fails once one is gone so that it leaves this
#: list too); the last, pipeline's ingest <-> partials, went on 2026-11-27 (pipeline/window.py)
KNOWN_CYCLES: dict[str, list[list[str]]] = {}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle_inside_a_package(package: str) -> None:
    """A cycle (type-only and lazy imports count) means two modules that cannot be read, tested or
    moved apart; proxy/ had one of seven modules through VirtualCluster, now protocols."""
    assert _cycles(_edges(package)) == KNOWN_CYCLES.get(package, [])


def test_the_cycle_check_catches_what_it_is_for() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(edges) == [["a", "b", "c"]]
    tree = ast.parse("from . import core\nfrom .states import State\nfrom ...codec import api\n")
    assert _imported(tree, "kgate.proxy.sansio.plans") >= {
        "kgate.proxy.sansio.core",
        "kgate.proxy.sansio.states",
        "kgate.proxy.sansio.states.State",
        "kgate.codec.api",
    }
    assert "kgate.proxy.sub.x" in _imported(ast.parse("from .x import y"), "kgate.proxy.sub", is_package=True)


def _loaded_by(module: str) -> set[str]:
    """The modules a fresh interpreter has loaded once it imported ``module`` (its runtime closure)."""
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize("module", ["kgate.proxy.sansio.core", "kgate.proxy.core"])
def test_the_sans_io_core_loads_no_asyncio_and_no_carrier(module: str) -> None:
    """The connection core is sans-IO in effect: importing it (by its path or its short name)
    loads no event loop machinery, and nothing of proxy/'s asyncio side (the carrier, the
    cluster, the server)."""
    loaded = _loaded_by(module)
    assert not {m for m in loaded if m == "asyncio" or m.startswith(("asyncio.", "uvloop"))}
    carrier = {
        "kgate.proxy.carrier.connection",
        "kgate.proxy.runtime.cluster",
        "kgate.proxy.runtime.server",
        "kgate.proxy.carrier.settle",
    }
    assert not loaded & carrier


def test_the_public_api_loads_nothing_internal() -> None:
    """``import kgate.api`` (what every plugin does) loads no proxy, config or filter runtime, and no asyncio."""
    loaded = _loaded_by("kgate.api")
    internal = {m for m in loaded if m.startswith(("kgate.proxy", "kgate.config", "kgate.filters", "kgate.pipeline"))}
    assert not internal
    assert "asyncio" not in loaded


def _all_python() -> list[Path]:
    skip = {".venv", ".git", "build", "dist", "kgate"}  # kgate/ links the packages: read them once
    out = []
    # os.walk, pruned: rglob walked all of .venv (PySpark's tree) before the filter dropped it
    for folder, dirs, files in os.walk(REPO):
        rel_dir = Path(folder).relative_to(REPO)
        if rel_dir == Path("kgate"):
            dirs[:] = [d for d in dirs if d in {"api", "testing", "topic_ids"}]
        else:
            dirs[:] = [
                d
                for d in dirs
                if not (rel_dir == Path(".") and d in skip - {"kgate"})
                and d != "generated"
                and not d.endswith(".egg-info")
                and d != "__pycache__"
            ]
        if rel_dir != Path("kgate"):  # its own files are the links' namespace, not code to check
            out.extend(Path(folder) / f for f in files if f.endswith(".py"))
    return out


def test_nothing_imports_the_old_top_level_packages() -> None:
    """Everything installed is under kgate.*; a stray ``import proxy`` would load a second copy."""
    wrong = []
    for path in _all_python():
        for name in _imports_of(path):
            if name.split(".")[0] in OLD_TOP_LEVEL:
                wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert not wrong, "\n".join(wrong)


_CONSTANT_NAMES = {k.name for k in ApiKey} | {e.name for e in ErrorCode}
_KEY_LIKE = {"api_key", "error_code", "code"}


def _constant_name(name: str) -> bool:
    """``METADATA``, ``_METADATA`` and ``API_VERSIONS_KEY`` all name an api key or error code."""
    bare = name.lstrip("_")
    return bare in _CONSTANT_NAMES or bare.removesuffix("_KEY") in _CONSTANT_NAMES


def _hand_written_numbers(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
            pairs += [
                (t, v)
                for t in node.targets
                if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple)
                for t, v in zip(t.elts, node.value.elts, strict=False)
            ]
            for t, v in pairs:
                if (
                    isinstance(t, ast.Name)
                    and _constant_name(t.id)
                    and isinstance(v, ast.Constant)
                    and type(v.value) is int
                ):
                    found.append((node.lineno, f"{t.id} = {v.value}"))
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = [
                o
                for o in operands
                if (isinstance(o, ast.Name) and o.id in _KEY_LIKE)
                or (isinstance(o, ast.Attribute) and o.attr in _KEY_LIKE)
            ]
            numbers = [o for o in operands if isinstance(o, ast.Constant) and type(o.value) is int]
            numbers += [
                e
                for o in operands
                if isinstance(o, ast.Tuple | ast.Set)
                for e in o.elts
                if isinstance(e, ast.Constant) and type(e.value) is int
            ]
            if named and numbers:
                found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Dict)
            and len(node.keys) >= 2
            and all(isinstance(k, ast.Constant) and type(k.value) is int and 0 <= k.value < 100 for k in node.keys)
        ):
            found.append((node.lineno, "a dict keyed by bare numbers (api keys?)"))
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_api_key_or_error_code_is_written_by_hand(package: str) -> None:
    wrong = []
    for path in _modules(package):
        for line, what in _hand_written_numbers(ast.parse(path.read_text(), str(path))):
            wrong.append(f"{path.relative_to(REPO)}:{line}: {what}")
    assert not wrong, "use ApiKey / ErrorCode:\n" + "\n".join(wrong)


def test_the_number_check_catches_what_it_is_for() -> None:
    bad = ast.parse(
        "METADATA = 3\nif api_key == 1: pass\nif t.error_code in (3, 100): pass\nX = {0: 'a', 1: 'b'}\n"
        "FETCH, SASL_HANDSHAKE_KEY = 1, 17\n"
    )
    assert sorted(line for line, _ in _hand_written_numbers(bad)) == [1, 2, 3, 4, 5, 5]
    good = ast.parse("METADATA = ApiKey.METADATA\nif api_key == ApiKey.FETCH: pass\nif len(buf) < 2: pass\n")
    assert _hand_written_numbers(good) == []


MAX_MODULES_PER_FOLDER = 25


def test_no_package_folder_holds_more_than_25_modules() -> None:
    """A folder of more modules than a reader can hold reads as a heap: split it by concern into
    subpackages (proxy/: sansio, carrier, control, runtime; docs/architecture.md, "Layout")."""
    crowded = {}
    for root in PACKAGES.values():
        for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            if "generated" in folder.parts or "__pycache__" in folder.parts:
                continue  # the generated codec: one module per Kafka message, made by tools/gen_codec.py
            count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
            if count > MAX_MODULES_PER_FOLDER:
                crowded[str(folder.relative_to(REPO))] = count
    assert not crowded


#: varint code outside codec/ that stays, each with why (module path, function)
_VARINT_ALLOWED = {
    # reads through ``byte()``, so one method serves _ChunkReader's frames split across reads too;
    # codec.primitives.read_uvarint indexes one contiguous buffer
    ("filters/builtin/audit/wire.py", "uvarint"),
    # the generated walkers' interpreter reads a varint that may end in the next chunk: it stashes
    # and resumes where codec.primitives.read_uvarint would raise IndexError
    ("codec/tail_walk.py", "_walk"),
}
#: the one place varints are read and written by hand
_VARINT_HOME = "codec/primitives.py"


def _varint_code(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, function) of each ``x & 0x7F``: the mark of a varint read or write by hand."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if (
                isinstance(child, ast.BinOp)
                and isinstance(child.op, ast.BitAnd)
                and any(isinstance(o, ast.Constant) and o.value == 0x7F for o in (child.left, child.right))
            ):
                found.append((child.lineno, name))
            visit(child, name)

    visit(tree, "<module>")
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_codec_owns_the_varint(package: str) -> None:
    """One varint, compact-length and tagged-field reader (kgate.codec.primitives), not one per
    layer: a second copy drifts (limits, errors) and each copy is another place to get it wrong."""
    wrong = []
    for path in _modules(package):
        rel = str(path.relative_to(REPO))
        if rel == _VARINT_HOME:
            continue
        for line, function in _varint_code(ast.parse(path.read_text(), rel)):
            if (rel, function) not in _VARINT_ALLOWED:
                wrong.append(f"{rel}:{line}: {function}")
    assert not wrong, "use kgate.codec.primitives (read_uvarint, skip_tagged):\n" + "\n".join(wrong)


def test_the_varint_check_catches_what_it_is_for() -> None:
    bad = ast.parse(
        "def rd(buf, p):\n    b = buf[p]\n    v = (b & 0x7F) << 7\n"
        "def wr(v):\n    return bytes([(v & 127) | 0x80, v >> 7])\n"
    )
    assert _varint_code(bad) == [(3, "rd"), (5, "wr")]
    assert _varint_code(ast.parse("x = b & 0x80\ny = n & 0xFF\n")) == []


def test_every_allowed_varint_copy_still_exists() -> None:
    """The allowance shrinks when a copy goes: a stale entry would admit a new copy by that name."""
    present = set()
    for package in PACKAGES:
        for path in _modules(package):
            rel = str(path.relative_to(REPO))
            present |= {(rel, f) for _, f in _varint_code(ast.parse(path.read_text(), rel))}
    assert _VARINT_ALLOWED <= present, _VARINT_ALLOWED - present


# -- where a package lives (docs/architecture.md, "Layout") -------------------------------------
#: the packages the project's guide keeps at the repository's top, linked into ``kgate/``
_TOP_LEVEL = {"codec", "config", "filters", "pipeline", "proxy"}
#: what ``kgate/`` holds besides its packages
_KGATE_FILES = {"__init__.py", "__main__.py", "py.typed"}


def test_one_rule_for_where_a_package_lives() -> None:
    """A package is a top-level folder linked into ``kgate/`` by a relative symlink when the guide
    fixes it at the top, and a real folder under ``kgate/`` otherwise: never both, never a top-level
    package left unlinked (it would be importable under a second name), nothing else in ``kgate/``."""
    wrong = []
    kgate = REPO / "kgate"
    for entry in sorted(kgate.iterdir()):
        name = entry.name
        if name == "__pycache__" or name in _KGATE_FILES:
            continue
        if entry.is_symlink():
            target = os.readlink(entry)
            if name not in _TOP_LEVEL or target != f"../{name}":
                wrong.append(f"kgate/{name} -> {target}: only {sorted(_TOP_LEVEL)} are linked, each to ../<name>")
        elif entry.is_dir():
            if name in _TOP_LEVEL or (REPO / name).exists():
                wrong.append(f"kgate/{name}/: a real folder with a top-level twin")
            elif not (entry / "__init__.py").is_file():
                wrong.append(f"kgate/{name}/: not a package")
        else:
            wrong.append(f"kgate/{name}: only {sorted(_KGATE_FILES)} and packages belong here")
    for name in sorted(_TOP_LEVEL):
        if not (kgate / name).is_symlink():
            wrong.append(f"{name}/: a top-level package not linked as kgate/{name}")
    for entry in sorted(REPO.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").is_file() and entry.name not in _TOP_LEVEL | {"kgate"}:
            wrong.append(f"{entry.name}/: a top-level package the layout does not name (docs/architecture.md)")
    assert not wrong, "\n".join(wrong)
