"""The default ``max_held_bytes`` follows the memory the process may use (config/memory_limit.py)."""

from __future__ import annotations

from pathlib import Path

from kgate.config.memory_limit import (
    HELD_CEILING,
    HELD_FLOOR,
    MIB,
    default_max_held_bytes,
    memory_limit,
    physical_memory,
)
from kgate.config.model import ProxySettings


def test_the_default_is_a_quarter_of_the_limit_between_the_bounds() -> None:
    assert default_max_held_bytes(1024 * MIB) == 256 * MIB  # a container limited to 1 GiB
    assert default_max_held_bytes(128 * MIB) == HELD_FLOOR  # a tiny container: room for a few frames
    assert default_max_held_bytes(24 * 1024 * MIB) == HELD_CEILING  # a large host keeps 512 MiB


def test_a_cgroup_v2_limit_below_ram_wins(tmp_path: Path) -> None:
    f = tmp_path / "memory.max"
    f.write_text(f"{768 * MIB}\n")
    assert memory_limit((f,)) == min(768 * MIB, physical_memory())


def test_no_cgroup_limit_means_ram(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")
    assert memory_limit((v2,)) == physical_memory()
    v1.write_text(f"{(1 << 63) - 4096}\n")  # cgroup v1's "unlimited"
    assert memory_limit((tmp_path / "absent", v1)) == physical_memory()


def test_proxy_settings_default_comes_from_the_machine() -> None:
    assert ProxySettings().max_held_bytes == default_max_held_bytes()
    assert ProxySettings(max_held_bytes=1234).max_held_bytes == 1234
