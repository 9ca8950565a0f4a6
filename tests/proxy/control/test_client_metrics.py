"""proxy/control/client_metrics.py: bounded per-client series, the space-saving re-ranking, the scrape."""

from __future__ import annotations

from prometheus_client import generate_latest

from kgate.api import ConnectionInfo
from kgate.proxy.control import client_metrics
from kgate.proxy.control.client_metrics import OTHER, ClientMetrics, TopClients


class Ex:
    def __init__(self, req_bytes: int, req: bytes = b"") -> None:
        self.req_bytes = req_bytes
        self.req = req


def _info(client_id: str | None, principal: str | None = None) -> ConnectionInfo:
    return ConnectionInfo(client_address="127.0.0.1:1", virtual_cluster="cm", client_id=client_id, principal=principal)


def test_first_clients_get_series_the_rest_fold_into_other() -> None:
    m = ClientMetrics("cm-a", max_clients=2)
    for cid in ("a", "b", "c", "d"):
        m.observe(Ex(100), _info(cid), b"x", 10, 0)  # type: ignore[arg-type]
    assert set(m.top.rows) == {("", "a"), ("", "b")}
    assert m.top.other[:4] == [2, 2, 200, 20]


def test_client_id_is_read_from_the_request_header_when_nobody_decoded_it() -> None:
    frame = (30).to_bytes(4, "big") + b"\x00\x12\x00\x03\x00\x00\x00\x01" + b"\x00\x05heavy" + b"\x00" * 13
    info = _info(None, principal="CN=alice")
    m = ClientMetrics("cm-b", max_clients=10)
    m.observe(Ex(len(frame), frame), info, None, None, 0)  # type: ignore[arg-type]
    assert info.client_id == "heavy"
    assert m.top.rows[("CN=alice", "heavy")][:4] == [1, 0, len(frame), 0]  # acks=0: no answer


def test_a_heavy_newcomer_takes_the_series_of_a_quiet_client_and_totals_only_grow() -> None:
    top = TopClients(max_clients=2)
    top.rebalance(0.0)  # the first round only sets the marks
    top.row(("", "quiet"), 10)[2] += 10
    top.row(("", "busy"), 10)[2] += 10
    for _ in range(5):  # a heavy client counted under other, noted in the sketch
        top.row(("", "heavy"), 1000)[2] += 1000
    top.rebalance(1.0)
    assert ("", "heavy") not in top.rows  # at most once per REBALANCE_S
    total_before = sum(r[2] for r in top.rows.values()) + top.other[2]
    top.rebalance(client_metrics.REBALANCE_S + 1)
    assert ("", "heavy") in top.rows
    assert len(top.rows) == 2
    assert top.evicted == 1
    total_after = sum(r[2] for r in top.rows.values()) + top.other[2]
    assert total_after == total_before  # the evicted series' counts went to other


def test_space_saving_keeps_at_most_max_clients_candidates() -> None:
    top = TopClients(max_clients=3)
    for i in range(3):
        top.row(("", f"t{i}"), 1)
    for i in range(100):
        top.row(("", f"n{i}"), 1)
    top.row(("", "big"), 10_000)
    assert len(top.sketch) == 3
    assert max(top.sketch, key=top.sketch.__getitem__) == ("", "big")


def test_the_scrape_has_both_directions_other_and_connections_per_principal() -> None:
    infos = [_info("x", "CN=a"), _info("y", "CN=a"), _info("z", None)]
    m = ClientMetrics("cm-c", max_clients=2, connections=lambda: infos)
    for info, size in zip(infos, (100, 50, 20), strict=True):
        m.observe(Ex(size), info, b"x", 7, 0)  # type: ignore[arg-type]
    text = generate_latest().decode()
    assert 'kgate_client_bytes_total{client_id="x",cluster="cm-c",direction="in",principal="CN=a"} 100.0' in text
    assert 'kgate_client_bytes_total{client_id="x",cluster="cm-c",direction="out",principal="CN=a"} 7.0' in text
    other = f'client_id="{OTHER}",cluster="cm-c",direction="in",principal="{OTHER}"'
    assert f"kgate_client_requests_total{{{other}}} 1.0" in text
    assert 'kgate_client_connections_by_principal{cluster="cm-c",principal="CN=a"} 2.0' in text
    assert 'kgate_client_connections_by_principal{cluster="cm-c",principal=""} 1.0' in text
    m.top.max_clients = 1  # more principals than series: the rest as other
    assert m.principals() == {OTHER: 3}
