"""Free TCP ports on 127.0.0.1 that do not collide with each other.

Single ports come from the kernel (bind to port 0: ephemeral range). Node port
ranges (kgate's ``node_ports``: base .. base+count-1) are taken *below* the
ephemeral range so that no outgoing connection's local port can land in them;
every port of a range is checked bindable and each range is handed out once per
test process. A range is also claimed machine-wide with a file lock held until it is
released (``release_range``, when the kgate that had it is gone) or the process ends:
parallel pytest workers (xdist) and other test runs on the machine never hand out the
same range at once (a bind check alone races between them: kgate binds node ports
lazily, so a live kgate's range can look free). When every range is claimed, a request
waits for one to be released rather than failing at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import threading
import time

HOST = "127.0.0.1"
_lock = threading.Lock()
_given: set[int] = set()
_ranges: list[tuple[int, int]] = []  # ranges handed out, oldest first
#: ranges start on a block boundary and take one block whatever their count (16 or 256 ports): the
#: machine-wide claim is per block, so a 16-port range can never overlap another process's 256
_BLOCK = 256
# Blocks are carved out of [_RANGE_LO, _RANGE_HI), below the ephemeral range (32768+); the first
# probed depends on the pid so that two test runs on the machine are unlikely to probe alike.
_RANGE_LO, _RANGE_HI = 11264, 32768
_next_range = None
#: at most this many ranges claimed per process (then its oldest free one is reused): 84 blocks fit
#: the span, shared by every worker of every test run on the machine (six runs of three workers
#: each); kgate_factory releases each range when its kgate is gone, so a worker holds a few at a time
_MAX_CLAIMED = 20
#: how long a request waits for another process to release a range before it fails
_WAIT_S = 120.0
_LOCK_DIR = os.path.join(tempfile.gettempdir(), "kgate-test-ports")
_claims: dict[int, int] = {}  # block base -> the fd whose lock claims it (kept open: the claim)


def _claim(base: int) -> bool:
    """Lock the block at ``base`` for this process (non-blocking); False if another process holds it."""
    os.makedirs(_LOCK_DIR, exist_ok=True)
    fd = os.open(os.path.join(_LOCK_DIR, f"block-{base}.lock"), os.O_CREAT | os.O_RDWR, 0o666)
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
    """Base of ``count`` (at most 256) consecutive free ports below the ephemeral range, claimed
    machine-wide until ``release_range`` (or this process's end). Waits up to ``_WAIT_S`` while
    every block is claimed (parallel test runs release theirs as their tests end)."""
    if not 0 < count <= _BLOCK:
        raise ValueError(f"a port range is 1..{_BLOCK} ports, not {count}")
    deadline = time.monotonic() + _WAIT_S
    while True:
        base = _try_range(count)
        if base is not None:
            return base
        if time.monotonic() > deadline:
            raise RuntimeError(f"no free port range of {count} within {_WAIT_S:.0f}s (claims in {_LOCK_DIR})")
        time.sleep(0.5)


def _try_range(count: int) -> int | None:
    global _next_range
    blocks = (_RANGE_HI - _RANGE_LO) // _BLOCK
    with _lock:
        if len(_ranges) >= _MAX_CLAIMED:
            reused = _reuse(count)
            if reused is not None:
                return reused
        if _next_range is None:
            _next_range = _RANGE_LO + (os.getpid() % blocks) * _BLOCK
        for _ in range(blocks):
            base = _next_range
            _next_range += _BLOCK
            if _next_range + _BLOCK > _RANGE_HI:
                _next_range = _RANGE_LO
            if base in _claims:
                continue
            if all(_bindable(p) for p in range(base, base + count)) and _claim(base):
                _given.update(range(base, base + count))
                _ranges.append((base, count))
                return base
        return _reuse(count)


def release_range(base: int) -> None:
    """Give back a range from ``free_port_range`` once nothing uses it (the kgate that had it has
    exited and will not restart): other processes may claim it again. Unknown bases are ignored."""
    with _lock:
        for i, (start, count) in enumerate(_ranges):
            if start == base:
                del _ranges[i]
                _given.difference_update(range(start, start + count))
                break
        fd = _claims.pop(base, None)
        if fd is not None:
            os.close(fd)  # closing the descriptor drops its flock


def _reuse(count: int) -> int | None:
    """The oldest range this process still claims whose ports are all free again (at the cap only:
    a kgate binds its node ports lazily, so a bind check cannot tell a live one's range is in use)."""
    for i, (base, n) in enumerate(_ranges):
        if n >= count and all(_bindable(p) for p in range(base, base + count)):
            _ranges.append(_ranges.pop(i))
            return base
    return None


def port_open(port: int, host: str = HOST, timeout: float = 0.2) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False
