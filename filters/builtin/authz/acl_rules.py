"""The access-control rule engine: ``(rules, request facts) -> allowed?``, a pure function.

Kafka's ACL model is the reference (``AclAuthorizer`` / ``StandardAuthorizer``, KIP-290 prefixed
ACLs); kgate adds client-id patterns, CIDR source addresses and shell-style glob resource names.
A rule says *who* (principal, client id, source address), *what* (a resource: topic, group,
transactional id or the cluster; named literally, by prefix or by glob), *which operations* and
whether it allows or denies them. A request is allowed when an allow rule matches it and no deny
rule does (deny wins); a request no rule matches gets the configured default.

Kafka's implications hold for allow rules only, as in Kafka: allowing read, write, delete or
alter allows describe; allowing alter_configs allows describe_configs. A deny rule denies exactly
the operations it names (``all``: every one), so "deny read" still lets a client see the topic.

Compiled once at load: rules are grouped per (resource type, operation) and inside a group
indexed by name (literal names in a dict, prefixes in a dict probed once per distinct prefix
length, globs last as compiled regexes), so a check looks at the few rules that can match
rather than all of them. Decisions are also remembered per (identity, resource, operation) in a
bounded dict: a client asks about the same few resources over and over.

Nothing here knows about Kafka messages; ``filters.builtin.acl_table`` says which api key needs
which check, and ``filters.builtin.authorizer`` applies it.
"""

from __future__ import annotations

import enum
import fnmatch
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgate.api import FilterConfigError


class Op(enum.IntEnum):
    """Operations, as Kafka names them (``AclOperation``)."""

    READ = enum.auto()
    WRITE = enum.auto()
    CREATE = enum.auto()
    DELETE = enum.auto()
    ALTER = enum.auto()
    DESCRIBE = enum.auto()
    DESCRIBE_CONFIGS = enum.auto()
    ALTER_CONFIGS = enum.auto()
    IDEMPOTENT_WRITE = enum.auto()
    CLUSTER_ACTION = enum.auto()  # inter-broker RPCs; no client needs it


class Res(enum.IntEnum):
    """Resource types (Kafka's ``ResourceType``, without delegation tokens and users)."""

    TOPIC = 1
    GROUP = 2
    TRANSACTIONAL_ID = 3
    CLUSTER = 4


#: allowing the key allows these too (Kafka: ``AclAuthorizer``'s implied operations)
IMPLIES: Mapping[Op, frozenset[Op]] = {
    Op.READ: frozenset({Op.DESCRIBE}),
    Op.WRITE: frozenset({Op.DESCRIBE}),
    Op.DELETE: frozenset({Op.DESCRIBE}),
    Op.ALTER: frozenset({Op.DESCRIBE}),
    Op.ALTER_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS}),
}

