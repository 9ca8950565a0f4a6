"""raise_open_files_limit in a child process (it changes the process's own limit)."""

from __future__ import annotations

import subprocess
import sys

from support.procs import REPO


def test_soft_limit_is_raised_to_the_hard_limit() -> None:
    code = (
        "import resource, logging; logging.basicConfig(level=logging.INFO)\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from kgate.proxy.carrier.fd_limit import raise_open_files_limit\n"
        "got = raise_open_files_limit()\n"
        "now = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "assert now[0] == (hard if hard != resource.RLIM_INFINITY else 1 << 20), (now, hard)\n"
        "assert got == now, (got, now)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert "soft 256 raised to" in res.stderr
