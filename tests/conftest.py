"""Shared fixtures for kgate's tests: Tansu broker, kgate process, process logs on failure."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import resource
import socket
import sys
import tempfile
import threading
import time
import types

import hypothesis
import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from support import ports, procs  # noqa: E402
from support.spark import _spark_test_settings, spark  # noqa: E402, F401  (the session's SparkSession, for any test)

_ALL_PROCS: list[procs.ManagedProcess] = []

# Hypothesis: the default profile is what ./dev/test pays for; KGATE_HYPOTHESIS=deep runs ten
# times the examples (README, "Running the tests"). Tests that pin no max_examples inherit it.
hypothesis.settings.register_profile("deep", max_examples=1000)
hypothesis.settings.load_profile(os.environ.get("KGATE_HYPOTHESIS") or "default")


def pytest_sessionstart(session):
    """Refuse to test old code: a compiled hot module built from an older source (tools/compile_hot.py)."""
    from kgate.proxy.runtime.compiled import stale_modules

    stale = stale_modules()
    if stale:
        pytest.exit(
            f"compiled modules older than their source: {', '.join(stale)}; "
            "run tools/compile_hot.py (rebuild) or tools/compile_hot.py --clean (pure Python)",
            returncode=4,
        )


# -- markers and xdist groups ------------------------------------------------------------------
# Every test gets exactly one of ``unit`` / ``e2e``, plus ``kafka`` and ``spark`` where they apply
# (registered in pyproject.toml; README's "Tests" section). ``./dev/test -m unit`` is the fast loop.

#: fixtures that start a broker, kgate, a relay or Spark: a test using one (directly or through
#: another fixture) is ``e2e``
_E2E_FIXTURES = frozenset(
    {
        "tansu",
        "fresh_tansu",
        "tansu_factory",
        "kafka",
        "kafka40",
        "broker",
        "kgate",
        "kgate_factory",
        "kgate_mode",
        "relay_factory",
        "spark",
    }
)
#: modules whose use means processes or TCP sockets: a test module importing one (or a name defined
#: in one) is ``e2e``. ``socket`` counts: the suite's in-process tests do not import it
_E2E_SUPPORT = frozenset(
    {
        "support.procs",
        "support.kafka_broker",
        "support.java_clients",
        "support.inproc_kgate",
        "support.relay",
        "support.recording_relay",
        "support.tls_relay",
        "support.sasl_gate",
        "support.black_hole",
        "support.resetting_server",
        "support.netconn",
        "support.workloads",
        "support.spark",
        "subprocess",
        "socket",
    }
)
#: support modules that need Apache Kafka (a broker, or the tools in its tarball's bin/)
_KAFKA_SUPPORT = frozenset({"support.kafka_broker", "support.java_clients"})
_E2E_DIRS = ("e2e", "integration", "pipeline")
#: calls that open TCP connections or servers (asyncio's, socket's, urllib's): a test module whose
#: code makes one is ``e2e`` (an in-process server is still a socket)
_TCP_CALLS = re.compile(r"\b(open_connection|create_connection|start_server|create_server|urlopen)\(")
_tcp_modules: dict[str, bool] = {}


def _module_opens_tcp(path: str) -> bool:
    if path not in _tcp_modules:
        try:
            with open(path, encoding="utf-8") as f:
                _tcp_modules[path] = _TCP_CALLS.search(f.read()) is not None
        except OSError:
            _tcp_modules[path] = False
    return _tcp_modules[path]


_module_uses_seen: dict[tuple[str, frozenset[str]], bool] = {}


def _module_uses(module, names: frozenset[str]) -> bool:
    """Whether a test module imported one of ``names`` (the module, or anything defined in it).

    Memoized per module: collection asks it for every test (thousands) of a few hundred modules."""
    if module is None:
        return False
    key = (module.__name__, names)
    if key not in _module_uses_seen:
        _module_uses_seen[key] = any(
            (value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)) in names
            for value in vars(module).values()
        )
    return _module_uses_seen[key]


def _broker_param(item: pytest.Item) -> str | None:
    """The ``broker`` fixture's parameter for this test ("tansu", "kafka"), if it has one."""
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("broker")


