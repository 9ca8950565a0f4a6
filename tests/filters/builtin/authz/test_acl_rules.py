"""The authorizer's rule engine as a pure function: (rules, request facts) -> allowed.

Example-based tests pin Kafka's semantics (deny wins, implications for allow rules only, the
default, literal / prefix / glob names, principal, client id and CIDR matching); a hypothesis
test checks the compiled index against a naive evaluation of every rule, so indexing never
changes a decision.
"""

from __future__ import annotations

import fnmatch
import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgate.api import FilterConfigError
from kgate.filters.builtin.authz.acl_rules import (
    ANONYMOUS,
    IMPLIES,
    Identity,
    Op,
    Res,
    Rule,
    RuleSet,
    identity,
    parse_rules,
    topic_policy_rules,
)

ALICE = Identity("alice", "svc-a", "10.1.2.3")
BOB = Identity("bob", "other", "192.168.0.9")


def rules(*raw: dict, default: str = "deny") -> RuleSet:
    return RuleSet(parse_rules(list(raw)), default == "allow")


def test_allow_needs_a_matching_rule_under_default_deny() -> None:
    rs = rules({"allow": ["read"], "topic": "orders", "principal": "User:alice"})
    assert rs.allowed(ALICE, Res.TOPIC, "orders", Op.READ)
    assert not rs.allowed(ALICE, Res.TOPIC, "orders", Op.WRITE)
    assert not rs.allowed(ALICE, Res.TOPIC, "orders2", Op.READ)
    assert not rs.allowed(BOB, Res.TOPIC, "orders", Op.READ)


def test_deny_wins_over_allow() -> None:
    rs = rules({"allow": "all", "topic": "*"}, {"deny": ["write"], "topic": {"prefix": "secret-"}})
    assert rs.allowed(ALICE, Res.TOPIC, "orders", Op.WRITE)
    assert not rs.allowed(ALICE, Res.TOPIC, "secret-pay", Op.WRITE)
    assert rs.allowed(ALICE, Res.TOPIC, "secret-pay", Op.READ)  # deny names only write


def test_default_allow_lets_unmatched_requests_through() -> None:
    rs = rules({"deny": "all", "topic": {"glob": "secret-*"}}, default="allow")
    assert rs.allowed(ALICE, Res.TOPIC, "orders", Op.DELETE)
    assert rs.allowed(ALICE, Res.GROUP, "g", Op.READ)
    assert not rs.allowed(ALICE, Res.TOPIC, "secret-x", Op.DESCRIBE)


@pytest.mark.parametrize(("op", "implied"), [(op, i) for op, imp in IMPLIES.items() for i in imp])
def test_implications_hold_for_allow_rules_only(op: Op, implied: Op) -> None:
    name = op.name.lower()
    assert rules({"allow": [name], "topic": "t"}).allowed(ALICE, Res.TOPIC, "t", implied)
    # a deny of the stronger operation does not deny the implied one (Kafka: deny matches exactly)
    assert rules({"deny": [name], "topic": "t"}, default="allow").allowed(ALICE, Res.TOPIC, "t", implied)


def test_describe_does_not_imply_read() -> None:
    assert not rules({"allow": ["describe"], "topic": "t"}).allowed(ALICE, Res.TOPIC, "t", Op.READ)


def test_pattern_kinds() -> None:
    rs = rules(
        {"allow": ["read"], "topic": {"literal": "a.b"}},
        {"allow": ["read"], "topic": {"prefix": "logs-"}},
        {"allow": ["read"], "topic": {"glob": "m?tr*cs"}},
    )
    assert rs.allowed(ALICE, Res.TOPIC, "a.b", Op.READ)
    assert not rs.allowed(ALICE, Res.TOPIC, "a.bc", Op.READ)
    assert rs.allowed(ALICE, Res.TOPIC, "logs-", Op.READ)
    assert rs.allowed(ALICE, Res.TOPIC, "logs-app", Op.READ)
    assert not rs.allowed(ALICE, Res.TOPIC, "log-app", Op.READ)
    assert rs.allowed(ALICE, Res.TOPIC, "metrics", Op.READ)
    assert rs.allowed(ALICE, Res.TOPIC, "mytrXcs", Op.READ)
    assert not rs.allowed(ALICE, Res.TOPIC, "metric", Op.READ)


