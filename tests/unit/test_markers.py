"""tests/conftest.py's markers on the tests this session collected: ``-m unit`` (the fast loop) and
the xdist groups depend on them.

Checks what the session holds, so a whole run checks every test; run alone it checks itself.
"""

from __future__ import annotations

import os

import pytest
from conftest import _KAFKA2_MODULES, _split_kafka

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _marks(item: pytest.Item) -> set[str]:
    return {m.name for m in item.iter_markers()}


def _top(item: pytest.Item) -> str:
    return os.path.relpath(str(item.path), _TESTS).split(os.sep)[0]


def test_every_test_is_exactly_one_of_unit_and_e2e(request: pytest.FixtureRequest) -> None:
    both_or_neither = [i.nodeid for i in request.session.items if len(_marks(i) & {"unit", "e2e"}) != 1]
    assert not both_or_neither, both_or_neither[:20]


def test_directories_and_fixtures_decide_the_marks(request: pytest.FixtureRequest) -> None:
    wrong = []
    for item in request.session.items:
        marks, names = _marks(item), set(item.fixturenames)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if _top(item) in ("e2e", "integration", "pipeline") and "e2e" not in marks:
            wrong.append(f"{item.nodeid}: in tests/{_top(item)} but not e2e")
        if names & {"tansu", "kgate", "kgate_factory", "broker", "spark"} and "e2e" not in marks:
            wrong.append(f"{item.nodeid}: starts processes but not e2e")
        if ({"kafka", "kafka40"} & names or params.get("broker") == "kafka") and "kafka" not in marks:
            wrong.append(f"{item.nodeid}: uses Apache Kafka but not marked kafka")
        if {"kafka", "kafka40"} & {v for v in params.values() if isinstance(v, str)} and "kafka" not in marks:
            # a fixture parametrized over the broker fixtures' names (request.getfixturevalue)
            wrong.append(f"{item.nodeid}: gets Apache Kafka by a fixture's parameter but not marked kafka")
        if _top(item) == "pipeline" and "spark" not in marks:
            wrong.append(f"{item.nodeid}: in tests/pipeline but not spark")
    assert not wrong, wrong[:20]


def test_jvm_tests_share_one_xdist_group_per_kind(request: pytest.FixtureRequest) -> None:
    """One Kafka 4.3 (or 4.0) per run (two 4.3 with four or more workers), one SparkSession: their
    tests go to one worker per group, not one JVM each."""
    wrong = []
    for item in request.session.items:
        group = item.get_closest_marker("xdist_group")
        name = group.args[0] if group is not None else None
        marks = _marks(item)
        if "spark" in marks:
            expected = "spark"
        elif "kafka" in marks:
            expected = "kafka40" if name == "kafka40" and "kafka" not in item.fixturenames else "kafka43"
            if expected == "kafka43" and _split_kafka() and item.path.name in _KAFKA2_MODULES:
                expected = "kafka43b"  # four or more workers: the Java-client modules' own chain
        else:
            expected = None
        if name != expected:
            wrong.append(f"{item.nodeid}: group {name}, expected {expected}")
    assert not wrong, wrong[:20]


def test_one_chain_starts_kafka_40(request: pytest.FixtureRequest) -> None:
    """Every test that uses Kafka 4.0 (its fixture, or a fixture's parameter naming it) is in one
    xdist group: each group's worker starts its own session brokers, so a second group would start a
    second Kafka 4.0 (conftest's ``_KAFKA2_MODULES``)."""
    groups: dict[str | None, list[str]] = {}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "kafka40" in item.fixturenames or "kafka40" in {v for v in params.values() if isinstance(v, str)}:
            mark = item.get_closest_marker("xdist_group")
            groups.setdefault(mark.args[0] if mark is not None else None, []).append(item.nodeid)
    assert len(groups) <= 1, {g: ids[:3] for g, ids in groups.items()}


def test_an_xdist_worker_hands_its_groups_to_the_scheduler(request: pytest.FixtureRequest) -> None:
    """``--dist loadgroup`` schedules by the groups a worker wrote at collection (conftest): every
    grouped test is there under its node id (xdist's own node id suffix is lost on pytest 9)."""
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    if worker is None:
        pytest.skip("not an xdist worker: nothing is scheduled by group")
    import json

    from conftest import _groups_file

    with open(_groups_file(os.getppid(), worker), encoding="utf-8") as f:
        written = json.load(f)
    for item in request.session.items:
        mark = item.get_closest_marker("xdist_group")
        assert written.get(item.nodeid) == (mark.args[0] if mark is not None else None), item.nodeid


def test_this_module_is_unit(request: pytest.FixtureRequest) -> None:
    assert "unit" in _marks(request.node)
    assert "e2e" not in _marks(request.node)
