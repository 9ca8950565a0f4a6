"""Write docs/grafana/kgate.json, the Grafana dashboard for kgate's metrics.

    .venv/bin/python tools/grafana_dashboard.py

Generated rather than hand-edited so that every panel is one line here and the metric names
can be checked (tests/proxy/control/test_grafana_dashboard.py compares them with what kgate exports).
Queries sum ``without (worker, instance)`` so one dashboard serves single processes,
``--workers`` and fleets alike; the ``cluster`` variable picks virtual clusters.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "kgate.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'cluster=~"$cluster"'


def panel(
    title: str, exprs: list[tuple[str, str]], unit: str = "short", kind: str = "timeseries", desc: str = ""
) -> dict:
    return {
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}},
        "targets": [
            {"datasource": DS, "expr": e, "legendFormat": legend, "refId": chr(65 + i)}
            for i, (e, legend) in enumerate(exprs)
        ],
    }


def row(title: str) -> dict:
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


PANELS: list[dict] = [
    row("Traffic"),
    panel(
        "Requests per api",
        [(f"sum by (api) (rate(kgate_requests_total{{{SEL}}}[$__rate_interval]))", "{{api}}")],
        "reqps",
        desc="Requests received from clients (kgate_requests_total), by api name",
    ),
    panel(
        "Request latency p99 per api",
        [
            (
                f"histogram_quantile(0.99, sum by (api, le) (rate(kgate_request_duration_seconds_bucket{{{SEL}}}"
                "[$__rate_interval])))",
                "{{api}}",
            )
        ],
        "s",
        desc="Request to response through kgate (kgate_request_duration_seconds)",
    ),
    panel(
        "Request latency p50 per api",
        [
            (
                f"histogram_quantile(0.5, sum by (api, le) (rate(kgate_request_duration_seconds_bucket{{{SEL}}}"
                "[$__rate_interval])))",
                "{{api}}",
            )
        ],
        "s",
    ),
    panel(
        "Client vs upstream latency p99 per api",
        [
            (
                f"histogram_quantile(0.99, sum by (api, le) (rate(kgate_request_duration_seconds_bucket{{{SEL}}}"
                "[$__rate_interval])))",
                "client {{api}}",
            ),
            (
                "histogram_quantile(0.99, sum by (api, le) "
                f"(rate(kgate_upstream_request_duration_seconds_bucket{{{SEL}}}"
                "[$__rate_interval])))",
                "upstream {{api}}",
            ),
        ],
        "s",
        desc="client: kgate's whole exchange (kgate_request_duration_seconds); upstream: the broker's part "
        "(kgate_upstream_request_duration_seconds). A gap between them is time spent in kgate",
    ),
    panel(
        "Bytes in / out per api",
        [
            (f"sum by (api) (rate(kgate_request_bytes_total{{{SEL}}}[$__rate_interval]))", "in {{api}}"),
            (f"-sum by (api) (rate(kgate_response_bytes_total{{{SEL}}}[$__rate_interval]))", "out {{api}}"),
        ],
        "Bps",
        desc="Client requests in (positive), responses out (negative)",
    ),
    panel(
        "Error responses per api and code",
        [
            (
                f'sum by (api, error) (rate(kgate_responses_total{{{SEL}, error!="NONE"}}[$__rate_interval]))',
                "{{api}} {{error}}",
            )
        ],
        "reqps",
        desc="Responses whose error code is not NONE (kgate_responses_total)",
    ),
    row("Connections"),
    panel(
        "Open connections by side",
        [(f"sum by (cluster, side) (kgate_open_connections{{{SEL}}})", "{{cluster}} {{side}}")],
        "short",
    ),
    panel(
        "Accepted connections",
        [(f"sum by (cluster) (rate(kgate_accepted_connections_total{{{SEL}}}[$__rate_interval]))", "{{cluster}}")],
        "cps",
        desc="A reconnect storm shows here first",
    ),
    panel(
        "Closed on error by reason",
        [(f"sum by (reason) (rate(kgate_connections_closed_on_error_total{{{SEL}}}[$__rate_interval]))", "{{reason}}")],
        "cps",
    ),
    panel(
        "Timeouts, refusals, upstream connect failures",
        [
            (f"sum by (kind) (rate(kgate_connection_timeouts_total{{{SEL}}}[$__rate_interval]))", "timeout {{kind}}"),
            (
                f"sum by (reason) (rate(kgate_connections_refused_total{{{SEL}}}[$__rate_interval]))",
                "refused {{reason}}",
            ),
            (f"sum(rate(kgate_upstream_connect_failures_total{{{SEL}}}[$__rate_interval]))", "upstream connect failed"),
        ],
        "cps",
    ),
    row("Filters"),
    panel(
        "Filter decisions (not forward)",
        [
            (
                f"sum by (filter, direction, decision) (rate(kgate_filter_decisions_total{{{SEL}}}[$__rate_interval]))",
                "{{filter}} {{direction}} {{decision}}",
            )
        ],
        "ops",
    ),
    panel(
        "Filter errors and timeouts",
        [
            (
                f"sum by (filter, direction) (rate(kgate_filter_errors_total{{{SEL}}}[$__rate_interval]))",
                "error {{filter}} {{direction}}",
            ),
            (
                f"sum by (filter, direction) (rate(kgate_filter_timeouts_total{{{SEL}}}[$__rate_interval]))",
                "timeout {{filter}} {{direction}}",
            ),
        ],
        "ops",
    ),
    panel(
        "Suspended messages",
        [(f"sum by (direction) (kgate_suspended_messages{{{SEL}}})", "{{direction}}")],
        "short",
        desc="Messages waiting on a filter hook that awaits",
    ),
    panel(
        "Suspension time p99",
        [
            (
                f"histogram_quantile(0.99, sum by (direction, le) (rate(kgate_suspension_seconds_bucket{{{SEL}}}"
                "[$__rate_interval])))",
                "{{direction}}",
            )
        ],
        "s",
    ),
    row("Topics and TLS"),
    panel(
        "Top 10 topics by record bytes",
        [
            (
                f"topk(10, sum by (topic, direction) (rate(kgate_topic_bytes_total{{{SEL}}}[$__rate_interval])))",
                "{{direction}} {{topic}}",
            )
        ],
        "Bps",
        desc="Record bytes per topic: in (Produce), out (Fetch). Capped at admin.topic_metrics.max_topics "
        "topics; later ones show as <other>",
    ),
    panel(
        "Top 10 topics by requests; cap overflow",
        [
            (
                f"topk(10, sum by (topic, api) (rate(kgate_topic_requests_total{{{SEL}}}[$__rate_interval])))",
                "{{api}} {{topic}}",
            ),
            (f"sum(rate(kgate_topic_metrics_overflow_total{{{SEL}}}[$__rate_interval]))", "over the cap (<other>)"),
        ],
        "reqps",
        desc="A steady 'over the cap' means admin.topic_metrics.max_topics is too small",
    ),
    panel(
        "TLS handshake failures",
        [
            (
                f"sum by (cluster, side) (rate(kgate_tls_handshake_failures_total{{{SEL}}}[$__rate_interval]))",
                "{{cluster}} {{side}}",
            )
        ],
        "cps",
        desc="client: wrong CA, plaintext client, expired certificate, no handshake in time; upstream: "
        "kgate to a broker. The log has one line per burst with the peer and reason",
    ),
    row("Clients and quotas"),
    panel(
        "Top 10 clients by bytes",
        [
            (
                f"topk(10, sum by (principal, client_id, direction) "
                f"(rate(kgate_client_bytes_total{{{SEL}}}[$__rate_interval])))",
                "{{direction}} {{client_id}} {{principal}}",
            )
        ],
        "Bps",
        desc="Frame bytes per (principal, client id): in from clients, out to them. The top "
        "admin.client_metrics.max_clients pairs have series; the rest show as client_id=other",
    ),
    panel(
        "Top 10 clients by requests",
        [
            (
                f"topk(10, sum by (principal, client_id) "
                f'(rate(kgate_client_requests_total{{{SEL},direction="in"}}[$__rate_interval])))',
                "{{client_id}} {{principal}}",
            )
        ],
        "reqps",
    ),
    panel(
        "Quota throttling (share of time not read)",
        [
            (
                f"topk(10, sum by (principal, client_id) "
                f"(rate(kgate_client_throttle_seconds_total{{{SEL}}}[$__rate_interval])))",
                "{{client_id}} {{principal}}",
            )
        ],
        "percentunit",
        desc="Seconds per second kgate stopped reading a client over a quota (the quotas filter, "
        "docs/quotas.md): 1 = throttled all the time",
    ),
    panel(
        "Connections per principal",
        [
            (f"topk(10, sum by (principal) (kgate_client_connections_by_principal{{{SEL}}}))", "{{principal}}"),
            (f"sum(rate(kgate_client_metrics_evictions_total{{{SEL}}}[$__rate_interval]))", "series evictions"),
        ],
        "short",
        desc="Open connections per principal (empty: no identity proven)",
    ),
    row("Topic ids, memory, processes"),
    panel(
        "Topic-id cache",
        [
            (f"sum(rate(kgate_topic_names_hits_total{{{SEL}}}[$__rate_interval]))", "hits"),
            (f"sum(rate(kgate_topic_names_misses_total{{{SEL}}}[$__rate_interval]))", "misses"),
            (f"sum(kgate_topic_names_size{{{SEL}}})", "size"),
        ],
        "short",
    ),
    panel(
        "Held request bytes",
        [
            ("sum(kgate_held_request_bytes)", "held"),
            ("max(kgate_held_request_bytes_peak)", "peak"),
            ("sum(kgate_held_cap_paused_connections)", "connections paused at the cap"),
        ],
        "bytes",
    ),
    panel(
        "Worker restarts (--workers)",
        [("sum by (instance, worker) (increase(kgate_worker_restarts_total[$__range]))", "{{instance}} {{worker}}")],
        "short",
        kind="stat",
    ),
    panel(
        "Config reloads (SIGHUP, POST /reload)",
        [("sum by (result) (increase(kgate_config_reloads_total[$__range]))", "{{result}}")],
        "short",
        kind="stat",
    ),
    panel(
        "Versions in the fleet",
        [("count by (version, python) (kgate_build_info)", "{{version}} {{python}}")],
        "short",
        kind="stat",
    ),
]


def layout(panels: list[dict]) -> list[dict]:
    y, x = 0, 0
    for i, p in enumerate(panels, 1):
        p["id"] = i
        if p["type"] == "row":
            if x:
                y, x = y + 8, 0
            p["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            y += 1
            continue
        p["gridPos"] = {"h": 8, "w": 12, "x": x, "y": y}
        x += 12
        if x >= 24:
            y, x = y + 8, 0
    return panels


def dashboard() -> dict:
    return {
        "title": "kgate",
        "uid": "kgate",
        "description": "kgate Kafka proxy: traffic, latency, connections, filters (docs/deployment.md)",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "tags": ["kafka", "kgate"],
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                {
                    "name": "cluster",
                    "type": "query",
                    "datasource": DS,
                    "label": "virtual cluster",
                    "query": "label_values(kgate_accepted_connections_total, cluster)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                },
            ]
        },
        "panels": layout(PANELS),
    }


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
