"""The page's charts drawn while the report queries still run (``html.ChartPainter``), and the order the
queries are submitted in; no Spark: small Arrow tables stand in for the queries' results."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from .conftest import T0

pa = pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")


def _tables() -> dict[str, Any]:
    """The tables the charts read, a row or two each (the columns the charts use)."""
    return {
        "chargeback": pa.Table.from_pylist([{"principal": "User:a", "produced_bytes": 5_000_000, "consumed_bytes": 0}]),
        "clients": pa.Table.from_pylist([{"client_id": "app", "requests": 10}]),
        "api_errors": pa.Table.from_pylist(
            [
                {"api_key": 1, "api_name": "Fetch", "error_code": 0, "requests": 90, "outcome": "ok"},
                {"api_key": 1, "api_name": "Fetch", "error_code": 6, "requests": 10, "outcome": "failure"},
            ]
        ),
        "instances": pa.Table.from_pylist([{"instance": "kgate-a", "requests": 100}]),
        "id_adoption": pa.Table.from_pylist(
            [{"principal": "User:a", "client_id": "app", "with_ids": 1, "fetch_produce": 2}]
        ),
        "stale_ids": pa.Table.from_pylist([{"topic_name": "orders", "requests": 3}]),
        "unresolved_ids": pa.Table.from_pylist([{"topic_id": "AAAA", "requests": 1}]),
    }


def _latency() -> Any:
    return pa.Table.from_pylist(
        [{"api_key": 1, "api_name": "Fetch", "answered": 100, "p50_us": 900, "p95_us": 5000, "p99_us": 9000}]
    )


def _traffic() -> Any:
    return pa.Table.from_pylist(
        [{"minute": T0 + i * 60_000_000, "topic_name": "orders", "bytes": 10**6} for i in range(5)]
    )


def test_a_chart_is_drawn_as_soon_as_its_tables_arrive(tmp_path: Path) -> None:
    """The error chart needs only api_errors: it is drawn when that table arrives, while every other
    table is still missing (the queries still run), not after the last query."""
    from kgate.pipeline import html

    painter = html.ChartPainter(str(tmp_path))
    try:
        painter.add("api_errors", _tables()["api_errors"])
        done = painter._drawn["Error rates"].result(timeout=120)
        assert done == "errors.png"
        assert (tmp_path / "errors.png").stat().st_size > 0
        # the principals chart needs chargeback and clients: not drawn from one of them
        painter.add("chargeback", _tables()["chargeback"])
        assert "Top principals and clients" not in painter._drawn
        assert not (tmp_path / "principals.png").exists()
    finally:
        painter.close()


def test_drawn_gives_every_chart_in_page_order(tmp_path: Path) -> None:
    """Tables added from several threads (the report queries' own), the rest (the traffic chart's) handed
    over at the end: every chart of the page, in the page's order, each drawn once."""
    from kgate.pipeline import html
    from kgate.pipeline.tables import LATENCY_WINDOW, Result

    tables = _tables()
    painter = html.ChartPainter(str(tmp_path))
    arrivals = [threading.Thread(target=painter.add, args=(n, t)) for n, t in tables.items()]
    arrivals.append(threading.Thread(target=painter.add, args=(LATENCY_WINDOW, _latency())))
    for t in arrivals:
        t.start()
    for t in arrivals:
        t.join()
    result = Result(tables, pa.table({"file": pa.array([], pa.string())}), _latency(), traffic=_traffic())
    drawn = painter.drawn(result)
    assert [caption for caption, _name in drawn] == [caption for caption, _needs, _draw in html.CHARTS]
    assert [name for _caption, name in drawn] == [
        "traffic.png",
        "principals.png",
        "errors.png",
        "instances.png",
        "latency.png",
        "topic_ids.png",
    ]
    for _caption, name in drawn:
        assert (tmp_path / str(name)).stat().st_size > 0


def test_the_slowest_queries_are_submitted_first() -> None:
    """Every report (and the page's two extra tables) once; the slow ones (joins, windows, a second job)
    ahead of the rest, so the run does not wait on one started last."""
    from kgate.pipeline import reports, tables

    order = tables.query_order()
    assert sorted(order) == sorted([*reports.REPORTS, tables.LATENCY_WINDOW, tables.TRAFFIC])
    assert order[: len(tables.SLOW_FIRST)] == list(tables.SLOW_FIRST)
    assert tables.query_order(["chargeback", "stale_ids"])[0] == "stale_ids"
