"""Start-up failures name what failed (issue 7, item 5)."""

from __future__ import annotations

import socket
import subprocess

import pytest
import yaml
from support import procs
from support.ports import free_port, free_port_range


@pytest.mark.timeout(60)
def test_bootstrap_port_in_use_names_cluster_and_address(tmp_path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", free_port()))
    taken.listen()
    port = taken.getsockname()[1]
    cfg = {
        "virtual_clusters": [
            {
                "name": "orders",
                "listen": f"127.0.0.1:{port}",
                "upstream": ["127.0.0.1:1"],
                "node_ports": {"base": free_port_range(16), "count": 16},
            }
        ]
    }
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(cfg))
    try:
        res = subprocess.run(
            [procs.PYTHON, "-m", "kgate", "run", "-c", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=procs.REPO,
        )
    finally:
        taken.close()
    assert res.returncode == 1, res
    assert f"cannot start: cluster orders: cannot listen on 127.0.0.1:{port}: Address already in use" in res.stderr
