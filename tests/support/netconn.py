"""TCP connections of a process, read from /proc (no psutil).

``/proc/<pid>/net/tcp`` lists every socket of the network namespace; the ones that
belong to the process are those whose inode appears as ``socket:[inode]`` among
``/proc/<pid>/fd/*`` (threads share the fd table, so librdkafka's sockets count).
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


@dataclass(frozen=True)
class Conn:
    local: tuple[str, int]
    remote: tuple[str, int]
    state: str
    inode: int


def _addr4(hexaddr: str) -> tuple[str, int]:
    ip, port = hexaddr.split(":")
    return socket.inet_ntoa(struct.pack("<I", int(ip, 16))), int(port, 16)


def _addr6(hexaddr: str) -> tuple[str, int]:
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    if raw[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntoa(raw[12:]), int(port, 16)
    return socket.inet_ntop(socket.AF_INET6, raw), int(port, 16)


def socket_inodes(pid: int) -> set[int]:
    out: set[int] = set()
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for fd in names:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def all_tcp(pid: int | str = "self", inodes: set[int] | None = None) -> list[Conn]:
    """The namespace's TCP sockets (``inodes``: only those), as ``/proc/<pid>/net`` lists them."""
    conns = []
    for name, conv in (("tcp", _addr4), ("tcp6", _addr6)):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            inode = int(parts[9])
            if inodes is None or inode in inodes:  # the others' addresses are never decoded
                conns.append(Conn(conv(parts[1]), conv(parts[2]), _STATES.get(parts[3], parts[3]), inode))
    return conns


def tcp_connections(pid: int | None = None) -> list[Conn]:
    """Non-listening TCP sockets owned by ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    mine = socket_inodes(pid)
    if not mine:
        return []
    return [c for c in all_tcp(pid, mine) if c.state != "LISTEN"]


# -- the watchers' samples: the kernel's socket dump (sock_diag), not /proc/net/tcp's text ----------
# /proc/net/tcp is the namespace's every socket formatted as text, TIME_WAIT ones included: with the
# ~2,000 a test run leaves around, one read cost ~5 ms of kernel time and its parse ~3 ms, and a
# watcher samples every 20-50 ms (docs/performance.md, issue 29). A NETLINK_SOCK_DIAG dump asks only
# for the connecting and established sockets and gets them in binary.
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY = 4, 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
#: TCP_ESTABLISHED (1), TCP_SYN_SENT (2), TCP_SYN_RECV (3): the states the watchers count
_LIVE_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV"}
_LIVE_MASK = sum(1 << state for state in _LIVE_STATES)
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # inet_diag_msg: 72 bytes
_V4_MAPPED = b"\0" * 10 + b"\xff\xff"


def _diag_addr(family: int, raw: bytes, port: bytes) -> tuple[str, int]:
    number = int.from_bytes(port, "big")
    if family == socket.AF_INET:
        return socket.inet_ntoa(raw[:4]), number
    if raw[:12] == _V4_MAPPED:
        return socket.inet_ntoa(raw[12:]), number
    return socket.inet_ntop(socket.AF_INET6, raw), number


def _diag_dump(family: int) -> list[Conn]:
    """The namespace's TCP sockets of ``family`` in the live states, from the kernel (sock_diag)."""
    req = struct.pack("=BBBBI48s", family, socket.IPPROTO_TCP, 0, 0, _LIVE_MASK, b"")
    header = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
    out: list[Conn] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.sendto(header + req, (0, 0))
        while True:
            data = nl.recv(1 << 16)
            at = 0
            while at + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, at)
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    (errno,) = struct.unpack_from("=i", data, at + 16)
                    raise OSError(-errno, os.strerror(-errno))
                fam, state, _t, _r, sport, dport, src, dst, _if, _cookie, _e, _rq, _wq, _uid, inode = (
                    _DIAG_MSG.unpack_from(data, at + 16)
                )
                if state in _LIVE_STATES:
                    out.append(
                        Conn(_diag_addr(fam, src, sport), _diag_addr(fam, dst, dport), _LIVE_STATES[state], inode)
                    )
                at += (length + 3) & ~3
            if not data:
                return out


def live_connections(pid: int | None = None) -> list[Conn]:
    """``pid``'s TCP sockets that are connecting or established (what the watchers count): from the
    kernel's socket dump where it answers, else from /proc/net/tcp (:func:`tcp_connections`). The
    dump is this process's network namespace: the tests' processes share it."""
    pid = os.getpid() if pid is None else pid
    mine = socket_inodes(pid)
    if not mine:
        return []
    try:
        everything = _diag_dump(socket.AF_INET) + _diag_dump(socket.AF_INET6)
    except OSError:
        return [c for c in all_tcp(pid, mine) if c.state in ("ESTABLISHED", "SYN_SENT", "SYN_RECV")]
    return [c for c in everything if c.inode in mine]


def remote_ports(pid: int | None = None) -> set[int]:
    return {c.remote[1] for c in tcp_connections(pid) if c.state in ("ESTABLISHED", "SYN_SENT")}


