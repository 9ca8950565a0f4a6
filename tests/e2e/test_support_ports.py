"""tests/support/ports.py: node port ranges never overlap across processes, are given back when
released, and a request waits for a release instead of failing while every block is claimed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support import ports

SUPPORT = Path(__file__).resolve().parents[1] / "support"

#: a child claims every block of a two-block span, says so, and releases one when told
_HOLDER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import ports
    ports._LOCK_DIR, ports._RANGE_LO, ports._RANGE_HI = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    bases = [ports.free_port_range(16), ports.free_port_range(256)]
    print(*bases, flush=True)
    sys.stdin.readline()
    ports.release_range(bases[0])
    print("released", bases[0], flush=True)
    sys.stdin.readline()
    """
)


@pytest.fixture
def two_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """A private lock folder and a span of two free blocks for this process's ``ports``."""
    lo = None
    for base in range(ports._RANGE_LO, ports._RANGE_HI - 2 * ports._BLOCK, ports._BLOCK):
        if all(ports._bindable(p) for p in range(base, base + 2 * ports._BLOCK)):
            lo = base
            break
    assert lo is not None, "no two free blocks to test with"
    monkeypatch.setattr(ports, "_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(ports, "_RANGE_LO", lo)
    monkeypatch.setattr(ports, "_RANGE_HI", lo + 2 * ports._BLOCK)
    monkeypatch.setattr(ports, "_next_range", None)
    monkeypatch.setattr(ports, "_ranges", [])
    monkeypatch.setattr(ports, "_claims", {})
    monkeypatch.setattr(ports, "_given", set())
    return lo, lo + 2 * ports._BLOCK


def test_a_range_claimed_elsewhere_is_waited_for_until_released(two_blocks: tuple[int, int]) -> None:
    lo, hi = two_blocks
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(SUPPORT), ports._LOCK_DIR, str(lo), str(hi)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        small, large = map(int, holder.stdout.readline().split())
        # a 16-port range takes a whole block: the 256-port one is in the other block, no overlap
        assert {small, large} == {lo, lo + ports._BLOCK}
        got: list[int] = []
        waiter = threading.Thread(target=lambda: got.append(ports.free_port_range(256)), daemon=True)
        waiter.start()
        time.sleep(1.0)
        assert got == [], "a block another process claims was handed out"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().split() == ["released", str(small)]
        waiter.join(timeout=30)
        assert got == [small], "the released block was not handed out to the waiting request"
        ports.release_range(small)
    finally:
        holder.kill()
        holder.wait()


def test_a_released_range_can_be_claimed_again(two_blocks: tuple[int, int]) -> None:
    first = ports.free_port_range(256)
    second = ports.free_port_range(256)
    assert first != second
    ports.release_range(first)
    assert ports.free_port_range(16) == first
