"""Per-request cost of the authorizer's rule evaluation at 1,000 rules.

    .venv/bin/python bench/authz_rules.py [--rules 1000] [--n 200000]

Builds a rule set like a multi-team cluster's: literal topics, prefixed topics (KIP-290), globs,
groups and transactional ids, each for a principal, some narrowed to client ids and CIDR blocks,
plus a few denies. Measures, per call:

* ``decide``: the pure decision without the cache (every call walks the index), for a name hit by a
  literal rule, by a prefix, by a glob only, and by nothing (the default);
* ``allowed``: the same through the decision cache (what the data path pays once warm);
* the ``authorizer`` filter's request hook on a decoded single-topic Produce and a 5-topic Fetch (the
  whole hook: identity, dispatch, cache lookups, counting), as kgate calls it;
* a Metadata listing of 10 and 100 topics: the request and response hooks beside the response decode.

Naive evaluation (every rule checked in order) is shown for comparison.
"""

from __future__ import annotations

import argparse
import fnmatch
import random
import time
import uuid
from collections.abc import Callable

from kgate import testing
from kgate.api import FORWARD, ApiKey
from kgate.codec import api
from kgate.filters.builtin.authz.acl_rules import Identity, Op, Res, Rule, RuleSet, parse_rules
from kgate.filters.builtin.authz.authorizer import Authorizer


