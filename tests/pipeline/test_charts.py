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
