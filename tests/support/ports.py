"""Free TCP ports on 127.0.0.1 that do not collide with each other.

Single ports come from the kernel (bind to port 0: ephemeral range). Node port
ranges (kgate's ``node_ports``: base .. base+count-1) are taken *below* the
ephemeral range so that no outgoing connection's local port can land in them;
every port of a range is checked bindable and each range is handed out once per
test process. A range is also claimed machine-wide with a file lock held while the
process lives: parallel pytest workers (xdist) and other test runs on the machine
never hand out the same range at once (a bind check alone races between them).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import threading

HOST = "127.0.0.1"
_lock = threading.Lock()
_given: set[int] = set()
_ranges: list[tuple[int, int]] = []  # ranges handed out, oldest first
# Ranges are carved out of [_RANGE_LO, _RANGE_HI); the start depends on the pid so that
# two test runs on the same machine are unlikely to probe the same ranges first.
_RANGE_LO, _RANGE_HI = 12000, 32000
_next_range = None
#: at most this many ranges claimed per process (then its oldest free one is reused): 78 ranges of
#: 256 fit the span, shared by every worker of every test run on the machine
_MAX_CLAIMED = 20
_LOCK_DIR = os.path.join(tempfile.gettempdir(), "kgate-test-ports")
_claims: dict[int, int] = {}  # range base -> the fd whose lock claims it (kept open: the claim)


def _claim(base: int, count: int) -> bool:
    """Lock ``base``'s range for this process (non-blocking); False if another process holds it."""
    os.makedirs(_LOCK_DIR, exist_ok=True)
    fd = os.open(os.path.join(_LOCK_DIR, f"{base}-{count}.lock"), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _claims[base] = fd
    return True


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port the kernel says is free now (not one handed out before in this process)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        with _lock:
            if port not in _given:
                _given.add(port)
                return port
    raise RuntimeError("no free port")


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


def free_port_range(count: int = 256) -> int:
    """Base of ``count`` consecutive free ports below the ephemeral range."""
    global _next_range
    with _lock:
        if len(_ranges) >= _MAX_CLAIMED:
            reused = _reuse(count)
            if reused is not None:
                return reused
        if _next_range is None:
            span = (_RANGE_HI - _RANGE_LO) // count
            _next_range = _RANGE_LO + (os.getpid() % span) * count
        for _ in range((_RANGE_HI - _RANGE_LO) // count + 1):
            base = _next_range
            _next_range += count
            if _next_range + count > _RANGE_HI:
                _next_range = _RANGE_LO
            ports = range(base, base + count)
            if any(p in _given for p in ports):
                continue
            if all(_bindable(p) for p in ports) and _claim(base, count):
                _given.update(ports)
                _ranges.append((base, count))
                return base
        reused = _reuse(count)
        if reused is not None:
            return reused
    raise RuntimeError(f"no free port range of {count}")


def _reuse(count: int) -> int | None:
    """The oldest range this process has whose ports are all free again (the test that had it is
    over; a live kgate has at least its node ports bound, so is never reused)."""
    for i, (base, n) in enumerate(_ranges):
        if n == count and all(_bindable(p) for p in range(base, base + count)):
            _ranges.append(_ranges.pop(i))
            return base
    return None


def port_open(port: int, host: str = HOST, timeout: float = 0.2) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False
