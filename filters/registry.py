"""Finding filter classes by the name used in YAML: built-ins first, then plugins.

Third-party filters are distributions that declare an entry point in the group
``kgate.filters`` (``name = "package.module:FilterClass"``). kgate loads them by name when a
config names them, validates their config at load time (so ``kgate check-config`` catches
mistakes before anything binds) and makes one instance per virtual cluster.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from kgate.api import Filter, FilterConfigError

ENTRY_POINT_GROUP = "kgate.filters"

BUILTINS: dict[str, str] = {
    "topic-policy": "kgate.filters.builtin.authz.topic_policy:TopicPolicy",
    "authorizer": "kgate.filters.builtin.authz.authorizer:Authorizer",
    "audit-log": "kgate.filters.builtin.audit.filter:AuditLog",
    "internal-topics": "kgate.filters.builtin.internal_topics.filter:InternalTopics",
    "guardrails": "kgate.filters.builtin.guardrails.filter:Guardrails",
    "quotas": "kgate.filters.builtin.quotas.filter:Quotas",
}


_REGISTERED: dict[str, type[Filter]] = {}


def register_filter(name: str, cls: type[Filter]) -> None:
    """Make a filter class available by name without packaging it (embedding kgate, tests)."""
    if not (isinstance(cls, type) and issubclass(cls, Filter)):
        raise TypeError(f"{cls!r} is not a kgate Filter subclass")
    _REGISTERED[name] = cls


class FilterLookupError(LookupError):
    """No filter of that name is built in or installed as a plugin."""


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def filter_class(name: str) -> type[Filter]:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in BUILTINS:
        cls = _load(BUILTINS[name])
    else:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            known = sorted(set(BUILTINS) | set(_REGISTERED) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
            hint = difflib.get_close_matches(name, known, n=1)
            raise FilterLookupError(
                f"no filter named {name!r}"
                + (f' (did you mean "{hint[0]}"?)' if hint else "")
                + f"; built in or installed under entry point group {ENTRY_POINT_GROUP!r}: {', '.join(known)}"
            )
        try:
            cls = found[0].load()
        except Exception as exc:  # a broken plugin must fail config loading, clearly
            raise FilterLookupError(f"filter plugin {name!r} failed to load: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Filter)):
        raise FilterLookupError(f"filter {name!r} resolves to {cls!r}, which is not a kgate Filter subclass")
    if cls.name and cls.name != name and name not in _REGISTERED:
        # Filter.name is the name the class declares for itself; one that disagrees with the entry
        # point (or built-in) name it was found under is a packaging mistake, reported at load.
        raise FilterLookupError(
            f"filter {name!r} loads {cls.__module__}.{cls.__qualname__}, whose name is {cls.name!r}: "
            "the entry point name and Filter.name must agree"
        )
    return cls


def validate_filter_config(name: str, config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The filter's own validation; raises FilterLookupError or FilterConfigError."""
    cls = filter_class(name)
    result = cls.validate_config(dict(config))
    if not isinstance(result, Mapping):
        raise FilterConfigError(f"{cls.__name__}.validate_config returned {result!r}, not a mapping")
    return result


def build_filters(configs: Sequence[Any]) -> list[Filter]:
    """Instances for one virtual cluster, in configured order (configs are already validated)."""
    return [filter_class(c.name)(c.config) for c in configs]