def _uses_kafka(item: pytest.Item) -> bool:
    names = item.fixturenames
    if "kafka" in names or "kafka40" in names or _broker_param(item) == "kafka":
        return True
    # a fixture parametrized over the broker fixtures' names (``request.getfixturevalue(param)``):
    # the closure does not show them, and such a test on another worker started its own brokers
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(v in ("kafka", "kafka40") for v in callspec.params.values() if isinstance(v, str)):
        return True
    return _module_uses(getattr(item, "module", None), _KAFKA_SUPPORT)


# The Spark tests are one group, one SparkSession: a second session (a second group, as before
# 2026-11-27) kept a second core busy with Spark to the end but cost a JVM start, a first report in
# a cold JVM (~25 CPU-s against ~10 warm) and its idle threads (docs/performance.md, issue 29)


#: Kafka test modules of the second Kafka group, used with four or more workers: the Kafka tests'
#: one chain (~275 s quiet) would then be the suite's longest; two chains cost a second session
#: broker (about 15 CPU-s) and end sooner (the Java-client modules, ~130 s, against the rest).
#: Every module that uses Kafka 4.0 is here: one Kafka 4.0 broker per run, not one per chain
#: (~7 CPU-s each; tests/unit/test_markers.py checks it)
_KAFKA2_MODULES = frozenset(
    {"test_kafka43_java.py", "test_quotas.py", "test_tls_kafka.py", "test_describe_pages_e2e.py"}
)


def _split_kafka() -> bool:
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= 4


def _xdist_group(item: pytest.Item, kafka: bool, uses_spark: bool) -> str | None:
    """Tests that run a JVM share one xdist worker per kind: the session's broker (or SparkSession)
    starts once per run, not once per worker, and two cores never run three JVMs of one kind at once
    (a test that starts its own Kafka, or ``kgate report``'s Spark, joins its kind's group). Kafka 4.3
    has two groups with four or more workers (``_KAFKA2_MODULES``). Everything else is spread test by
    test (``--dist loadgroup``)."""
    if uses_spark:
        return "spark"
    if kafka:
        names = item.fixturenames
        on_43 = "kafka" in names or _broker_param(item) == "kafka"
        if "kafka40" in names and not on_43:
            return "kafka40"
        return "kafka43b" if _split_kafka() and item.path.name in _KAFKA2_MODULES else "kafka43"
    return None


# -- scheduling the groups ---------------------------------------------------------------------
# xdist's ``--dist loadgroup`` schedules by an ``@group`` suffix its worker appends to each node id
# (``item._nodeid``); pytest 9 builds ``nodeid`` from ``item._id``, so the suffix never showed and
# every worker started its own Kafka brokers and Spark. Instead each worker writes the groups it
# collected to a file its controller (the parent process) reads when it schedules.


def _groups_file(controller_pid: int, worker: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"kgate-xdist-groups-{controller_pid}-{worker}.json")


