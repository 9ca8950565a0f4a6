"""PNG charts for the HTML report (matplotlib, Agg backend: no display needed).

Each function takes plain rows (the report tables as lists of dicts, already small) and writes one
PNG into the output directory; it returns the file name, or None when there is nothing to draw (an
empty chart would suggest a broken report). Charts answer one question each: which topics carry
the traffic, who the heavy principals and clients are, where errors are, whether instances share
the load, how slow each api is, and how far the fleet is from sane topic-id use.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

Row = Mapping[str, Any]
MB = 1_000_000.0


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def warm_up() -> None:
    """Import matplotlib and load its fonts: what the first chart of a process would pay (done on the
    chart thread while the JVM starts, :class:`kgate.pipeline.html.ChartPainter`)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.set_title("x")
    fig.canvas.draw()
    plt.close(fig)


def _save(fig: Any, out_dir: str, name: str) -> str:
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name), dpi=90)
    _plt().close(fig)
    return name


def _label(value: Any, empty: str) -> str:
    return str(value) if value not in (None, "") else empty


def _top(totals: Mapping[str, float], n: int) -> list[tuple[str, float]]:
    return sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


#: Bucket widths the traffic chart chooses from (seconds, label): the smallest that gives at most
#: :data:`MAX_BUCKETS` buckets over the data's span, so an hour of data is not one point.
BUCKETS = (
    (60, "minute"),
    (300, "5 minutes"),
    (900, "15 minutes"),
    (3600, "hour"),
    (6 * 3600, "6 hours"),
    (86400, "day"),
)
MAX_BUCKETS = 120


def bucket_width(span_us: int) -> int:
    """The traffic chart's bucket width (seconds) for data spanning ``span_us``: the smallest of
    :data:`BUCKETS` giving at most :data:`MAX_BUCKETS` buckets. The roll-up uses it too, to keep its
    traffic grain no finer than the chart needs (:func:`kgate.pipeline.rollup.traffic_width`)."""
    return next((w for w, _u in BUCKETS if span_us // (w * 1_000_000) < MAX_BUCKETS), BUCKETS[-1][0])


def _grain(times: Iterable[int]) -> int:
    """The widest of :data:`BUCKETS` (seconds) every time (µs) is a multiple of: the width the rows
    were already bucketed at (a minute at least)."""
    widths = [w for w, _u in BUCKETS if all(t % (w * 1_000_000) == 0 for t in times)]
    return widths[-1] if widths else BUCKETS[0][0]


def traffic(rows: Iterable[Row], out_dir: str, n: int = 8) -> str | None:
    """Record MB per time bucket for the busiest topics (by name; ids of one name summed), the rest as
    'other'. ``rows``: record bytes per time bucket and topic (``minute``: the bucket's start in µs, a
    minute or wider; ``topic_name``, ``bytes``); the bucket width follows the data's span (:data:`BUCKETS`)."""
    import datetime as dt

    rows = list(rows)
    if not rows:
        return None
    first, last = min(r["minute"] for r in rows), max(r["minute"] for r in rows)
    # never finer than the rows' own buckets (the roll-up may have bucketed them wider than a minute)
    width = max(bucket_width(last - first), _grain({r["minute"] for r in rows}))
    unit = dict(BUCKETS)[width]
    step = width * 1_000_000
    per: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    totals: dict[str, float] = defaultdict(float)
    for r in rows:
        name = _label(r["topic_name"], "(unresolved id)")
        mb = (r["bytes"] or 0) / MB
        per[name][r["minute"] // step * step] += mb
        totals[name] += mb
    top = [name for name, _ in _top(totals, n)]
    buckets = list(range(first // step * step, last // step * step + step, step))
    other = [sum(per[name].get(b, 0.0) for name in per if name not in top) for b in buckets]
    series = [[per[name].get(b, 0.0) for b in buckets] for name in top]
    labels = list(top)
    if any(other):
        series.append(other)
        labels.append("other")
    times = [dt.datetime.fromtimestamp(b / 1e6, dt.UTC) for b in buckets]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    if len(buckets) == 1:  # a stack plot of one point draws nothing: bars
        bottom = 0.0
        for values, label in zip(series, labels, strict=True):
            ax.bar([times[0].strftime("%Y-%m-%d %H:%M")], values, bottom=bottom, label=label)
            bottom += values[0]
    else:
        ax.stackplot(times, series, labels=labels, alpha=0.85)
        fig.autofmt_xdate()
    ax.set_title(f"Record traffic per {unit} (UTC), top {len(top)} topics (MB in + out)")
    ax.set_ylabel(f"MB / {unit}")
    ax.legend(loc="upper left", fontsize=7, ncol=3)
    return _save(fig, out_dir, "traffic.png")


def principals(chargeback: Iterable[Row], clients: Iterable[Row], out_dir: str, n: int = 10) -> str | None:
    """Top principals by record MB (chargeback), top client ids by requests."""
    by_principal: dict[str, float] = defaultdict(float)
    for r in chargeback:
        mb = ((r["produced_bytes"] or 0) + (r["consumed_bytes"] or 0)) / MB
        by_principal[_label(r["principal"], "(anonymous)")] += mb
    by_client: dict[str, float] = defaultdict(float)
    for r in clients:
        by_client[_label(r["client_id"], "(no client id)")] += r["requests"] or 0
    if not by_principal and not by_client:
        return None
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, data, title in (
        (a, _top(by_principal, n), "Top principals, record MB in + out"),
        (b, _top(by_client, n), "Top client ids, requests"),
    ):
        names = [k for k, _ in data][::-1]
        ax.barh(names, [v for _, v in data][::-1], color="#4477aa")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="y", labelsize=7)
    return _save(fig, out_dir, "principals.png")


def errors(api_errors: Iterable[Row], out_dir: str, n: int = 12) -> str | None:
    """Failure rate (%) per api key, the busiest apis only; the protocol's normal answers (a JoinGroup's
    MEMBER_ID_REQUIRED, rebalances, leader moves: :mod:`kgate.pipeline.outcomes`) stacked apart in grey."""
    from kgate.pipeline.outcomes import FAILURE, NORMAL

    total: dict[str, int] = defaultdict(int)
    failed: dict[str, int] = defaultdict(int)
    normal: dict[str, int] = defaultdict(int)
    for r in api_errors:
        name = _label(r["api_name"], str(r["api_key"]))
        total[name] += r["requests"]
        if r.get("outcome") == FAILURE:
            failed[name] += r["requests"]
        elif r.get("outcome") == NORMAL:
            normal[name] += r["requests"]
    if not total:
        return None
    busiest = [k for k, _ in _top({k: float(v) for k, v in total.items()}, n)]
    rates = [100.0 * failed[k] / total[k] for k in busiest]
    normal_rates = [100.0 * normal[k] / total[k] for k in busiest]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.4))
    bars = ax.bar(busiest, rates, color=["#cc3311" if r >= 1 else "#228833" for r in rates], label="failures")
    ax.bar(busiest, normal_rates, bottom=rates, color="#bbbbbb", label="normal (rebalance, leader move, ...)")
    for bar, k in zip(bars, busiest, strict=True):
        ax.annotate(
            f"{failed[k]:,}/{total[k]:,}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=6,
        )
    ax.set_title("Failure rate per api key (% of exchanges; protocol-normal answers in grey)")
    ax.set_ylabel("%")
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelsize=7, rotation=30)
    return _save(fig, out_dir, "errors.png")


def instances(rows: Iterable[Row], out_dir: str) -> str | None:
    """Requests per kgate instance against the fleet mean: is the load balanced?"""
    req: dict[str, int] = defaultdict(int)
    for r in rows:
        req[_label(r["instance"], "?")] += r["requests"]
    if not req:
        return None
    names = sorted(req)
    values = [req[k] for k in names]
    mean = sum(values) / len(values)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.bar(names, values, color="#66ccee")
    ax.axhline(mean, color="#333333", linestyle="--", linewidth=1, label=f"mean {mean:,.0f}")
    ax.set_title("Requests per kgate instance")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=7, rotation=30)
    return _save(fig, out_dir, "instances.png")


