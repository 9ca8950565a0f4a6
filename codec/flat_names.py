"""Keep ``kgate.codec.generated.<api>`` importable now that the api modules live in subpackages.

docs/filters.md promises plugin authors ``kgate.codec.generated.<api>`` (e.g.
``from kgate.codec.generated.produce import ProduceRequest``); the modules now sit in
subpackages by concern (``kgate.codec.generated.data.produce``). A meta path finder answers the
flat name with the very module object of the new path, so classes stay identical either way and
nothing loads until a flat name is imported (the lazy registry's promise).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType


class _AliasLoader(importlib.abc.Loader):
    """Loads a flat name by importing the real module and handing back that same object."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._real_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamped the alias's spec on the shared module: give it back its own
        module.__spec__ = self._real_spec


class _FlatNameFinder(importlib.abc.MetaPathFinder):
    """Finds ``<package>.<flat>`` for each flat name in ``targets`` (flat -> dotted sub-path)."""

    def __init__(self, package: str, targets: Mapping[str, str]) -> None:
        self._package = package
        self._targets = dict(targets)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, leaf = fullname.rpartition(".")
        where = self._targets.get(leaf) if package == self._package else None
        if where is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(f"{package}.{where}"))


def install(package: str, targets: Mapping[str, str]) -> None:
    """Make ``package.<flat>`` import ``package.<targets[flat]>``; installing twice is harmless."""
    for finder in sys.meta_path:
        if isinstance(finder, _FlatNameFinder) and finder._package == package:
            return
    sys.meta_path.append(_FlatNameFinder(package, targets))
