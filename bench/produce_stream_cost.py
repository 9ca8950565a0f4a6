#!/usr/bin/env python3
"""Proxy cost per large Produce request, pipelined: kgate builds and filter sets, same run.

The yardstick's produce rows (``../shared/bench/run.py``) send librdkafka batches of ~0.4-0.7 MB;
its CPU cells move 20-30 % rep to rep on a shared machine and librdkafka batches differently
through a slower proxy, so a 10 % difference between two targets is hard to read there. This
bench sends the same requests to every target: ``--n`` Produce v9 requests of ``--records`` x
100 B records (one topic, one partition, acks=all), up to ``--window`` in flight on one
connection (a pipelining producer: a read often ends one request and starts the next), each
target its own in-memory Tansu, blocks interleaved (A B C, then C B A, ...). Per target it
prints the median over rounds and the ratio to the first target.

  (default)        proxy CPU µs per request (the process's CPU clock around each block)
  --instructions   user-space instructions per request (valgrind's callgrind, switched on only
                   around each block): exact under any machine load, ~50x slower. The
                   instructions of an equally long idle spell are subtracted (timers: the
                   internal-topics marks poll). Kernel work is not in it.
  --strace         syscalls per request (strace -c), e.g. writes upstream per request

Targets: ``--target NAME=DIR[:acl]``, DIR a kgate checkout or worktree (its code is imported by
PYTHONPATH), ``acl`` adding bench/ab_yardstick.py's authorizer (five rules, default deny) and
``internal-topics``. Example (issue 9, docs/performance.md):

    python bench/produce_stream_cost.py --target pass=. --target acl=.:acl \\
        --target acl-old=../wt-old:acl --rounds 8

Everything runs on 127.0.0.1; every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ab_yardstick import ACL  # noqa: E402
from bench.request_cost import free_port, tansu_binary, wait_port  # noqa: E402
from kgate.codec import api  # noqa: E402
from kgate.codec.generated.data import produce as pm  # noqa: E402
from kgate.codec.headers import request_frame  # noqa: E402
from kgate.codec.records import encode_batch  # noqa: E402

TOPIC = "stream-cost"
VERSION = 9


def produce_frames(n: int, records: int) -> list[bytes]:
    batch = encode_batch([(None, os.urandom(100)) for _ in range(records)], timestamp_ms=int(time.time() * 1000))
    hv = api.request_header_version(0, VERSION)
    frames = []
    partition = pm.PartitionProduceData(index=0, records=batch)
    for i in range(n):
        req = pm.ProduceRequest(acks=-1, timeout_ms=30000, transactional_id=None)
        req.topic_data = [pm.TopicProduceData(name=TOPIC, partition_data=[partition])]
        frames.append(request_frame(0, VERSION, 100 + i, "stream-cost", hv, req.encode(VERSION)))
    return frames


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the proxy")
        buf += chunk
    return bytes(buf)


def run_block(port: int, frames: list[bytes], window: int) -> None:
    """Send ``frames`` with up to ``window`` unanswered; every answer must report no error."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    slots = threading.Semaphore(window)
    errors: list[int] = []

    def read_answers() -> None:
        for _ in frames:
            body = _exact(sock, int.from_bytes(_exact(sock, 4), "big"))
            # v9 answer: correlation id, tags, topics (compact): count, name, partitions: count, index, error
            name_len = body[6] - 1
            at = 7 + name_len + 1 + 4
            err = int.from_bytes(body[at : at + 2], "big", signed=True)
            if err:
                errors.append(err)
            slots.release()

    reader = threading.Thread(target=read_answers)
    reader.start()
    for frame in frames:
        slots.acquire()
        sock.sendall(frame)
    reader.join()
    sock.close()
    if errors:
        raise RuntimeError(f"Produce answered with errors {errors[:5]}")