def owner_pid_of(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """PID owning the socket with this (local, remote) address pair, or None."""
    inode = None
    for c in all_tcp():
        if c.local == local and c.remote == remote:
            inode = c.inode
            break
    if not inode:
        return None
    needle = f"socket:[{inode}]"
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = f"/proc/{name}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(os.path.join(fd_dir, fd)) == needle:
                        return int(name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


class ConnectionWatcher:
    """Samples this process's TCP connections in a thread while a workload runs.

    ``seen`` collects every remote port an established/connecting socket had; connections to a
    ``forbidden`` port are recorded. This is sampling (every ~20 ms plus one sample per sample's
    cost of ~10 ms): it reliably sees the long-lived connections of consumers and producers, but
    can miss one that lives only a few milliseconds. The deterministic check is the relay's
    ``--forbid-pid`` gatekeeper (tests/e2e/test_no_bypass.py, test_multinode.py), which sees
    every accepted connection.
    """

    def __init__(self, forbidden_ports, interval: float = 0.02, pid: int | None = None, ignore=()):
        self.forbidden = set(forbidden_ports)
        #: (local, remote) of sockets that were open before the workload: another test's client
        #: in this process (Kafka tests share one broker per run) is not the workload's bypass
        self.ignore = set(ignore)
        self.interval = interval
        self.pid = os.getpid() if pid is None else pid
        self.seen: set[int] = set()
        self.violations: list[Conn] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conn-watcher", daemon=True)

    def _sample(self):
        for c in live_connections(self.pid):
            if c.state in ("ESTABLISHED", "SYN_SENT", "SYN_RECV"):
                self.seen.add(c.remote[1])
                if c.remote[1] in self.forbidden and (c.local, c.remote) not in self.ignore:
                    self.violations.append(c)
        self.samples += 1

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        return False

    def assert_clean(self, must_use=()):
        assert not self.violations, (
            f"client sockets connected directly to {sorted(self.forbidden)}: {self.violations[:5]}"
        )
        missing = set(must_use) - self.seen
        assert not missing, f"expected client connections to {sorted(missing)}; saw only {sorted(self.seen)}"


class ProcessWatcher:
    """Samples another process's TCP connections from a small sampler process of its own.

    For a child the test waits on (a Java client's JVM): the sampler is scheduled by the kernel like
    any process, so nothing in the test process (the GIL held by a C extension, a busy thread an
    earlier test left behind) can starve it. A thread sampler (``ConnectionWatcher``) once took no
    sample at all during 4-9 s JVM runs in a full parallel run. Start it before the process to
    watch (``watch(pid)`` right after spawning); ``with`` closes it, after which ``seen``,
    ``violations``, ``samples`` and ``max_gap_s`` (the longest time between two samples while the
    process ran) hold what it saw.
    """

    def __init__(self, forbidden_ports: Iterable[int], interval: float = 0.02) -> None:
        self.forbidden = set(forbidden_ports)
        self.seen: set[int] = set()
        self.violations: list[Conn] = []
        self.samples = 0
        self.max_gap_s = 0.0
        argv = [sys.executable, os.path.abspath(__file__), str(interval), *map(str, sorted(self.forbidden))]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def watch(self, pid: int) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{pid}\n")
        self._proc.stdin.flush()

    def __enter__(self) -> ProcessWatcher:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        out, _ = self._proc.communicate(timeout=60)  # closes stdin: the sampler's cue to finish
        if self._proc.returncode == 0 and out.strip():
            found = json.loads(out)
            self.seen = set(found["seen"])
            self.violations = [Conn(tuple(c[0]), tuple(c[1]), c[2], c[3]) for c in found["violations"]]
            self.samples = found["samples"]
            self.max_gap_s = found["max_gap_s"]
        elif exc == (None, None, None):
            raise AssertionError(f"the connection sampler failed (exit {self._proc.returncode}): {out[-2000:]}")
        return False


def _sampler_main(argv: list[str]) -> None:
    """``ProcessWatcher``'s sampler: read a pid from stdin, sample its sockets until stdin closes."""
    interval = float(argv[0])
    forbidden = {int(p) for p in argv[1:]}
    line = sys.stdin.readline()
    seen: set[int] = set()
    violations: list[Conn] = []
    samples, max_gap, last = 0, 0.0, None
    pid = int(line) if line.strip() else None
    while pid is not None:
        for c in live_connections(pid):
            if c.state in ("ESTABLISHED", "SYN_SENT", "SYN_RECV"):
                seen.add(c.remote[1])
                if c.remote[1] in forbidden:
                    violations.append(c)
        now = time.monotonic()
        if last is not None:
            max_gap = max(max_gap, now - last)
        samples, last = samples + 1, now
        ready, _, _ = select.select([sys.stdin], [], [], interval)
        if ready and not sys.stdin.readline():
            break  # EOF: the watched process has exited and the test is done
    json.dump(
        {
            "seen": sorted(seen),
            "violations": [[list(c.local), list(c.remote), c.state, c.inode] for c in violations[:50]],
            "samples": samples,
            "max_gap_s": round(max_gap, 3),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    _sampler_main(sys.argv[1:])
