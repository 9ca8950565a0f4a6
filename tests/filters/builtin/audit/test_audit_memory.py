"""The audit log keeps freed heap for reuse (audit_memory.py): buffers the size of socket reads,
held and freed in bursts as the writer does, are not faulted in again page by page."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

_CYCLES = """
import resource, sys
from kgate.filters.builtin.audit.memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory(64 << 20)
def burst():
    held = [b"x" * (256 << 10) for _ in range(64)]  # 16 MiB of read-sized buffers, every page written
    del held
burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    burst()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    """Minor page faults of five bursts after a first one, in a fresh interpreter (malloc
    settings are process-wide: the test process itself is left alone)."""
    out = subprocess.run([sys.executable, "-c", _CYCLES, mode], check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the trim and mmap thresholds are glibc's")
def test_freed_buffers_are_reused_without_page_faults() -> None:
    default, kept = _faults("default"), _faults("keep")
    pages = 5 * 16 * (1 << 20) // 4096  # what five bursts touch: 20,480 pages
    assert default > pages // 2  # glibc's defaults give the memory back and fault it in again
    assert kept < pages // 50  # kept: reused in place
