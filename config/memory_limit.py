"""The memory this process may use, read from the machine, for defaults sized to it.

A fixed ``max_held_bytes`` of 512 MiB is right on a large host and an OOM kill in a container
limited to 512 MiB, so the default follows the limit the kernel will enforce: the cgroup's
(v2 ``memory.max``, v1 ``memory.limit_in_bytes``) when one is set, else the machine's RAM.
"""

from __future__ import annotations

import os
from pathlib import Path

MIB = 1024 * 1024
#: the default cap is this fraction of the memory limit: room for the rest of the process
#: (connections, caches, the audit writer) and the allocator's slack
HELD_SHARE = 4
HELD_FLOOR = 64 * MIB  # below this a few large frames would stall every client
HELD_CEILING = 512 * MIB  # the fixed default before 2026-11-26: large hosts keep it

_CGROUP_FILES = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


def _cgroup_limit(files: tuple[Path, ...]) -> int | None:
    for f in files:
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):  # v1 writes a huge number for "no limit"
            return int(text)
        return None  # "max": the cgroup sets no limit
    return None


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_limit(files: tuple[Path, ...] = _CGROUP_FILES) -> int:
    """The smaller of the cgroup's memory limit (if any) and the machine's RAM, in bytes."""
    ram = physical_memory()
    limit = _cgroup_limit(files)
    return min(ram, limit) if limit else ram


def default_max_held_bytes(limit: int | None = None) -> int:
    """A quarter of the memory limit, between 64 MiB and 512 MiB."""
    if limit is None:
        limit = memory_limit()
    return max(HELD_FLOOR, min(HELD_CEILING, limit // HELD_SHARE))
