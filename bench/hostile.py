"""Hostile clients against a live kgate, with a healthy client beside them (loopback only).

Scenarios (each bounded in count and time, every process stopped by PID):

- ``noread``: one producer pipelines Produce requests (acks=1, 100 KiB each) and never reads an
  answer, for ``--seconds``. Reports kgate's peak RSS growth and a healthy client's Metadata
  round trip (p50/p99) while it runs.
- ``slowloris``: ``--clients`` connections each send one byte every 100 ms of a never-ending
  frame header; reports how many kgate still holds open after ``--seconds``.
- ``halfopen``: ``--clients`` connections that send nothing; how many are still open after
  ``--seconds``.
- ``bigpartial``: 6 connections each send 60 MiB of a 100 MiB CreateTopics frame (held whole
  for guardrails, unlike a streamed Produce) and close; kgate's RSS before, at the peak, and
  ``--seconds`` after they closed (what the process gives back).

kgate runs from the source tree given by ``--src`` (default: this checkout), so an A/B run
compares two builds in one invocation: ``--src /tmp/kgate-old --src .``.

    .venv/bin/python bench/hostile.py noread slowloris --seconds 20
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import procs  # noqa: E402
from support.ports import free_port, free_port_range  # noqa: E402
from support.wire import RawClient, produce_request  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_kgate(
    src: str, upstream: str, workdir: Path, extra_proxy: dict | None = None
) -> tuple[subprocess.Popen, int]:
    import yaml

    listen, base = free_port(), free_port_range(256)
    cfg = {
        "log_level": "warning",
        "proxy": {"drain_timeout_s": 1, **(extra_proxy or {})},
        "virtual_clusters": [
            {
                "name": "bench",
                "listen": f"127.0.0.1:{listen}",
                "upstream": [upstream],
                "node_ports": {"base": base, "count": 256},
            },
        ],
    }
    path = workdir / f"kgate-{listen}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = open(workdir / f"kgate-{listen}.log", "wb")  # lives as long as the process
    proc = subprocess.Popen(
        [procs.PYTHON, "-m", "kgate", "run", "-c", str(path)],
        cwd=src,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    procs.wait_port(listen, 20, proc, "kgate")
    return proc, listen


def healthy_metadata_p(port: int, stop_at: float) -> tuple[float, float]:
    lat = []
    with RawClient(port) as c:
        cid = 1
        while time.monotonic() < stop_at:
            t = time.perf_counter()
            c.metadata(cid, topics=[], version=1)
            lat.append((time.perf_counter() - t) * 1e6)
            cid += 1
            time.sleep(0.05)
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1] if len(lat) > 1 else lat[0]


def noread(port: int, pid: int, seconds: float, topic: str) -> dict:
    import threading

    base = rss_kib(pid)
    peak = base
    frame = produce_request(1, topic, 0, [b"x" * 10], acks=1)  # small: many requests in flight per MB
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    stop_at = time.monotonic() + seconds
    result: dict = {}
    t = threading.Thread(
        target=lambda: result.update(zip(("p50", "p99"), healthy_metadata_p(port, stop_at), strict=True))
    )
    t.start()
    total = 0
    stream = frame * 1000  # pipelined requests; a partial send goes on where it stopped
    pos = 0
    while time.monotonic() < stop_at:
        try:
            n = s.send(stream[pos : pos + 65536])
        except BlockingIOError:
            time.sleep(0.01)
            n = 0
        except OSError:
            break  # kgate closed it: that is a bound too
        pos += n
        total += n
        if len(stream) - pos < 65536:
            stream, pos = stream[pos:] + frame * 1000, 0
        peak = max(peak, rss_kib(pid))
    t.join()
    s.close()
    return {
        "sent_requests": total // len(frame),
        "rss_growth_mib": round((peak - base) / 1024, 1),
        "healthy_metadata_p50_us": round(result.get("p50", 0)),
        "healthy_metadata_p99_us": round(result.get("p99", 0)),
    }


def bigpartial(port: int, pid: int, seconds: float) -> dict:
    base = rss_kib(pid)
    peak = base
    header = (100 * 1024 * 1024).to_bytes(4, "big") + bytes([0, 19, 0, 2, 0, 0, 0, 1, 0, 0])
    chunk = b"\0" * (1024 * 1024)
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
    for s in socks:
        s.sendall(header)
    for _ in range(60):  # interleaved, so all six hold their partial frame at once
        for s in socks:
            s.sendall(chunk)
        peak = max(peak, rss_kib(pid))
    time.sleep(1)
    peak = max(peak, rss_kib(pid))
    for s in socks:
        s.close()
    time.sleep(seconds)
    after = rss_kib(pid)
    return {
        "rss_start_mib": round(base / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "rss_after_close_mib": round(after / 1024, 1),
        "after_minus_start_mib": round((after - base) / 1024, 1),
    }


def _open_count(socks: list[socket.socket]) -> int:
    n = 0
    for s in socks:
        try:
            s.setblocking(False)
            data = s.recv(1)
            if data == b"":
                continue
            n += 1
        except BlockingIOError:
            n += 1
        except OSError:
            continue
    return n


def slowloris(port: int, clients: int, seconds: float) -> dict:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(clients)]
    stop_at = time.monotonic() + seconds
    dribble = b"\x00\x00\x10\x00" + b"\x00\x03\x00\x01" + b"\x00" * 4088  # a 4 KiB Metadata frame, byte by byte
    i = 0
    while time.monotonic() < stop_at:
        for s in socks:
            try:
                s.send(dribble[i : i + 1])
            except OSError:
                pass
        i += 1
        time.sleep(0.1)
    still = _open_count(socks)
    for s in socks:
        s.close()
    return {"clients": clients, "still_open": still}


def halfopen(port: int, clients: int, seconds: float) -> dict:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(clients)]
    time.sleep(seconds)
    still = _open_count(socks)
    for s in socks:
        s.close()
    return {"clients": clients, "still_open": still}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="+", choices=["noread", "slowloris", "halfopen", "bigpartial"])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--clients", type=int, default=300)
    ap.add_argument("--src", action="append", help="kgate source tree(s) to run (A/B); default this checkout")
    args = ap.parse_args()
    srcs = args.src or [str(ROOT)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tansu = procs.Tansu(work / "tansu.log")
        tansu.start()
        try:
            topic = f"hostile-{os.getpid()}"
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
            for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
                f.result(10)
            for src in srcs:
                for scenario in args.scenarios:
                    proc, port = start_kgate(src, tansu.bootstrap, work)
                    try:
                        if scenario == "noread":
                            out = noread(port, proc.pid, args.seconds, topic)
                        elif scenario == "bigpartial":
                            out = bigpartial(port, proc.pid, args.seconds)
                        elif scenario == "slowloris":
                            out = slowloris(port, args.clients, args.seconds)
                        else:
                            out = halfopen(port, args.clients, args.seconds)
                    finally:
                        proc.terminate()
                        proc.wait(20)
                    print(f"{src}\t{scenario}\t{out}", flush=True)
        finally:
            tansu.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
