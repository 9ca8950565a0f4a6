"""Keeping freed memory for reuse while the audit log holds frames (glibc's malloc trim threshold).

Why: the audit writer reads the frames kgate already had (no copy), so each event keeps its
request and answer buffers (up to 256 KiB reads) alive until the writer has read them, up to
``POLL_S`` later. The buffers pile up for those milliseconds and are freed in bursts; glibc then
gives the top of the heap back to the OS (its dynamic trim threshold is twice the largest
buffer it recently served with mmap), and the next reads fault it back in, page by page, on the
event loop. With audit on, every rep took minor faults on the event-loop thread (none with audit
off), and those faults cost the loop more CPU than the writer thread spent in all. With the heap
kept (this module) the faults stop once the heap has grown to its working size (the first seconds
of traffic), and the loop's CPU is close to audit off (bench/audit_cost.py; docs/performance.md,
"where the cost was, what was cut").

What it does: ``keep_freed_memory(limit)`` sets glibc's ``M_TRIM_THRESHOLD`` to ``limit`` (up to
that many free bytes at the heap top stay mapped; default: ``max_queue_bytes``, the most the
queue may hold anyway) and ``M_MMAP_THRESHOLD`` to 4 MiB (reads and frames below it come from
the heap, whose freed space is reused, rather than from their own mmap, which is unmapped on
free and faulted in anew). Both are process-wide, set once, only by a process that runs the
audit log; kgate's resident memory may then stay up to ``limit`` above what it uses (never
more than it once used). Other C libraries (musl) have no ``mallopt``: nothing is done there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("kgate.audit")

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20
_done = False


def keep_freed_memory(limit: int) -> bool:
    """Ask glibc to keep up to ``limit`` freed bytes mapped for reuse; False where it cannot."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.debug("audit: no mallopt in this C library; freed memory is left to its defaults")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_TRIM_THRESHOLD, min(limit, 2**31 - 1)) and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    _done = ok
    return ok