def test_resource_types_are_separate() -> None:
    rs = rules({"allow": "all", "group": "g"})
    assert rs.allowed(ALICE, Res.GROUP, "g", Op.READ)
    assert not rs.allowed(ALICE, Res.TOPIC, "g", Op.READ)
    assert not rs.allowed(ALICE, Res.TRANSACTIONAL_ID, "g", Op.WRITE)


def test_cluster_rules() -> None:
    rs = rules({"allow": ["describe", "idempotent_write"], "cluster": True})
    assert rs.allowed(ALICE, Res.CLUSTER, "kafka-cluster", Op.DESCRIBE)
    assert rs.allowed(ALICE, Res.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)
    assert not rs.allowed(ALICE, Res.CLUSTER, "kafka-cluster", Op.ALTER)


def test_identity_matching() -> None:
    rs = rules(
        {"allow": ["read"], "topic": "by-principal", "principal": ["alice", "User:carol"]},
        {"allow": ["read"], "topic": "by-client", "client_id": "svc-*"},
        {"allow": ["read"], "topic": "by-host", "host": ["10.0.0.0/8", "::1"]},
        {"allow": ["read"], "topic": "anyone", "principal": "User:*", "client_id": "*", "host": "*"},
    )
    for topic in ("by-principal", "by-client", "by-host", "anyone"):
        assert rs.allowed(ALICE, Res.TOPIC, topic, Op.READ), topic
    topics = ("by-principal", "by-client", "by-host", "anyone")
    assert [t for t in topics if rs.allowed(BOB, Res.TOPIC, t, Op.READ)] == ["anyone"]
    v6 = Identity("x", "", "::1")
    assert rs.allowed(v6, Res.TOPIC, "by-host", Op.READ)


def test_identity_from_connection_facts() -> None:
    assert identity(None, None, "127.0.0.1:5555") == Identity(ANONYMOUS, "", "127.0.0.1")
    assert identity("alice", "c", "[::1]:9092") == Identity("alice", "c", "::1")
    rs = rules({"allow": ["read"], "topic": "t", "principal": "ANONYMOUS"})
    assert rs.allowed(identity(None, None, "1.2.3.4:1"), Res.TOPIC, "t", Op.READ)


