"""A yardstick target: kgate with its admin listener on, per-client metrics on or off.

    {python} bench/admin_target.py LISTEN UPSTREAM ADMIN_PORT on|off

Quick mode (``--listen``/``--upstream``) has no admin listener, so every per-exchange metric is
off there; this writes the same single-cluster config with ``admin.listen`` set and
``admin.client_metrics.enabled`` as asked, and runs kgate on it (for ``bench/ab_yardstick.py``'s
pass-through run.py options: ``--extra "{python} bench/admin_target.py {listen} {upstream} 19190 on"``).
"""

from __future__ import annotations

import os
import sys
import tempfile

import yaml


def main() -> None:
    listen, upstream, admin_port, clients = sys.argv[1:5]
    host, port = listen.rsplit(":", 1)
    config = {
        "virtual_clusters": [
            {
                "name": "default",
                "listen": listen,
                "upstream": upstream.split(","),
                "node_ports": {"base": int(port) + 1, "count": 256},
            }
        ],
        "admin": {"listen": f"{host}:{admin_port}", "client_metrics": {"enabled": clients == "on"}},
    }
    fd, path = tempfile.mkstemp(prefix="kgate-admin-target-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f)
    os.execv(sys.executable, [sys.executable, "-m", "kgate", "run", "-c", path])


if __name__ == "__main__":
    main()