def latency(rows: Iterable[Row], out_dir: str, n: int = 10) -> str | None:
    """p50/p95/p99 latency (ms, log scale) per api key over the whole window, busiest apis first."""
    data = sorted(rows, key=lambda r: -r["answered"])[:n]
    if not data:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.4))
    names = [_label(r["api_name"], str(r["api_key"])) for r in data]
    width = 0.27
    for i, (col, color) in enumerate((("p50_us", "#228833"), ("p95_us", "#ccbb44"), ("p99_us", "#cc3311"))):
        xs = [x + (i - 1) * width for x in range(len(names))]
        ax.bar(xs, [max(r[col] or 0, 1) / 1000.0 for r in data], width, label=col[:3], color=color)
    ax.set_xticks(range(len(names)), names, fontsize=7, rotation=30)
    ax.set_yscale("log")
    ax.set_ylabel("ms")
    ax.set_title("Latency per api key (request read to answer handed to the client)")
    ax.legend(fontsize=8)
    return _save(fig, out_dir, "latency.png")


def topic_ids(adoption: Iterable[Row], stale: Iterable[Row], unresolved: Iterable[Row], out_dir: str) -> str | None:
    """Left: clients by topic-id adoption. Right: stale-id and never-resolved-id requests per topic."""
    per_client: dict[tuple[Any, Any], list[int]] = defaultdict(lambda: [0, 0])
    for r in adoption:
        acc = per_client[(r["principal"], r["client_id"])]
        acc[0] += r["with_ids"]
        acc[1] += r["fetch_produce"]
    buckets = {"none (0%)": 0, "partial": 0, "all (100%)": 0}
    for with_ids, total in per_client.values():
        key = "none (0%)" if with_ids == 0 else "all (100%)" if with_ids == total else "partial"
        buckets[key] += 1
    bad: dict[str, float] = defaultdict(float)
    for r in stale:
        bad[f"{_label(r['topic_name'], '?')} (stale id)"] += r["requests"]
    for r in unresolved:
        bad[f"{r['topic_id']} (never resolved)"] += r["requests"]
    if not per_client and not bad:
        return None
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.bar(list(buckets), list(buckets.values()), color=["#cc3311", "#ccbb44", "#228833"])
    a.set_title("Clients by Fetch/Produce at topic-id versions", fontsize=10)
    a.set_ylabel("clients")
    top = _top(bad, 10)
    if top:
        b.barh([k for k, _ in top][::-1], [v for _, v in top][::-1], color="#cc3311")
        b.tick_params(axis="y", labelsize=7)
    else:
        b.text(0.5, 0.5, "no stale or unresolved topic ids", ha="center", va="center")
        b.set_axis_off()
    b.set_title("Requests with stale / unresolved topic ids", fontsize=10)
    return _save(fig, out_dir, "topic_ids.png")