def _ctl(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def instructions(pid: int, name: str, outdir: str, work: Callable[[], None]) -> tuple[int, float]:
    """User-space instructions of ``pid`` while ``work`` runs, and how long it ran."""
    _ctl("-i", "on", str(pid))
    t0 = time.monotonic()
    work()
    wall = time.monotonic() - t0
    _ctl("-i", "off", str(pid))
    before = set(os.listdir(outdir))
    _ctl("-d", "block", str(pid))
    _ctl("-z", str(pid))
    (dump,) = [f for f in set(os.listdir(outdir)) - before if f.startswith(name + ".")]
    totals = [line for line in Path(outdir, dump).read_text().splitlines() if line.startswith(("summary:", "totals:"))]
    return int(totals[-1].split()[1]), wall


def syscalls(pid: int, out: str, work: Callable[[], None]) -> dict[str, int]:
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)], stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached
    work()
    tracer.send_signal(signal.SIGINT)
    tracer.wait()
    calls = {}
    for line in Path(out).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", required=True, help="NAME=DIR[:acl] (repeatable)")
    ap.add_argument("--n", type=int, default=60, help="requests per block")
    ap.add_argument("--records", type=int, default=6000, help="100 B records per request (6000: ~660 KB)")
    ap.add_argument("--window", type=int, default=5, help="requests in flight")
    ap.add_argument("--rounds", type=int, default=6)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--instructions", action="store_true", help="callgrind: user-space instructions per request")
    mode.add_argument("--strace", action="store_true", help="syscalls per request")
    args = ap.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    targets: dict[str, tuple[int, int]] = {}  # name -> (port, pid)
    logdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"produce-stream-cost-{os.getpid()}"
    logdir.mkdir()
    try:
        for spec in args.target:
            name, _, rest = spec.partition("=")
            src, _, filters = rest.partition(":")
            src = str(Path(src).resolve())
            broker, port = free_port(), free_port()
            listener = f"tcp://127.0.0.1:{broker}"
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
            argv = [sys.executable, "-m", "kgate", "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{broker}"]
            if filters == "acl":
                argv += ["--filter", "authorizer=" + json.dumps(ACL), "--filter", "internal-topics"]
            if args.instructions:
                out = f"--callgrind-out-file={logdir}/{name}.%p"
                argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", out, *argv]
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=src,
                    env=dict(os.environ, PYTHONPATH=src),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            targets[name] = (port, procs[-1].pid)
        for port, _pid in targets.values():
            wait_port(port, 300 if args.instructions else 20)
        frames = produce_frames(args.n, args.records)
        kb = sum(len(f) for f in frames) / len(frames) / 1000
        for port, _pid in targets.values():  # warm up: imports, caches, the broker's topic
            run_block(port, frames[:10], args.window)
        results: dict[str, list[float]] = {name: [] for name in targets}
        order = list(targets)
        for r in range(args.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                port, pid = targets[name]

                def block(port: int = port) -> None:
                    run_block(port, frames, args.window)

                if args.instructions:
                    busy, wall = instructions(pid, name, str(logdir), block)
                    idle, _ = instructions(pid, name, str(logdir), lambda: time.sleep(wall))  # noqa: B023
                    results[name].append((busy - idle) / args.n)
                elif args.strace:
                    calls = syscalls(pid, str(logdir / f"strace-{name}-{r}.txt"), block)
                    results[name].append(calls.get("write", 0) / args.n)
                    print(name, {k: round(v / args.n, 2) for k, v in sorted(calls.items()) if v >= args.n / 20})
                else:
                    c0 = time.clock_gettime(((~pid) << 3) | 2)  # the process's CPU clock (all threads)
                    block()
                    results[name].append((time.clock_gettime(((~pid) << 3) | 2) - c0) * 1e6 / args.n)
        unit = "instructions" if args.instructions else "writes" if args.strace else "CPU µs"
        print(f"{args.n} requests of {kb:.0f} KB per block, {args.rounds} rounds: {unit} per request")
        base = statistics.median(results[order[0]])
        for name in order:
            med = statistics.median(results[name])
            cells = " ".join(f"{v:.0f}" if v >= 100 else f"{v:.2f}" for v in results[name])
            per_mb = "" if args.strace else f"  {med / kb:8.3f} {'per KB' if args.instructions else 'ms/MB'}"
            print(f"  {name:14s} {med:12.1f}{per_mb}  {med / base:5.2f}x {order[0]}   ({cells})")
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGINT)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
