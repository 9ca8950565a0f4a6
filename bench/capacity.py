"""How many concurrent clients one kgate serves, started under a low open-files soft limit.

Each client holds one connection open and asks for Metadata; kgate needs two descriptors per client
(client side and broker side). kgate is started with the soft RLIMIT_NOFILE set to ``--soft``
(1,024 is a common default) and the hard limit left as it is: kgate raises its soft limit to the
hard one at start (proxy/carrier/fd_limit.py). Before that, 503 of 1,000 clients were served.

    .venv/bin/python bench/capacity.py --clients 1000 --src /tmp/kgate-old --src .

Loopback only, bounded by ``--clients``; every process is stopped by PID.
"""

from __future__ import annotations

import argparse
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import procs  # noqa: E402
from support.ports import free_port, free_port_range  # noqa: E402
from support.wire import metadata_request  # noqa: E402


def run(src: str, upstream: str, clients: int, soft: int, work: Path) -> dict:
    import subprocess

    import yaml

    listen, base = free_port(), free_port_range(16)
    cfg = {
        "log_level": "warning",
        "proxy": {"drain_timeout_s": 1},
        "virtual_clusters": [
            {
                "name": "cap",
                "listen": f"127.0.0.1:{listen}",
                "upstream": [upstream],
                "node_ports": {"base": base, "count": 16},
            }
        ],
    }
    path = work / f"cap-{listen}.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def lower_soft_limit() -> None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))

    log = open(work / f"cap-{listen}.log", "wb")  # lives as long as the process
    proc = subprocess.Popen(
        [procs.PYTHON, "-m", "kgate", "run", "-c", str(path)],
        cwd=src,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lower_soft_limit,
    )
    try:
        procs.wait_port(listen, 20, proc, "kgate")
        socks, served = [], 0
        t0 = time.monotonic()
        for i in range(clients):
            try:
                s = socket.create_connection(("127.0.0.1", listen), timeout=5)
                s.sendall(metadata_request(i, [], version=1))
                socks.append(s)
            except OSError:
                continue
        for s in socks:
            try:
                s.settimeout(10)
                if len(s.recv(4)) == 4:
                    served += 1
            except OSError:
                pass
        took = time.monotonic() - t0
        for s in socks:
            s.close()
        return {"clients": clients, "served": served, "seconds": round(took, 1)}
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--soft", type=int, default=1024)
    ap.add_argument("--src", action="append")
    args = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2 * args.clients + 100:
        print(f"capacity: the hard open-files limit ({hard}) is too low for {args.clients} clients", file=sys.stderr)
        return 2
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process holds every client socket
    with tempfile.TemporaryDirectory() as tmp:
        tansu = procs.Tansu(Path(tmp) / "tansu.log")
        tansu.start()
        try:
            for src in args.src or [str(ROOT)]:
                print(
                    f"{src}\tsoft={args.soft}\t{run(src, tansu.bootstrap, args.clients, args.soft, Path(tmp))}",
                    flush=True,
                )
        finally:
            tansu.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
