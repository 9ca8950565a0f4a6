"""Memory per idle client connection: kgate's RSS before and after N clients connect and go quiet.

Each client sends one ApiVersions (so kgate has connected upstream for it: both sockets, both
protocol objects, the core) and then holds the connection idle. The figure is (RSS after - RSS
before) / N, read from /proc/PID/status (VmRSS) once the answers are all in. Used for sizing in
docs/deployment.md.

    .venv/bin/python bench/idle_memory.py --clients 2000
    .venv/bin/python bench/idle_memory.py --clients 2000 --half-open
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import procs  # noqa: E402
from support.wire import api_versions_request  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=2000)
    ap.add_argument(
        "--half-open", action="store_true", help="clients connect and send nothing (a slow or hostile client's cost)"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kgate-idle-"))
    tansu = procs.Tansu(work / "tansu.log").start()
    k = procs.Kgate(work / "kgate", [tansu.bootstrap], log_level="warning", metrics=False).start()
    socks: list[socket.socket] = []
    try:
        with socket.create_connection(("127.0.0.1", k.listen_port)) as warm:  # warm up the code paths
            warm.sendall(api_versions_request(1))
            warm.recv(65536)
        time.sleep(0.5)
        before = rss_kib(k.pid)
        for i in range(args.clients):
            s = socket.create_connection(("127.0.0.1", k.listen_port), timeout=10)
            if not args.half_open:
                s.sendall(api_versions_request(i))
            socks.append(s)
        if not args.half_open:
            for s in socks:
                s.recv(65536)  # the answer: kgate connected upstream for this client
        time.sleep(1.0 if not args.half_open else 3.0)  # half-open: until kgate has accepted them all
        after = rss_kib(k.pid)
        per = (after - before) / args.clients
        kind = "half-open" if args.half_open else "idle"
        print(f"clients {args.clients}: RSS {before} KiB -> {after} KiB, {per:.1f} KiB per {kind} connection")
    finally:
        for s in socks:
            s.close()
        k.kill()
        tansu.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
