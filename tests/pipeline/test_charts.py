"""The charts, without Spark: what they draw from small tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import T0

MIN = 60_000_000


def _painted(png: Path) -> int:
    """Pixels of matplotlib's first series colour (C0, #1f77b4, alpha 0.85 over white: close to it)."""
    import numpy as np
    from matplotlib.image import imread

    img = imread(str(png))[..., :3]
    target = np.array([0x1F, 0x77, 0xB4]) / 255
    return int((np.abs(img - target).max(axis=-1) < 0.2).sum())


@pytest.mark.parametrize(
    ("minutes", "unit"), [(1, "minute"), (20, "minute"), (1000, "15 minutes"), (3 * 24 * 60, "hour")]
)
def test_traffic_buckets_follow_the_span(tmp_path: Path, minutes: int, unit: str) -> None:
    """Data within one hour once made one hourly point, which a stack plot draws as nothing: the buckets
    now follow the data's span (minutes for an hour, hours for days), and one bucket is drawn as a bar."""
    pytest.importorskip("matplotlib")
    from kgate.pipeline import charts

    rows = [{"minute": T0 + i * MIN, "topic_name": "orders", "bytes": 2_000_000} for i in range(minutes)]
    name = charts.traffic(rows, str(tmp_path))
    assert name == "traffic.png"
    assert _painted(tmp_path / name) > 2000, "the traffic chart is empty"
    from matplotlib import pyplot as plt

    plt.close("all")
    span = (minutes - 1) * MIN
    width, chosen = next((w, u) for w, u in charts.BUCKETS if span // (w * 1_000_000) < charts.MAX_BUCKETS)
    assert chosen == unit, width


def test_traffic_rows_bucketed_wider_than_a_minute_keep_their_width(tmp_path: Path) -> None:
    """The roll-up may bucket traffic as wide as the chart will (:func:`charts.bucket_width` of the
    span): rows an hour apart over two hours must be drawn per hour, not per minute with zeros between."""
    pytest.importorskip("matplotlib")
    from kgate.pipeline import charts

    hour = 60 * MIN
    start = T0 - T0 % hour
    assert charts._grain({start, start + hour, start + 2 * hour}) == 3600
    assert charts._grain({start, start + MIN}) == 60
    assert charts.bucket_width(2 * hour) < 3600  # what the span alone would choose
    rows = [{"minute": start + i * hour, "topic_name": "orders", "bytes": 2_000_000} for i in range(3)]
    assert charts.traffic(rows, str(tmp_path)) == "traffic.png"
    assert _painted(tmp_path / "traffic.png") > 2000


def test_traffic_width_comes_from_the_parquet_footers(tmp_path: Path) -> None:
    """The traffic grain's width is chosen before the pass from the files' ``time_us`` statistics
    (clipped to the window): a day of data gets 15-minute buckets, not minutes; a file without
    statistics keeps the minute."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kgate.pipeline import rollup
    from kgate.pipeline.ingest import Window

    day = 24 * 60 * MIN
    a, b, bare = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    pq.write_table(pa.table({"time_us": [T0, T0 + 5 * MIN]}), a)
    pq.write_table(pa.table({"time_us": [T0 + day - MIN]}), b)
    pq.write_table(pa.table({"time_us": [T0]}), bare, write_statistics=False)
    assert rollup.traffic_width([str(a)]) == MIN
    assert rollup.traffic_width([str(a), str(b)]) == 15 * MIN
    assert rollup.traffic_width([str(a), str(b)], Window(until_us=T0 + 60 * MIN)) == MIN
    assert rollup.traffic_width([str(a), str(b), str(bare)]) == MIN