def make_rules(n: int, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    rules: list[dict] = []
    teams = [f"team{i}" for i in range(50)]
    for i in range(n):
        team = teams[(i // 10) % len(teams)]
        kind = i % 10
        rule: dict = {
            "allow": rnd.choice([["read"], ["write"], ["read", "write"], ["describe"]]),
            "principal": f"User:{team}",
        }
        if kind < 4:
            rule["topic"] = f"{team}.topic-{i}"
        elif kind < 7:
            rule["topic"] = {"prefix": f"{team}.svc{i}."}
        elif kind < 8:
            rule["topic"] = {"glob": f"{team}.*.events-{i}"}
        elif kind < 9:
            rule["group"] = {"prefix": f"{team}-g{i}"}
        else:
            rule["transactional_id"] = f"{team}-tx-{i}"
        if i % 7 == 0:
            rule["client_id"] = [f"{team}-*"]
        if i % 11 == 0:
            rule["host"] = ["10.0.0.0/8"]
        rules.append(rule)
    for i in range(max(1, n // 100)):
        rules[i * 97 % n] = {"deny": "all", "topic": {"glob": f"secret-{i}-*"}}
    return rules


def per_call_ns(fn: Callable[[], object], n: int) -> float:
    fn()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def naive(rules: list[Rule], default: bool, who: Identity, res: Res, name: str, op: Op) -> bool:
    allowed = False
    for r in rules:
        if r.res is not res or op not in r.ops or not r.matches_identity(who):
            continue
        if r.kind == "literal":
            hit = r.pattern in ("*", name)
        elif r.kind == "prefix":
            hit = name.startswith(r.pattern)
        else:
            hit = fnmatch.fnmatchcase(name, r.pattern)
        if hit:
            if not r.allow:
                return False
            allowed = True
    return allowed or default


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", type=int, default=1000)
    ap.add_argument("--n", type=int, default=200_000)
    a = ap.parse_args()
    raw = make_rules(a.rules)
    t0 = time.perf_counter()
    compiled = parse_rules(raw)
    rs = RuleSet(compiled, False)
    print(f"{a.rules} rules: parse + compile {1000 * (time.perf_counter() - t0):.1f} ms")

    def first(kind: str) -> dict:
        return next(
            r
            for r in raw
            if isinstance(r.get("topic"), dict if kind != "literal" else str)
            and (kind == "literal" or kind in r["topic"])
            and "allow" in r
            and "read" in r["allow"]
            and "client_id" not in r
            and "host" not in r
        )

    lit, pre, glob = first("literal"), first("prefix"), first("glob")
    cases = {
        "literal hit": (lit["principal"], lit["topic"]),
        "prefix hit": (pre["principal"], pre["topic"]["prefix"] + "orders"),
        "glob hit": (glob["principal"], glob["topic"]["glob"].replace("*", "eu")),
        "no rule (default)": (lit["principal"], "unknown.topic"),
    }
    for label, (principal, name) in cases.items():
        expected = label != "no rule (default)"
        got = rs.decide(Identity(principal[5:], "x", "10.1.2.3"), Res.TOPIC, name, Op.READ)
        assert got is expected, (label, principal, name, got)
    n = a.n
    print(f"{'case':<20} {'decide (no cache)':>18} {'allowed (cached)':>17} {'naive':>10}")
    for label, (principal, name) in cases.items():
        who = Identity(principal[5:], "x", "10.1.2.3")
        d = per_call_ns(lambda name=name, who=who: rs.decide(who, Res.TOPIC, name, Op.READ), n)
        c = per_call_ns(lambda name=name, who=who: rs.allowed(who, Res.TOPIC, name, Op.READ), n)
        nv = per_call_ns(
            lambda name=name, who=who: naive(compiled, False, who, Res.TOPIC, name, Op.READ), max(1, n // 50)
        )
        print(f"{label:<20} {d:>15.0f} ns {c:>14.0f} ns {nv / 1000:>7.1f} us")

    team3 = {"allow": "all", "topic": {"prefix": "team3."}, "principal": "team3"}
    f = Authorizer(Authorizer.validate_config({"rules": [*raw, team3]}))
    produce_cls = api.API_INFO[ApiKey.PRODUCE].request_class
    tcls = next(x.struct for x in produce_cls._FIELDS if x.name == "topic_data")
    pcls = next(x.struct for x in tcls._FIELDS if x.name == "partition_data")
    produce = produce_cls(
        acks=-1, timeout_ms=1000, topic_data=[tcls(name="team3.svc253.orders", partition_data=[pcls(index=0)])]
    )
    fetch_cls = api.API_INFO[ApiKey.FETCH].request_class
    ftcls = next(x.struct for x in fetch_cls._FIELDS if x.name == "topics")
    fpcls = next(x.struct for x in ftcls._FIELDS if x.name == "partitions")
    fetch = fetch_cls(
        replica_id=-1,
        topics=[ftcls(topic=f"team3.svc{10 * i + 3}.t", partitions=[fpcls(partition=0)]) for i in range(5)],
    )
    pctx = testing.FakeContext(ApiKey.PRODUCE, 9, principal="team3", client_id="team3-app")
    fctx = testing.FakeContext(ApiKey.FETCH, 12, principal="team3", client_id="team3-app")
    assert f.check(pctx, produce) is not None
    assert f.check(fctx, fetch) is not None
    print(f"authorizer hook, Produce (1 topic):  {per_call_ns(lambda: f.check(pctx, produce), n) / 1000:.2f} us")
    print(f"authorizer hook, Fetch (5 topics):   {per_call_ns(lambda: f.check(fctx, fetch), n) / 1000:.2f} us")
    from kgate.filters.builtin.authz.topic_policy import TopicPolicy

    tp = TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))
    print(f"(topic-policy hook, same Produce:    {per_call_ns(lambda: tp.check(pctx, produce), n) / 1000:.2f} us)")
    print(f"(topic-policy hook, same Fetch:      {per_call_ns(lambda: tp.check(fctx, fetch), n) / 1000:.2f} us)")
    for topics in (10, 100):
        metadata(f, topics, max(1, n // 20))


def metadata(f: Authorizer, topics: int, n: int) -> None:
    """A Metadata v12 listing (``topics: null``, as ``list_topics``) of ``topics`` topics x 3 partitions:
    what the authorizer's hooks cost beside the response decode that any name-using chain pays (the
    topic-id cache learns names from every Metadata answer)."""
    key, version = ApiKey.METADATA, 12
    rc = api.API_INFO[key].response_class
    tcls = next(x.struct for x in rc._FIELDS if x.name == "topics")
    pcls = next(x.struct for x in tcls._FIELDS if x.name == "partitions")
    bcls = next(x.struct for x in rc._FIELDS if x.name == "brokers")
    answer = rc(
        brokers=[bcls(node_id=1, host="127.0.0.1", port=9092)],
        cluster_id="c",
        controller_id=1,
        topics=[
            tcls(
                name=f"team3.svc{i}.t",
                topic_id=uuid.uuid4(),
                partitions=[pcls(partition_index=p, leader_id=1, replica_nodes=[1], isr_nodes=[1]) for p in range(3)],
            )
            for i in range(topics)
        ],
    )
    body = memoryview(answer.encode(version))
    request = api.API_INFO[key].request_class(topics=None, allow_auto_topic_creation=True)
    ctx = testing.FakeContext(key, version, request=request, principal="team3", client_id="team3-app")
    decoded = api.decode_response(key, version, body)
    assert f.check(ctx, request) is FORWARD
    assert f.described_topics(ctx, decoded) is FORWARD
    decode = per_call_ns(lambda: api.decode_response(key, version, body), n) / 1000
    req_hook = per_call_ns(lambda: f.check(ctx, request), n) / 1000
    resp_hook = per_call_ns(lambda: f.described_topics(ctx, decoded), n) / 1000
    print(
        f"Metadata listing, {topics:>3} topics: response decode {decode:6.1f} us, request hook {req_hook:.2f} us, "
        f"response hook {resp_hook:5.1f} us"
    )


if __name__ == "__main__":
    main()
