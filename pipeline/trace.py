"""A timestamped trace of a ``kgate report`` run's phases on stderr (``KGATE_REPORT_TRACE=1``).

A cold run's wall time is spread over the JVM's start, the roll-up, the report queries, the writes,
the charts and the JVM's exit; this says which, from the process's own start (so the interpreter's
start-up and imports are counted), with the driver's Python CPU beside it. Off by default: one
environment lookup per mark.
"""

from __future__ import annotations

import os
import sys
import threading
import time

ENV = "KGATE_REPORT_TRACE"


def _process_start() -> float:
    """``time.monotonic()`` at which this process started (Linux: from /proc; else now)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
        return time.monotonic() - max(0.0, age)
    except (OSError, ValueError, IndexError):
        return time.monotonic()


_T0 = _process_start()


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def _children_cpu() -> float:
    """CPU seconds so far of this process's descendants (the JVM, Python workers, chart renderer)."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(entry.name)] = int(fields[1])
            cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    tree, grew = {os.getpid()}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(cpu[p] for p in tree - {os.getpid()} if p in cpu)


def mark(label: str) -> None:
    """One line ``kgate report trace: +12.34s py 3.21s children 20.1s [thread] label`` on stderr, when
    tracing: wall since the process started, the driver's own CPU, its child processes' CPU (the JVM)."""
    if not enabled():
        return
    thread = threading.current_thread().name
    where = "" if thread == "MainThread" else f" [{thread}]"
    try:
        kids = f"{_children_cpu():6.2f}s"
    except OSError:  # no /proc
        kids = "?"
    print(
        f"kgate report trace: +{time.monotonic() - _T0:6.2f}s py {time.process_time():6.2f}s "
        f"children {kids}{where} {label}",
        file=sys.stderr,
        flush=True,
    )