ANONYMOUS = "ANONYMOUS"  # the principal of a connection that did not authenticate (Kafka's User:ANONYMOUS)
CLUSTER_NAME = "kafka-cluster"  # Kafka's name for the one cluster resource


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is asking: the request facts that do not depend on the resource."""

    principal: str = ANONYMOUS  # SASL user name (TLS subject later); ANONYMOUS when not authenticated
    client_id: str = ""
    host: str = ""  # the client's IP address, without port


def identity(principal: str | None, client_id: str | None, client_address: str) -> Identity:
    """An ``Identity`` from a connection's facts (``client_address`` is ``"host:port"``)."""
    host = client_address.rsplit(":", 1)[0] if ":" in client_address else client_address
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Identity(principal or ANONYMOUS, client_id or "", host)


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule, compiled: ``allow`` or deny ``ops`` on resources of ``res`` matching ``pattern``."""

    allow: bool
    ops: frozenset[Op]  # for allow rules: the implied operations included
    res: Res
    kind: str  # "literal" ("*": any name), "prefix" or "glob"; the cluster: literal "*"
    pattern: str
    principals: frozenset[str] | None = None  # None: anyone
    client_ids: re.Pattern[str] | None = None  # None: any client id
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None = None  # None: anywhere
    index: int = 0  # position in the configuration, for logs

    def matches_identity(self, who: Identity) -> bool:
        if self.principals is not None and who.principal not in self.principals:
            return False
        if self.client_ids is not None and not self.client_ids.match(who.client_id):
            return False
        if self.networks is not None:
            try:
                addr = ipaddress.ip_address(who.host)
            except ValueError:
                return False
            return any(addr in net for net in self.networks)
        return True

    def covers_every_name(self) -> bool:
        return (
            (self.kind == "literal" and self.pattern == "*")
            or (self.kind == "prefix" and not self.pattern)
            or (self.kind == "glob" and self.pattern == "*")
        )


_WILDCARDS = re.compile(r"[*?\[]")


class _Index:
    """The rules of one (resource type, operation), indexed by how they name resources.

    Literal names: one dict lookup. Prefixes: one dict lookup per distinct prefix length. Globs:
    bucketed by their literal head (the text before the first wildcard) the same way, so a glob is
    matched as a regex only against names that start with its head; globs that start with a
    wildcard are matched against every name, last.
    """

    __slots__ = ("any", "glob_heads", "glob_lengths", "globs_anywhere", "literal", "prefix_lengths", "prefixes")

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.literal: dict[str, list[Rule]] = {}
        self.prefixes: dict[str, list[Rule]] = {}
        self.any: list[Rule] = []
        self.glob_heads: dict[str, list[tuple[re.Pattern[str], Rule]]] = {}
        self.globs_anywhere: list[tuple[re.Pattern[str], Rule]] = []
        for r in rules:
            if r.covers_every_name():
                self.any.append(r)
            elif r.kind == "literal":
                self.literal.setdefault(r.pattern, []).append(r)
            elif r.kind == "prefix":
                self.prefixes.setdefault(r.pattern, []).append(r)
            else:
                compiled = (re.compile(fnmatch.translate(r.pattern)), r)
                wildcard = _WILDCARDS.search(r.pattern)
                head = r.pattern[: wildcard.start()] if wildcard else r.pattern
                if head:
                    self.glob_heads.setdefault(head, []).append(compiled)
                else:
                    self.globs_anywhere.append(compiled)
        self.prefix_lengths = sorted({len(p) for p in self.prefixes})
        self.glob_lengths = sorted({len(h) for h in self.glob_heads})

    def candidates(self, name: str) -> list[Rule]:
        found = list(self.any)
        hit = self.literal.get(name)
        if hit:
            found += hit
        n = len(name)
        for length in self.prefix_lengths:
            if length > n:
                break
            hit = self.prefixes.get(name[:length])
            if hit:
                found += hit
        for length in self.glob_lengths:
            if length > n:
                break
            globs = self.glob_heads.get(name[:length])
            if globs:
                found += [r for rx, r in globs if rx.match(name)]
        for rx, r in self.globs_anywhere:
            if rx.match(name):
                found.append(r)
        return found

    def all_rules(self) -> list[Rule]:
        rules = list(self.any) + [r for rs in self.literal.values() for r in rs]
        rules += [r for rs in self.prefixes.values() for r in rs]
        rules += [r for gs in self.glob_heads.values() for _rx, r in gs] + [r for _rx, r in self.globs_anywhere]
        return rules


class RuleSet:
    """Compiled rules plus the default; ``allowed`` is the decision."""

    CACHE_MAX = 100_000

    def __init__(self, rules: Sequence[Rule], default_allow: bool) -> None:
        self.rules = tuple(rules)
        self.default_allow = default_allow
        grouped: dict[tuple[Res, Op], list[Rule]] = {}
        for r in self.rules:
            for op in r.ops:
                grouped.setdefault((r.res, op), []).append(r)
        self._index = {key: _Index(rs) for key, rs in grouped.items()}
        self._cache: dict[tuple[str, str, str, Res, Op, str], bool] = {}

    def allowed(self, who: Identity, res: Res, name: str, op: Op) -> bool:
        """Whether ``who`` may do ``op`` on resource ``res`` named ``name`` (deny wins; else default)."""
        key = (who.principal, who.client_id, who.host, res, op, name)
        verdict = self._cache.get(key)
        if verdict is None:
            verdict = self.decide(who, res, name, op)
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[key] = verdict
        return verdict

    def decide(self, who: Identity, res: Res, name: str, op: Op) -> bool:
        """``allowed`` without the cache: the pure decision."""
        index = self._index.get((res, op))
        if index is None:
            return self.default_allow
        matched_allow = False
        for rule in index.candidates(CLUSTER_NAME if res is Res.CLUSTER else name):
            if not rule.matches_identity(who):
                continue
            if not rule.allow:
                return False
            matched_allow = True
        return matched_allow or self.default_allow

    def denied(self, who: Identity, res: Res, name: str, op: Op) -> bool:
        """Whether a deny rule matches (not the default): a topic-level deny beats a cluster-level allow."""
        index = self._index.get((res, op))
        if index is None:
            return False
        return any(not r.allow and r.matches_identity(who) for r in index.candidates(name))

    def allowed_somewhere(self, who: Identity, res: Res, op: Op) -> bool:
        """Whether ``who`` may do ``op`` on at least some resource of type ``res``.

        Kafka's ``authorizeByResourceType`` (KIP-679: an idempotent producer needs IDEMPOTENT_WRITE
        on the cluster *or* WRITE on any topic): true when an allow rule for it matches ``who``
        (or the default allows) and no deny rule for it covering every name does.
        """
        index = self._index.get((res, op))
        if index is None:
            return self.default_allow
        rules = [r for r in index.any if r.matches_identity(who)]
        if any(not r.allow for r in rules):
            return False
        if self.default_allow or rules:
            return True
        return any(r.allow and r.matches_identity(who) for r in index.all_rules())


# -- configuration -----------------------------------------------------------------------------
OPERATION_NAMES = {op.name.lower(): op for op in Op}
RESOURCE_KEYS = {
    "topic": Res.TOPIC,
    "group": Res.GROUP,
    "transactional_id": Res.TRANSACTIONAL_ID,
    "cluster": Res.CLUSTER,
}
RULE_KEYS = ("allow", "deny", "principal", "client_id", "host", *RESOURCE_KEYS)
PATTERN_KINDS = ("literal", "prefix", "glob")


def _strings(value: Any, key: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) and v for v in value):
        raise FilterConfigError(f"{key}: expected a non-empty string or list of strings, got {value!r}")
    return list(value)


def _operations(value: Any, key: str) -> frozenset[Op]:
    names = _strings(value, key)
    if "all" in names:
        return frozenset(Op)
    ops = set()
    for n in names:
        op = OPERATION_NAMES.get(n.lower())
        if op is None:
            raise FilterConfigError(f"{key}: unknown operation {n!r} (known: all, {', '.join(OPERATION_NAMES)})")
        ops.add(op)
    return frozenset(ops)


def _principals(value: Any, key: str) -> frozenset[str] | None:
    names = set()
    for p in _strings(value, key):
        name = p[len("User:") :] if p.startswith("User:") else p
        if name == "*":
            return None
        names.add(name)
    return frozenset(names)


def _networks(value: Any, key: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None:
    nets = []
    for h in _strings(value, key):
        if h == "*":
            return None
        try:
            nets.append(ipaddress.ip_network(h, strict=False))
        except ValueError as exc:
            raise FilterConfigError(f"{key}: {h!r} is not an IP address or CIDR block ({exc})") from None
    return tuple(nets)


def _resource(key: str, value: Any, path: str) -> tuple[Res, str, str]:
    res = RESOURCE_KEYS[key]
    if res is Res.CLUSTER:
        if value is not True:
            raise FilterConfigError(f"{path}.cluster: expected true, got {value!r}")
        return res, "literal", "*"
    if isinstance(value, str) and value:
        return res, "literal", value
    if isinstance(value, Mapping) and len(value) == 1:
        ((kind, pattern),) = value.items()
        if kind in PATTERN_KINDS and isinstance(pattern, str) and (pattern or kind == "prefix"):
            return res, kind, pattern
    raise FilterConfigError(
        f'{path}.{key}: expected a name ("*" for any) or one of {{literal: NAME}}, {{prefix: TEXT}}, '
        f"{{glob: PATTERN}}, got {value!r}"
    )


def parse_rule(raw: Any, index: int) -> Rule:
    """One rule from its YAML mapping (``rules[index]``); raises FilterConfigError naming the key."""
    path = f"rules[{index}]"
    if not isinstance(raw, Mapping):
        raise FilterConfigError(f"{path}: expected a mapping, got {raw!r}")
    unknown = set(raw) - set(RULE_KEYS)
    if unknown:
        raise FilterConfigError(f"{path}: unknown keys {sorted(unknown)} (allowed: {', '.join(RULE_KEYS)})")
    effects = [k for k in ("allow", "deny") if k in raw]
    if len(effects) != 1:
        raise FilterConfigError(f"{path}: exactly one of allow, deny (the operations) is required")
    effect = effects[0]
    ops = _operations(raw[effect], f"{path}.{effect}")
    resources = [k for k in RESOURCE_KEYS if k in raw]
    if len(resources) != 1:
        raise FilterConfigError(f"{path}: exactly one resource key is required: {', '.join(RESOURCE_KEYS)}")
    res, kind, pattern = _resource(resources[0], raw[resources[0]], path)
    allow = effect == "allow"
    if allow:
        ops = frozenset(ops.union(*(IMPLIES.get(op, frozenset()) for op in ops)))
    client_ids = None
    if "client_id" in raw:
        pats = _strings(raw["client_id"], f"{path}.client_id")
        if "*" not in pats:
            client_ids = re.compile("|".join(fnmatch.translate(p) for p in pats))
    return Rule(
        allow=allow,
        ops=ops,
        res=res,
        kind=kind,
        pattern=pattern,
        principals=_principals(raw["principal"], f"{path}.principal") if "principal" in raw else None,
        client_ids=client_ids,
        networks=_networks(raw["host"], f"{path}.host") if "host" in raw else None,
        index=index,
    )


def parse_rules(raw: Any) -> list[Rule]:
    if raw is None:
        return []
    if not isinstance(raw, list | tuple):
        raise FilterConfigError(f"rules: expected a list of rules, got {raw!r}")
    return [parse_rule(r, i) for i, r in enumerate(raw)]


def topic_policy_rules(deny: Sequence[str], allow: Sequence[str] | None) -> tuple[list[Rule], bool]:
    """``topic-policy``'s lists as rules: each deny pattern denies everything on matching topics;
    with an allow list the default is deny and each allow pattern allows everything.

    Returns (rules, default_allow). Groups, transactional ids and the cluster stay allowed: the
    sugar governs topics only, as topic-policy always did.
    """
    everything = frozenset(Op)
    rules = [Rule(False, everything, Res.TOPIC, "glob", p, index=i) for i, p in enumerate(deny)]
    if allow is None:
        return rules, True
    rules += [Rule(True, everything, Res.TOPIC, "glob", p, index=len(deny) + i) for i, p in enumerate(allow)]
    for res in (Res.GROUP, Res.TRANSACTIONAL_ID, Res.CLUSTER):
        rules.append(Rule(True, everything, res, "literal", "*", index=len(rules)))
    return rules, False
