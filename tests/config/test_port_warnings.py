"""check-config warns about ports inside the kernel's ephemeral range (issue 7, item 9)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from kgate.config import parse_config
from kgate.config.port_warnings import ephemeral_range, port_warnings


def _cfg(listen: int, base: int, count: int = 16) -> dict:
    return {
        "virtual_clusters": [
            {
                "name": "c",
                "listen": f"127.0.0.1:{listen}",
                "upstream": "127.0.0.1:9092",
                "node_ports": {"base": base, "count": count},
            }
        ]
    }


def test_overlaps_are_named_by_key_path() -> None:
    cfg = parse_config(_cfg(9192, 40000), "k.yaml")
    (w,) = port_warnings(cfg, (32768, 60999))
    assert w.startswith("virtual_clusters[0].node_ports: ports 40000-40015 overlap the ephemeral port range")
    cfg = parse_config(_cfg(33000, 9193), "k.yaml")
    assert [w.split(":")[0] for w in port_warnings(cfg, (32768, 60999))] == ["virtual_clusters[0].listen"]
    assert port_warnings(parse_config(_cfg(9192, 9193), "k.yaml"), (32768, 60999)) == []
    # a range that only touches the edge counts
    assert port_warnings(parse_config(_cfg(9192, 32760, 9), "k.yaml"), (32768, 60999))


def test_range_file_is_read_and_a_missing_one_means_linux_default(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("20000\t30000\n")
    assert ephemeral_range(f) == (20000, 30000)
    assert ephemeral_range(tmp_path / "none") == (32768, 60999)


def test_check_config_prints_the_warning_and_still_succeeds(tmp_path: Path) -> None:
    from support.procs import PYTHON, REPO

    lo, _hi = ephemeral_range()
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(_cfg(9192, lo + 10)))
    res = subprocess.run(
        [PYTHON, "-m", "kgate", "check-config", str(path)], capture_output=True, text=True, timeout=30, cwd=REPO
    )
    assert res.returncode == 0, res
    assert "kgate: warning:" in res.stderr
    assert "ephemeral port range" in res.stderr
    assert "max_inflight_requests=1000" in res.stdout
    assert "topic_names: batch_window_ms=2" in res.stdout
    assert "leader_hints=false" in res.stdout
    assert "filter_timeout_s=30" in res.stdout