def _write_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is None:
        return
    groups = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            groups[item.nodeid] = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    path = _groups_file(os.getppid(), worker)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(groups, f)
    os.replace(path + ".tmp", path)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` by the groups the workers wrote (see above), not by node id suffixes."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class _GroupsFromWorkers(LoadGroupScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:  # called first once every worker has finished collecting
                self._groups = {}
                for path in glob.glob(_groups_file(os.getpid(), "*")):
                    with open(path, encoding="utf-8") as f:
                        self._groups.update(json.load(f))
            group = self._groups.get(nodeid)
            return f"@group:{group}" if group is not None else super()._split_scope(nodeid)

    return _GroupsFromWorkers(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        for path in glob.glob(_groups_file(os.getpid(), "*")):
            with contextlib.suppress(OSError):
                os.remove(path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test unit or e2e (and kafka, spark) by its directory, fixtures and imports; on an
    xdist worker, write the groups for the controller's scheduler."""
    for item in items:
        rel = os.path.relpath(str(item.path), _TESTS).split(os.sep)
        names = item.fixturenames
        module = getattr(item, "module", None)
        kafka = _uses_kafka(item)
        uses_spark = rel[0] == "pipeline" or "spark" in names
        e2e = (
            item.get_closest_marker("e2e") is not None
            or rel[0] in _E2E_DIRS
            or kafka
            or uses_spark
            or any(f in _E2E_FIXTURES for f in names)
            or _module_uses(module, _E2E_SUPPORT)
            or _module_opens_tcp(str(item.path))
        )
        item.add_marker(pytest.mark.e2e if e2e else pytest.mark.unit)
        if kafka:
            item.add_marker(pytest.mark.kafka)
        if uses_spark:
            item.add_marker(pytest.mark.spark)
        group = _xdist_group(item, kafka, uses_spark)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    _write_groups(config, items)


# A ``unit`` test must not start a process nor use a TCP socket: the fast loop (``-m unit``) stays
# fast and needs no broker. An audit hook (main thread only: a background thread of an earlier
# e2e test is not this test's doing) notes the first such act; the test then fails, naming it.
_IO_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.fork", "socket.connect", "socket.bind"})
_unit_io: list[str] = []
_watching = False


def _audit(event: str, args: tuple) -> None:
    if not _watching or event not in _IO_EVENTS or _unit_io or threading.current_thread() is not _MAIN:
        return
    if event.startswith("socket."):
        sock, address = args[0], args[1]
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return  # AF_UNIX (a socketpair, an event loop's self-pipe) is in-process plumbing
        _unit_io.append(f"{event} {address!r}")
    else:
        _unit_io.append(f"{event} {args[0]!r}"[:200])


_MAIN = threading.main_thread()
sys.addaudithook(_audit)


#: ``KGATE_TEST_TIMELINE=FILE``: each worker appends one JSON line per test (worker, node id, wall
#: start and end, groups, CPU seconds): what ``tools/suite_timeline.py`` reads to show each worker's
#: chain and where the CPU went (the suite is CPU-bound: wall time under load says little)
_TIMELINE = os.environ.get("KGATE_TEST_TIMELINE")


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _living_cpu_s(pid: int) -> float:
    """The CPU seconds of ``pid``'s living descendants, each with the children it has reaped: so a
    long-lived child (a Spark session's JVM, a session broker) is charged to the tests it ran
    beside, not all at once to the test that happens to stop it."""
    total = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids = f.read().split()
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # utime, stime, cutime, cstime (fields 14-17 of proc(5); 12-15 after the name)
            total += sum(int(v) for v in fields[11:15]) / _TICK + _living_cpu_s(int(kid))
    return total


def _cpu_s() -> float:
    """This worker's CPU seconds, its reaped children's, and its living descendants' so far (a
    process's CPU is counted as it runs; at its reaping it moves from one sum to the other)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _living_cpu_s(os.getpid())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    global _watching
    _watching = item.get_closest_marker("unit") is not None
    _unit_io.clear()
    start = time.time()
    cpu = _cpu_s() if _TIMELINE else 0.0
    try:
        yield
    finally:
        _watching = False
        if _TIMELINE:
            mark = item.get_closest_marker("xdist_group")
            row = {
                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                "test": item.nodeid,
                "start": start,
                "end": time.time(),
                "group": str(mark.args[0]) if mark is not None and mark.args else None,
                "cpu": round(_cpu_s() - cpu, 3),
            }
            with open(_TIMELINE, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    result = yield
    if _unit_io:
        pytest.fail(
            f"{item.nodeid} is marked unit but did {_unit_io[0]}: a test that starts processes or "
            "uses TCP sockets is e2e (use a broker/kgate fixture, or mark the module "
            "`pytestmark = pytest.mark.e2e`)",
            pytrace=False,
        )
    return result


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
        if not k.alive():  # its node ports are free for other tests and test runs on the machine
            ports.release_range(k.node_base)
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
