"""The ``guardrails`` filter's bounds: its configuration, validated, and the pure checks over it.

Kept apart from the filter (``filters.builtin.guardrails``) so the rules can be read and tested
without messages: each check takes plain values (a partition count, a config name and value) and
returns ``None`` or a ``Refusal`` naming the rule, the Kafka error code and a message that states
the limit, as Kafka's ``CreateTopicPolicy`` / ``AlterConfigPolicy`` messages do.

Every key is optional; the defaults (``DEFAULTS``, documented in docs/guardrails.md) are far above
what a normal workload asks for and far below what makes a broker allocate without bound.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgate.api import ErrorCode, FilterConfigError

#: Kafka's own rule for topic names (``Topic.validate``: legal characters, at most 249 of them)
KAFKA_TOPIC_NAME = r"[a-zA-Z0-9._-]+"
KAFKA_TOPIC_NAME_MAX = 249
#: every ``acks`` value Kafka accepts (-1 is ``all``)
KAFKA_ACKS = (-1, 0, 1)

DEFAULTS: Mapping[str, Any] = {
    "partitions": {"min_per_topic": 1, "max_per_topic": 10_000, "max_per_request": 50_000},
    "replication_factor": {"min": 1, "max": 16},
    "topic_name": {"pattern": KAFKA_TOPIC_NAME, "max_length": KAFKA_TOPIC_NAME_MAX},
    "topic_configs": {"allow": None, "deny": [], "ranges": {"segment.bytes": {"min": 1_048_576}}},
    "produce": {"acks": None, "max_batch_bytes": None},
}
_SECTIONS = tuple(DEFAULTS)
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why one entry (a topic, a config resource, a Produce) is refused."""

    rule: str  # the ``rule`` label of kgate_guardrail_refusals_total
    code: int  # the Kafka error code the entry is answered with
    message: str  # the error message the client sees (and the log line)


@dataclass(frozen=True, slots=True)
class Range:
    """Inclusive bounds on an integer config value; None: unbounded on that side."""

    min: int | None
    max: int | None

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return f"between {self.min} and {self.max}"
        return f"at least {self.min}" if self.min is not None else f"at most {self.max}"


