#!/usr/bin/env python3
"""What a name-needing filter costs per Fetch request, against passthrough and a direct connection.

The yardstick's consume rows move megabytes per Fetch, so they barely see what kgate spends per
request. A consumer tailing a topic is the other extreme: many small Fetches, each answered with
a few records. This bench times that case: sequential Fetch v15 requests (topic by id, one
partition, one 100 B record in each answer) against Tansu directly, through kgate passthrough and
through kgate with ``topic-policy`` (warm id cache), in interleaved rounds so that machine noise
hits all three alike. It reports round-trip p50/p99, requests per second as a ratio to direct,
and the proxies' CPU per request read from /proc.

Run: ``python bench/fetch_overhead.py [--n 4000] [--rounds 8]`` (needs the test extras).
Everything runs on 127.0.0.1; every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cold_id import FETCH, ROOT, client, create_topics, fetch_by_id, free_port, start_tansu, stop_all, wait_port

FETCH_VERSION = 15
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime + stime


def start_kgate(broker: int, port: int, policy: bool) -> subprocess.Popen:
    argv = [sys.executable, "-m", "kgate", "run", "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{broker}"]
    if policy:
        argv += ["--filter", 'topic-policy={"deny": ["secret-*"]}']
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def produce_one(broker: int, topic: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": f"127.0.0.1:{broker}", "linger.ms": 0})
    p.produce(topic, b"x" * 100)
    if p.flush(10):
        raise RuntimeError("could not produce the record the Fetches read")


async def rounds(args: argparse.Namespace, ports: dict[str, int], pids: dict[str, int], tid: uuid.UUID) -> None:
    clients = {name: client(port) for name, port in ports.items()}
    request = fetch_by_id(tid)
    request.min_bytes, request.max_wait_ms = 1, 500  # the record is there: answered at once
    for c in clients.values():  # connect, and warm kgate's id cache (Metadata is not needed for that)
        for _ in range(50):
            _v, resp = await c.request(FETCH, request, FETCH_VERSION)
        parts = [p for t in resp.responses for p in t.partitions]
        if not parts or parts[0].error_code or not parts[0].records:
            raise RuntimeError(f"Fetch via {c} did not return the record: {resp}")
    lat: dict[str, list[float]] = {n: [] for n in ports}
    wall: dict[str, float] = dict.fromkeys(ports, 0.0)
    cpu: dict[str, float] = dict.fromkeys(ports, 0.0)
    names = list(ports)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            c, pid = clients[name], pids.get(name)
            c0 = cpu_s(pid) if pid else 0.0
            t0 = time.perf_counter()
            for _ in range(args.n // args.rounds):
                t = time.perf_counter()
                await c.request(FETCH, request, FETCH_VERSION)
                lat[name].append((time.perf_counter() - t) * 1e6)
            wall[name] += time.perf_counter() - t0
            cpu[name] += (cpu_s(pid) - c0) if pid else 0.0
    for c in clients.values():
        c.close()
    base = len(lat["direct"]) / wall["direct"]
    print(f"{'target':<14} {'p50 us':>8} {'p99 us':>8} {'req/s':>8} {'ratio':>6} {'proxy CPU us/req':>17}")
    for name in names:
        v = sorted(lat[name])
        rate = len(v) / wall[name]
        per_req = f"{cpu[name] / len(v) * 1e6:17.1f}" if name in pids else f"{'-':>17}"
        print(
            f"{name:<14} {statistics.median(v):8.0f} {v[int(0.99 * len(v))]:8.0f} {rate:8.0f} {rate / base:6.2f}"
            f"{per_req}"
        )
    if "kgate" in pids and "kgate-policy" in pids:
        ratio = (len(lat["kgate-policy"]) / wall["kgate-policy"]) / (len(lat["kgate"]) / wall["kgate"])
        cpu_ratio = cpu["kgate-policy"] / cpu["kgate"] if cpu["kgate"] else float("nan")
        print(f"kgate-policy vs kgate: throughput {ratio:.3f}x, CPU per request {cpu_ratio:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4000, help="Fetch requests per target")
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds the requests are split into")
    ap.add_argument("--targets", default="direct,kgate,kgate-policy", help="comma list (direct is always run)")
    args = ap.parse_args()
    broker = free_port()
    wanted = {"direct", *args.targets.split(",")}
    ports = {"direct": broker, **{n: free_port() for n in ("kgate", "kgate-policy") if n in wanted}}
    tansu = start_tansu(broker)
    procs: dict[str, subprocess.Popen] = {}
    try:
        wait_port(broker)
        procs = {n: start_kgate(broker, ports[n], n == "kgate-policy") for n in ports if n != "direct"}
        for name in procs:
            wait_port(ports[name])
        topic = f"tail-{uuid.uuid4().hex[:8]}"

        async def setup() -> uuid.UUID:
            c = client(broker)
            try:
                return (await create_topics(c, [topic]))[topic]
            finally:
                c.close()

        tid = asyncio.run(setup())
        produce_one(broker, topic)
        asyncio.run(rounds(args, ports, {n: p.pid for n, p in procs.items()}, tid))
    finally:
        stop_all(*procs.values(), tansu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
