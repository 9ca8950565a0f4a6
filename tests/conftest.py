"""Shared fixtures for kgate's tests: Tansu broker, kgate process, process logs on failure."""

from __future__ import annotations

import os
import sys

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from support import procs  # noqa: E402
from support.spark import spark  # noqa: E402, F401  (the session's SparkSession, for any test that asks)

_ALL_PROCS: list[procs.ManagedProcess] = []


def pytest_sessionstart(session):
    """Refuse to test old code: a compiled hot module built from an older source (tools/compile_hot.py)."""
    from kgate.proxy.compiled import stale_modules

    stale = stale_modules()
    if stale:
        pytest.exit(
            f"compiled modules older than their source: {', '.join(stale)}; "
            "run tools/compile_hot.py (rebuild) or tools/compile_hot.py --clean (pure Python)",
            returncode=4,
        )


def _track(p):
    _ALL_PROCS.append(p)
    return p


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(autouse=True)
def _process_logs_on_failure(request):
    """When a test fails, print the logs of the processes it created or used (tail)."""
    start = len(_ALL_PROCS)
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is None or not rep.failed:
        return
    shown = set()
    for p in _ALL_PROCS[start:] + [p for p in _ALL_PROCS[:start] if p.alive()]:
        if id(p) in shown:
            continue
        shown.add(id(p))
        print(f"\n===== {p.name} log ({p.log_path}, pid {p.proc and p.proc.pid}) =====")
        print(p.log_text(tail=20_000))


def _start_tansu(dirpath, **kw) -> procs.Tansu:
    t = _track(procs.Tansu(dirpath / "tansu.log", **kw))
    t.start()
    return t


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    """One in-memory Tansu per test module (tests use unique topic and group names)."""
    t = _start_tansu(tmp_path_factory.mktemp("tansu"))
    yield t
    t.kill()


def _session_kafka(tmp_path_factory, dist):
    from support import kafka_broker

    why = kafka_broker.unavailable(dist)
    if why is not None:
        pytest.skip(why)
    k = _track(kafka_broker.Kafka(tmp_path_factory.mktemp(f"kafka{dist.version}"), dist=dist))
    k.start()
    return k


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """One Apache Kafka 4.3.1 broker (the current line) per test session (per xdist worker).

    Tests use unique names. Skipped, with the reason, where ../shared/kafka43 or Java is missing
    (a user's clone).
    """
    from support import kafka_broker

    k = _session_kafka(tmp_path_factory, kafka_broker.KAFKA_43)
    yield k
    k.stop()


@pytest.fixture(scope="session")
def kafka40(tmp_path_factory):
    """One Apache Kafka 4.0.2 broker per session: the compatibility subset (transactions v2, KIP-848,
    address rewriting, Metadata) that many users still run. Skipped with the reason where absent."""
    from support import kafka_broker

    k = _session_kafka(tmp_path_factory, kafka_broker.KAFKA_40)
    yield k
    k.stop()


@pytest.fixture(scope="module", params=["tansu", "kafka"])
def broker(request, tmp_path_factory):
    """The module's broker, once Tansu and once Apache Kafka 4.3.1: for tests of behaviour that is the
    broker's (topic ids, delete/recreate, the HA fleet, topic-policy, address rewriting).

    Both have ``bootstrap``, ``port``, ``node_id`` and ``kind``. The Kafka one is the session's
    (see ``kafka``; skipped with its reason where it cannot run), Tansu one per module.
    """
    if request.param == "kafka":
        yield request.getfixturevalue("kafka")
        return
    t = _start_tansu(tmp_path_factory.mktemp("tansu"))
    yield t
    t.kill()


@pytest.fixture
def fresh_tansu(tmp_path):
    """A Tansu of the test's own, for tests that may disturb the broker."""
    t = _start_tansu(tmp_path)
    yield t
    t.kill()


@pytest.fixture
def tansu_factory(tmp_path):
    started = []

    def make(name="tansu", **kw):
        d = tmp_path / name
        d.mkdir()
        t = _start_tansu(d, **kw)
        started.append(t)
        return t

    yield make
    for t in started:
        t.kill()


@pytest.fixture
def relay_factory(tmp_path):
    """Start tests/support/relay.py processes (see procs.Relay); stopped at teardown."""
    started: list[procs.Relay] = []

    def make(upstream_port: int, ports: list[int], name: str = "relay", **kw) -> procs.Relay:
        r = _track(procs.Relay(tmp_path / f"{name}{len(started)}.log", upstream_port, ports, **kw))
        started.append(r)
        r.start()
        return r

    yield make
    for r in started:
        r.stop()


@pytest.fixture
def kgate_factory(tmp_path):
    """Start kgate processes; at teardown each still running is stopped with SIGTERM and must
    exit 0 within drain_timeout + 10 s, and no kgate log may hold a Python traceback."""
    started: list[procs.Kgate] = []

    def make(upstream, name="kgate", **kw) -> procs.Kgate:
        if isinstance(upstream, str):
            upstream = [upstream]
        k = _track(procs.Kgate(tmp_path / f"{name}{len(started)}", upstream, **kw))
        k.start()
        started.append(k)
        return k

    yield make
    bad = []
    for k in started:
        was_alive = k.alive()
        rc = k.stop_and_check()
        if was_alive and rc != 0:
            bad.append((k.log_path, rc))
        elif not was_alive and rc not in (0,):
            bad.append((k.log_path, f"died before teardown with {rc}"))
    for k in started:
        if "Traceback (most recent call last)" in k.log_text(tail=10_000_000):
            bad.append((k.log_path, "logged an unhandled exception (Traceback)"))
    if bad:
        for k in started:
            print(f"\n===== kgate log {k.log_path} =====\n{k.log_text(tail=20_000)}")
    assert not bad, f"kgate misbehaved: {bad}"


@pytest.fixture
def kgate(tansu, kgate_factory) -> procs.Kgate:
    """kgate in front of the module's Tansu, node 111 served on the bootstrap port."""
    return kgate_factory(tansu.bootstrap, bootstrap_serves_node=True)


@pytest.fixture(params=["bootstrap_serves_node", "node_port"])
def kgate_mode(request, tansu, kgate_factory) -> procs.Kgate:
    """kgate in both node placements: Tansu's node on the bootstrap port, or on base+111."""
    return kgate_factory(tansu.bootstrap, bootstrap_serves_node=request.param == "bootstrap_serves_node")
