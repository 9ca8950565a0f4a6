"""What a configuration reload changes: the running config against the new one, as a plan (pure).

A reload may change exactly two things while kgate runs:

- **filter chains**: a virtual cluster whose chain (its own ``filters``, or the top-level ``filters``
  it inherits) differs gets the new chain for requests that start after the reload;
- **the set of virtual clusters**: a cluster (by ``name``) that is new starts listening, one that
  is gone stops accepting and drains.

Everything else is fixed for the life of the process: the top-level ``proxy``, ``topic_names``,
``admin``/``metrics``, ``log_level``/``log_format``, and every setting of a cluster that stays
(listen address, upstream, node ports, TLS, PROXY protocol, SASL towards the brokers, limits).
A difference there refuses the *whole* reload, naming each key path, so that after a successful
reload the file on disk is exactly what runs; a silently deferred change would leave an operator
believing a setting is in force when it is not. To move a cluster, give it a new name (remove +
add in one reload; its clients reconnect to the new one) or restart.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .errors import ConfigError
from .model import FilterConfig, KgateConfig, VirtualClusterConfig

#: top-level keys whose value is fixed at start-up (``filters`` and ``virtual_clusters`` may change)
RESTART_ONLY_TOP = ("proxy", "topic_names", "admin", "metrics", "log_level", "log_format")


@dataclass(frozen=True)
class ReloadPlan:
    """Cluster names to add, remove, and give a new chain (in the new config's order)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    chains_replaced: tuple[str, ...] = ()
    #: name -> the new config's cluster, for every cluster of the new config
    clusters: dict[str, VirtualClusterConfig] = field(default_factory=dict)

    @property
    def changes_nothing(self) -> bool:
        return not (self.added or self.removed or self.chains_replaced)

    def summary(self) -> str:
        """One phrase for the log line and the admin answer."""
        if self.changes_nothing:
            return "no changes"
        parts = []
        for what, names in (
            ("clusters added", self.added),
            ("clusters removed", self.removed),
            ("filter chains replaced", self.chains_replaced),
        ):
            if names:
                parts.append(f"{what}: {', '.join(names)}")
        return "; ".join(parts)


def _differing_fields(old: object, new: object, path: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Key paths under ``path`` whose values differ (one level of nested dataclasses spelled out)."""
    if old == new:
        return []
    if not (dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new) and type(old) is type(new)):
        return [path]
    paths: list[str] = []
    for f in dataclasses.fields(old):
        if f.name in skip:
            continue
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a != b:
            paths.append(f"{path}.{f.name}" if path else f.name)
    return paths


def _chain_key(chain: tuple[FilterConfig, ...]) -> list[tuple[str, object]]:
    """A chain as comparable data (FilterConfig's config is excluded from its hash, not its equality)."""
    return [(f.name, f.config) for f in chain]


def plan_reload(running: KgateConfig, new: KgateConfig, source: str = "") -> ReloadPlan:
    """The plan that turns ``running`` into ``new``; ConfigError naming every restart-only key that differs."""
    problems: list[str] = []
    for key in RESTART_ONLY_TOP:
        # from_metrics_listen is kgate's own note of which spelling named the admin listener, not a key
        skip = ("from_metrics_listen",) if key == "admin" else ()
        problems.extend(_differing_fields(getattr(running, key), getattr(new, key), key, skip))
    old_by_name = {vc.name: vc for vc in running.virtual_clusters}
    new_names = {vc.name for vc in new.virtual_clusters}
    added: list[str] = []
    chains: list[str] = []
    for i, vc in enumerate(new.virtual_clusters):
        old = old_by_name.get(vc.name)
        if old is None:
            added.append(vc.name)
            continue
        problems.extend(_differing_fields(old, vc, f"virtual_clusters[{i}]", skip=("filters",)))
        if _chain_key(running.chain_for(old)) != _chain_key(new.chain_for(vc)):
            chains.append(vc.name)
    removed = [vc.name for vc in running.virtual_clusters if vc.name not in new_names]
    if problems:
        raise ConfigError(
            source,
            ", ".join(problems),
            "changes only at restart (a reload changes filter chains and adds or removes virtual clusters; "
            "to move a cluster, rename it); nothing was changed",
        )
    return ReloadPlan(
        added=tuple(added),
        removed=tuple(removed),
        chains_replaced=tuple(chains),
        clusters={vc.name: vc for vc in new.virtual_clusters},
    )
