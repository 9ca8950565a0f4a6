"""``DIR/index.html``: the one page someone opens to understand the fleet in a minute.

The top is a short summary in sentences (window, volume, errors, latency, balance, and what needs
attention: stale or never-resolved topic ids, policy denials, bad input lines); the charts follow
(PNG files beside the page, so the page is small and each chart can be linked), then the head of
every table with a link to its full CSV, then the input files with malformed or unknown-version
lines. Everything shown is escaped: client ids and principals come from clients.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from html import escape
from typing import TYPE_CHECKING, Any

from kgate.pipeline import charts, trace
from kgate.pipeline.tables import LATENCY_WINDOW, PROBLEMS, TRAFFIC, Result

if TYPE_CHECKING:
    import pyarrow as pa

Row = Mapping[str, Any]
TABLE_ROWS = 15

#: Table name -> (title, the column to sort by, descending) for the page's table section.
SECTIONS: dict[str, tuple[str, str]] = {
    "stale_ids": ("Clients still on the topic id of a deleted or recreated topic", "requests"),
    "unresolved_ids": ("Topic ids that never resolved to a name", "requests"),
    "policy_denials": ("Policy denials per principal and resource", "denials"),
    "chargeback": ("Chargeback: records and record bytes per principal, client id and topic", "consumed_bytes"),
    "clients": ("Clients: requests and frame bytes", "requests"),
    "instances": ("kgate instances", "requests"),
    "latency_api": ("Latency per api key and day (µs)", "answered"),
    "latency_instance": ("Latency per instance and day (µs)", "answered"),
    "id_adoption": ("Topic-id adoption per client (Fetch/Produce v13+)", "fetch_produce"),
    "topic_id_history": ("Topic ids per topic name", "requests"),
    "topic_hourly": ("Topics per hour", "requests"),
    "api_errors": ("Exchanges per api key and error code", "requests"),
}


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000.0
    return f"{n} B"  # pragma: no cover


def _table(rows: Sequence[Row], limit: int = TABLE_ROWS) -> str:
    if not rows:
        return "<p class=none>none</p>"
    cols = list(rows[0].keys())
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{escape(_fmt(r[c]))}</td>" for c in cols) + "</tr>" for r in rows[:limit])
    more = f"<p class=more>{len(rows) - limit:,} more rows in the CSV</p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def summary(result: Result) -> list[str]:
    """The page's opening sentences (HTML-escaped), computed from the tables only."""
    t = {k: v.to_pylist() for k, v in result.tables.items()}
    inst = t.get("instances", [])
    requests = sum(r["requests"] for r in inst)
    lines: list[str] = []
    if not requests:
        lines.append("No events in the input (or none inside --since/--until).")
    else:
        first = min(r["first_seen"] for r in inst)
        last = max(r["last_seen"] for r in inst)
        clients = {(r["principal"], r["client_id"]) for r in t.get("clients", [])}
        principals = {r["principal"] for r in t.get("clients", []) if r["principal"]}
        topics = {r["topic_name"] for r in t.get("topic_hourly", []) if r["topic_name"]}
        req_b = sum(r["request_bytes"] or 0 for r in inst)
        resp_b = sum(r["response_bytes"] or 0 for r in inst)
        lines.append(
            f"<b>{requests:,}</b> exchanges from {_fmt(first)} to {_fmt(last)} UTC through "
            f"<b>{len({r['instance'] for r in inst})}</b> kgate instances: {len(clients):,} clients "
            f"({len(principals):,} principals) on {len(topics):,} topics; {_bytes(req_b)} in, "
            f"{_bytes(resp_b)} out on the wire."
        )
        per_inst: dict[str, int] = defaultdict(int)
        for r in inst:
            per_inst[r["instance"]] += r["requests"]
        if len(per_inst) > 1:
            busiest = max(per_inst, key=lambda k: per_inst[k])
            ratio = per_inst[busiest] / (requests / len(per_inst))
            lines.append(
                f"Busiest instance: {escape(busiest)} at {ratio:.2f}x the fleet mean"
                f"{' (unbalanced)' if ratio > 1.5 else ''}."
            )
        errors = sum(r["errors"] for r in inst)
        normal = sum(r["normal_errors"] for r in inst)
        lines.append(
            f"Failures: {errors:,} exchanges ({100.0 * errors / requests:.2f}%) answered with an error code"
            f"; {normal:,} more with a code of the protocol's normal course (rebalances, leader and "
            "coordinator moves), not counted as failures."
        )
        lat = sorted(result.latency_api.to_pylist(), key=lambda r: -r["answered"])[:3]
        if lat:
            lines.append(
                "Latency p50 / p99: "
                + "; ".join(
                    f"{escape(_fmt(r['api_name']))} {r['p50_us'] / 1000:.1f} / {r['p99_us'] / 1000:.1f} ms" for r in lat
                )
                + "."
            )
        fp = sum(r["fetch_produce"] for r in t.get("id_adoption", []))
        if fp:
            share = sum(r["with_ids"] for r in t.get("id_adoption", [])) / fp
            lines.append(f"Topic-id adoption: {100 * share:.1f}% of Fetch/Produce requests use topic ids.")
    stale = t.get("stale_ids", [])
    if stale:
        who = sorted({f"{r['client_id'] or '?'} ({r['principal'] or 'anonymous'})" for r in stale})
        lines.append(
            f"<b class=bad>Attention:</b> {len(who)} client(s) still use the topic id of a deleted or recreated "
            f"topic ({sum(r['requests'] for r in stale):,} requests): {escape(', '.join(who[:8]))}"
            f"{' ...' if len(who) > 8 else ''}."
        )
    unknown = sum(r["produced_records_unknown"] + r["consumed_records_unknown"] for r in t.get("chargeback", []))
    if unknown:
        lines.append(
            f"<b class=bad>Attention:</b> {unknown:,} Produce/Fetch topic entries have no record count (the audit "
            "log could not count them: compressed legacy message sets); their groups' record sums are left empty "
            "in the tables, never counted as 0."
        )
    unresolved = {r["topic_id"] for r in t.get("unresolved_ids", [])}
    if unresolved:
        lines.append(f"<b class=bad>Attention:</b> {len(unresolved)} topic id(s) never resolved to a name.")
    denials = t.get("policy_denials", [])
    if denials:
        lines.append(
            f"Policy denials: {sum(r['denials'] for r in denials):,} for "
            f"{len({r['principal'] for r in denials})} principal(s)."
        )
    prob = result.problems.to_pylist()
    bad = sum(r["malformed"] for r in prob)
    unknown = sum(r["unknown_schema"] for r in prob)
    total = sum(r["lines"] for r in prob)
    msg = f"Input: {len(prob)} file(s), {total:,} lines"
    if bad or unknown:
        msg += (
            f"; <b class=bad>{bad:,} malformed and {unknown:,} of an unknown schema version skipped</b> "
            "(see Input problems below)"
        )
    lines.append(msg + ".")
    return lines


CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1200px;color:#222}
h1{margin-bottom:.2em} .bad{color:#b00}
ul.summary li{margin:.25em 0}
.charts img{max-width:100%;border:1px solid #ddd;margin:.4em 0}
table{border-collapse:collapse;font-size:12px;margin:.4em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right} th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left} .none,.more{color:#777;font-size:12px}
"""


Rows = list[dict[str, Any]]
#: The page's charts, in its order: caption, the tables each draws from (by :mod:`kgate.pipeline.tables`
#: name, :data:`LATENCY_WINDOW` and :data:`TRAFFIC` included), and how (rows of each, output dir -> file).
CHARTS: tuple[tuple[str, tuple[str, ...], Callable[..., str | None]], ...] = (
    ("Traffic per topic over time", (TRAFFIC,), charts.traffic),
    ("Top principals and clients", ("chargeback", "clients"), charts.principals),
    ("Error rates", ("api_errors",), charts.errors),
    ("Instance balance", ("instances",), charts.instances),
    ("Latency", (LATENCY_WINDOW,), charts.latency),
    ("Topic-id health", ("id_adoption", "stale_ids", "unresolved_ids"), charts.topic_ids),
)


class ChartPainter:
    """Draws the page's charts on one background thread while the report queries still run.

    A cold run's charts (matplotlib's import, its fonts, six figures) took seconds after the last
    query; here matplotlib is imported while the JVM starts, and each chart is drawn as soon as the
    tables it shows have arrived (:meth:`add`, the ``on_table`` of :func:`kgate.pipeline.tables.build`).
    One thread only: pyplot's state is not thread-safe, and the drawing holds the GIL anyway.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="charts")
        self._pool.submit(charts.warm_up)
        self._lock = threading.Lock()
        self._tables: dict[str, pa.Table] = {}
        self._drawn: dict[str, Future[str | None]] = {}

    def add(self, name: str, table: pa.Table) -> None:
        """Table ``name`` arrived: draw every chart whose tables are all here now."""
        with self._lock:
            self._tables[name] = table
            for caption, needs, draw in CHARTS:
                if caption not in self._drawn and all(n in self._tables for n in needs):
                    inputs = [self._tables[n] for n in needs]
                    self._drawn[caption] = self._pool.submit(self._draw, caption, draw, inputs)

    def _draw(self, caption: str, draw: Callable[..., str | None], inputs: list[pa.Table]) -> str | None:
        name = draw(*[t.to_pylist() for t in inputs], self.out_dir)
        trace.mark(f"chart drawn: {caption}")
        return name

    def drawn(self, result: Result) -> list[tuple[str, str | None]]:
        """Every chart's (caption, file or None), those not drawn yet (a table never added) drawn now."""
        for name, table in (*result.tables.items(), (LATENCY_WINDOW, result.latency_api), (TRAFFIC, result.traffic)):
            if name not in self._tables:
                self.add(name, table if table is not None else _empty_traffic())
        try:
            return [(caption, self._drawn[caption].result()) for caption, _needs, _draw in CHARTS]
        finally:
            self._pool.shutdown(wait=False)

    def close(self) -> None:
        """Stop drawing (a run that failed): charts under way finish, none more start."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _empty_traffic() -> pa.Table:
    import pyarrow as pa

    return pa.table({"minute": pa.array([], pa.int64()), "topic_name": pa.array([], pa.string())})


def render(result: Result, out_dir: str, title: str = "kgate fleet report", painter: ChartPainter | None = None) -> str:
    """Draw the charts into ``out_dir`` (or take those ``painter`` drew meanwhile) and write
    ``out_dir/index.html``; returns the page's path."""
    os.makedirs(out_dir, exist_ok=True)
    trace.mark("page: start")
    t = {k: v.to_pylist() for k, v in result.tables.items()}
    if painter is None:
        painter = ChartPainter(out_dir)
    drawn = painter.drawn(result)
    trace.mark("page: charts drawn")
    parts = [
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title><style>{CSS}</style></head>",
        f"<body><h1>{escape(title)}</h1>",
        f"<p class=none>generated {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC; "
        "tables as CSV in <a href='csv/'>csv/</a> and Parquet (by day) in parquet/</p>",
        "<h2>Summary</h2><ul class=summary>" + "".join(f"<li>{s}</li>" for s in summary(result)) + "</ul>",
        "<h2>Charts</h2><div class=charts>",
    ]
    for caption, name in drawn:
        if name is not None:
            parts.append(f"<h3>{escape(caption)}</h3><img src='{escape(name)}' alt='{escape(caption)}'>")
    parts.append("</div><h2>Tables</h2>")
    for name, (caption, key) in SECTIONS.items():
        rows = sorted(t.get(name, []), key=lambda r, k=key: -(r.get(k) or 0))  # type: ignore[misc]
        parts.append(f"<h3>{escape(caption)} <a class=none href='csv/{name}.csv'>{name}.csv</a></h3>")
        parts.append(_table(rows))
    prob = [r for r in result.problems.to_pylist() if r["malformed"] or r["unknown_schema"]]
    parts.append(f"<h2>Input problems <a class=none href='csv/{PROBLEMS}.csv'>{PROBLEMS}.csv</a></h2>")
    parts.append(_table(prob, limit=50))
    parts.append("</body></html>")
    path = os.path.join(out_dir, "index.html")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    os.replace(tmp, path)
    return path