def test_allowed_somewhere_for_idempotent_producers() -> None:
    rs = rules({"allow": ["write"], "topic": {"prefix": "orders-"}, "principal": "alice"})
    assert rs.allowed_somewhere(ALICE, Res.TOPIC, Op.WRITE)
    assert not rs.allowed_somewhere(BOB, Res.TOPIC, Op.WRITE)
    blocked = rules({"allow": ["write"], "topic": "t"}, {"deny": ["write"], "topic": "*"})
    assert not blocked.allowed_somewhere(ALICE, Res.TOPIC, Op.WRITE)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"topic": "t"}, "exactly one of allow, deny"),
        ({"allow": "read", "deny": "read", "topic": "t"}, "exactly one of allow, deny"),
        ({"allow": "reed", "topic": "t"}, "rules[0].allow: unknown operation 'reed'"),
        ({"allow": "read"}, "exactly one resource key"),
        ({"allow": "read", "topic": "t", "group": "g"}, "exactly one resource key"),
        ({"allow": "read", "topic": {"regex": "x"}}, "rules[0].topic: expected a name"),
        ({"allow": "read", "cluster": "yes"}, "rules[0].cluster: expected true"),
        ({"allow": "read", "topic": "t", "host": "10.0.0.0/33"}, "rules[0].host"),
        ({"allow": "read", "topic": "t", "principle": "x"}, "unknown keys ['principle']"),
        ({"allow": [], "topic": "t"}, "rules[0].allow: expected a non-empty"),
    ],
)
def test_config_errors_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(FilterConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_rules([raw])


def test_topic_policy_sugar() -> None:
    deny_only = RuleSet(*topic_policy_rules(["secret-*"], None))
    assert deny_only.decide(Identity(), Res.TOPIC, "orders", Op.READ)
    assert not deny_only.decide(Identity(), Res.TOPIC, "secret-x", Op.WRITE)
    assert deny_only.decide(Identity(), Res.GROUP, "g", Op.READ)
    with_allow = RuleSet(*topic_policy_rules(["orders-secret"], ["orders*"]))
    assert with_allow.decide(Identity(), Res.TOPIC, "orders-eu", Op.READ)
    assert not with_allow.decide(Identity(), Res.TOPIC, "orders-secret", Op.READ)
    assert not with_allow.decide(Identity(), Res.TOPIC, "audit", Op.READ)
    assert with_allow.decide(Identity(), Res.GROUP, "g", Op.READ)


def test_cache_is_bounded() -> None:
    rs = rules({"allow": ["read"], "topic": {"prefix": "t"}})
    rs.CACHE_MAX = 10
    for i in range(25):
        assert rs.allowed(ALICE, Res.TOPIC, f"t{i}", Op.READ)
    assert len(rs._cache) <= 10


# -- the index never changes a decision ----------------------------------------------------------
NAMES = st.text(alphabet="ab-*", min_size=0, max_size=4)
PRINCIPALS = st.sampled_from(["alice", "bob", ANONYMOUS])
HOSTS = st.sampled_from(["10.0.0.1", "10.0.1.1", "192.168.1.1"])


@st.composite
def a_rule(draw: st.DrawFn, index: int = 0) -> Rule:
    allow = draw(st.booleans())
    ops = frozenset(draw(st.sets(st.sampled_from(list(Op)), min_size=1, max_size=3)))
    if allow:
        ops = frozenset(ops.union(*(IMPLIES.get(op, frozenset()) for op in ops)))
    kind = draw(st.sampled_from(["literal", "prefix", "glob"]))
    pattern = draw(NAMES if kind == "prefix" else NAMES.filter(bool))
    principals = draw(st.none() | st.frozensets(PRINCIPALS, min_size=1))
    nets = draw(st.none() | st.just((ipaddress.ip_network("10.0.0.0/24"),)))
    return Rule(allow, ops, draw(st.sampled_from([Res.TOPIC, Res.GROUP])), kind, pattern, principals, None, nets)


def naive(rule_list: list[Rule], default_allow: bool, who: Identity, res: Res, name: str, op: Op) -> bool:
    def name_matches(r: Rule) -> bool:
        if r.kind == "literal":
            return r.pattern in ("*", name)
        if r.kind == "prefix":
            return name.startswith(r.pattern)
        return fnmatch.fnmatchcase(name, r.pattern)

    hits = [r for r in rule_list if r.res is res and op in r.ops and name_matches(r) and r.matches_identity(who)]
    if any(not r.allow for r in hits):
        return False
    return bool(hits) or default_allow


@settings(max_examples=300, deadline=None)
@given(
    rule_list=st.lists(a_rule(), max_size=12),
    default_allow=st.booleans(),
    principal=PRINCIPALS,
    host=HOSTS,
    res=st.sampled_from([Res.TOPIC, Res.GROUP]),
    name=st.text(alphabet="ab-", max_size=4),
    op=st.sampled_from(list(Op)),
)
def test_index_agrees_with_naive_evaluation(
    rule_list: list[Rule], default_allow: bool, principal: str, host: str, res: Res, name: str, op: Op
) -> None:
    who = Identity(principal, "", host)
    rs = RuleSet(rule_list, default_allow)
    assert rs.decide(who, res, name, op) == naive(rule_list, default_allow, who, res, name, op)
    assert rs.allowed(who, res, name, op) == rs.decide(who, res, name, op)