# -- validation ---------------------------------------------------------------------------------
def _mapping(value: Any, path: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """``value`` as a mapping with only ``keys``; ``path`` "" is the filter's config itself."""
    where = f"{path}: " if path else ""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FilterConfigError(f"{where}expected a mapping, got {value!r}")
    unknown = sorted(set(value) - set(keys), key=str)
    if unknown:
        raise FilterConfigError(f"{where}unknown keys {unknown} (allowed: {', '.join(keys)})")
    return value


def _int(value: Any, path: str, lo: int, hi: int, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        extra = " or null (no bound)" if optional else ""
        raise FilterConfigError(f"{path}: expected an integer from {lo} to {hi}{extra}, got {value!r}")
    return value


def _bounds(section: Mapping[str, Any], path: str, lo_key: str, hi_key: str, lo: int, hi: int) -> tuple[int, int]:
    low = _int(section[lo_key], f"{path}.{lo_key}", lo, hi)
    high = _int(section[hi_key], f"{path}.{hi_key}", lo, hi)
    assert low is not None
    assert high is not None
    if low > high:
        raise FilterConfigError(f"{path}: {lo_key} ({low}) is above {hi_key} ({high})")
    return low, high


def _names(value: Any, path: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FilterConfigError(f"{path}: expected a list of config names, got {value!r}")
    return list(value)


def _ranges(value: Any, path: str) -> dict[str, dict[str, int | None] | None]:
    """Config name -> {min, max}; ``null`` for a name removes that default range."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FilterConfigError(f"{path}: expected a mapping of config name -> {{min, max}}, got {value!r}")
    out: dict[str, dict[str, int | None] | None] = {}
    for name, bounds in value.items():
        where = f"{path}.{name}"
        if not isinstance(name, str) or not name:
            raise FilterConfigError(f"{path}: config names must be non-empty strings, got {name!r}")
        if bounds is None:
            out[name] = None
            continue
        b = _mapping(bounds, where, ("min", "max"))
        lo = _int(b.get("min"), f"{where}.min", -_INT64_MAX - 1, _INT64_MAX, optional=True)
        hi = _int(b.get("max"), f"{where}.max", -_INT64_MAX - 1, _INT64_MAX, optional=True)
        if lo is None and hi is None:
            raise FilterConfigError(f"{where}: give min, max or both (null removes the range)")
        if lo is not None and hi is not None and lo > hi:
            raise FilterConfigError(f"{where}: min ({lo}) is above max ({hi})")
        out[name] = {"min": lo, "max": hi}
    return out


def _acks(value: Any, path: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise FilterConfigError(f"{path}: expected a non-empty list of acks values (-1 or all, 0, 1), got {value!r}")
    out = []
    for i, a in enumerate(value):
        a = -1 if a == "all" else a
        if isinstance(a, bool) or a not in KAFKA_ACKS:
            raise FilterConfigError(f"{path}[{i}]: expected -1 (or all), 0 or 1, got {value[i]!r}")
        out.append(a)
    return sorted(set(out))


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """The complete configuration (defaults filled in), or FilterConfigError naming the key path."""
    top = _mapping(config, "", _SECTIONS)
    given = {name: _mapping(top.get(name), name, tuple(DEFAULTS[name])) for name in _SECTIONS}
    p, rf, tn, tc, pr = ({**DEFAULTS[name], **given[name]} for name in _SECTIONS)

    p_lo, p_hi = _bounds(p, "partitions", "min_per_topic", "max_per_topic", 1, _INT32_MAX)
    per_request = _int(p["max_per_request"], "partitions.max_per_request", 1, _INT64_MAX)
    rf_lo, rf_hi = _bounds(rf, "replication_factor", "min", "max", 1, 32767)
    pattern = tn["pattern"]
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise FilterConfigError(f"topic_name.pattern: expected a regular expression or null, got {pattern!r}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise FilterConfigError(f"topic_name.pattern: not a valid regular expression: {exc}") from None
    max_length = _int(tn["max_length"], "topic_name.max_length", 1, 32767)
    # ranges given are merged over the default ones, name by name (null removes a default)
    ranges = {
        **_ranges(DEFAULTS["topic_configs"]["ranges"], "defaults"),
        **_ranges(given["topic_configs"].get("ranges"), "topic_configs.ranges"),
    }
    return {
        "partitions": {"min_per_topic": p_lo, "max_per_topic": p_hi, "max_per_request": per_request},
        "replication_factor": {"min": rf_lo, "max": rf_hi},
        "topic_name": {"pattern": pattern, "max_length": max_length},
        "topic_configs": {
            "allow": _names(tc["allow"], "topic_configs.allow"),
            "deny": _names(tc["deny"], "topic_configs.deny") or [],
            "ranges": {k: v for k, v in ranges.items() if v is not None},
        },
        "produce": {
            "acks": _acks(pr["acks"], "produce.acks"),
            "max_batch_bytes": _int(pr["max_batch_bytes"], "produce.max_batch_bytes", 1, _INT32_MAX, optional=True),
        },
    }


# -- the checks -----------------------------------------------------------------------------------
class Rules:
    """The checks of one configuration (one per filter instance, so per virtual cluster)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        p, rf, tn, tc, pr = (config[s] for s in _SECTIONS)
        self.min_partitions: int = p["min_per_topic"]
        self.max_partitions: int = p["max_per_topic"]
        self.max_partitions_per_request: int = p["max_per_request"]
        self.min_rf: int = rf["min"]
        self.max_rf: int = rf["max"]
        self._pattern = re.compile(tn["pattern"]) if tn["pattern"] is not None else None
        self._pattern_text = tn["pattern"]
        self.max_name_length: int = tn["max_length"]
        self._allow = frozenset(tc["allow"]) if tc["allow"] is not None else None
        self._deny = frozenset(tc["deny"])
        self.ranges = {name: Range(r["min"], r["max"]) for name, r in tc["ranges"].items()}
        self.acks: frozenset[int] | None = frozenset(pr["acks"]) if pr["acks"] is not None else None
        self.max_batch_bytes: int | None = pr["max_batch_bytes"]

    @property
    def checks_produce(self) -> bool:
        """Whether any Produce rule is configured (otherwise Produce is not hooked at all)."""
        return self.acks is not None or self.max_batch_bytes is not None

    def topic_name(self, name: str) -> Refusal | None:
        if len(name) > self.max_name_length:
            return Refusal(
                "topic_name",
                ErrorCode.POLICY_VIOLATION,
                f"Topic name is {len(name)} characters long; the limit is {self.max_name_length} "
                "(kgate guardrails: topic_name.max_length).",
            )
        if self._pattern is not None and self._pattern.fullmatch(name) is None:
            return Refusal(
                "topic_name",
                ErrorCode.POLICY_VIOLATION,
                f"Topic name {name[:100]!r} does not match {self._pattern_text!r} "
                "(kgate guardrails: topic_name.pattern).",
            )
        return None

    def partitions(self, count: int) -> Refusal | None:
        """A topic's partition count (CreateTopics' num_partitions or assignments, CreatePartitions' count)."""
        if count > self.max_partitions:
            return Refusal(
                "partitions_per_topic",
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions {count} is above the limit of {self.max_partitions} per topic "
                "(kgate guardrails: partitions.max_per_topic).",
            )
        if count < self.min_partitions:
            return Refusal(
                "partitions_per_topic",
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions {count} is below the minimum of {self.min_partitions} "
                "(kgate guardrails: partitions.min_per_topic).",
            )
        return None

    def request_partitions(self, total: int) -> Refusal:
        return Refusal(
            "partitions_per_request",
            ErrorCode.INVALID_PARTITIONS,
            f"This request would create {total} partitions; the limit is "
            f"{self.max_partitions_per_request} per request (kgate guardrails: partitions.max_per_request).",
        )

    def replication_factor(self, rf: int) -> Refusal | None:
        if self.min_rf <= rf <= self.max_rf:
            return None
        return Refusal(
            "replication_factor",
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor {rf} is outside {self.min_rf}-{self.max_rf} "
            "(kgate guardrails: replication_factor.min/max).",
        )

    def topic_config(self, name: str, value: str | None, sets_value: bool = True) -> Refusal | None:
        """One topic config entry: its name against allow/deny, a value it sets against its range."""
        if name in self._deny or (self._allow is not None and name not in self._allow):
            which = "deny" if name in self._deny else "allow"
            return Refusal(
                "topic_config",
                ErrorCode.POLICY_VIOLATION,
                f"Topic config {name!r} may not be set through kgate (kgate guardrails: topic_configs.{which}).",
            )
        bounds = self.ranges.get(name)
        if bounds is None or not sets_value or value is None:
            return None
        try:
            number = int(value.strip())
        except ValueError:
            return Refusal(
                "config_range",
                ErrorCode.POLICY_VIOLATION,
                f"Topic config {name} is {value[:100]!r}, not an integer "
                f"(kgate guardrails: topic_configs.ranges.{name}).",
            )
        if (bounds.min is not None and number < bounds.min) or (bounds.max is not None and number > bounds.max):
            return Refusal(
                "config_range",
                ErrorCode.POLICY_VIOLATION,
                f"Topic config {name} is {number}; it must be {bounds.describe()} "
                f"(kgate guardrails: topic_configs.ranges.{name}).",
            )
        return None

    def acks_allowed(self, acks: int) -> Refusal | None:
        if self.acks is None or acks in self.acks:
            return None
        allowed = ", ".join(str(a) for a in sorted(self.acks))
        return Refusal(
            "produce_acks",
            ErrorCode.POLICY_VIOLATION,
            f"acks={acks} is not allowed; allowed: {allowed} (kgate guardrails: produce.acks).",
        )

    def batch_bytes(self, size: int) -> Refusal | None:
        if self.max_batch_bytes is None or size <= self.max_batch_bytes:
            return None
        return Refusal(
            "produce_batch_bytes",
            ErrorCode.MESSAGE_TOO_LARGE,
            f"Record batch of {size} bytes is above the limit of {self.max_batch_bytes} "
            "(kgate guardrails: produce.max_batch_bytes).",
        )
