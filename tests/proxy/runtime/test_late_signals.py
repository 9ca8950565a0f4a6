"""A stop signal that arrives after the drain must not change kgate's exit status.

Under ``./dev/run`` a terminal's Ctrl-C reached kgate directly and the script forwarded a SIGTERM
as well; when the second one landed after the drain, the default action (restored with the loop's
handlers) killed the exiting process: exit status 143 instead of 0. The child below runs the
CLI's ``serve`` (signal handlers installed: no ``stop`` event), stops it with a SIGTERM, then
sends itself SIGTERM, SIGINT and SIGHUP, as late as they can come, before it exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal
    from support.inproc_kgate import make_config
    from kgate.proxy.runtime.server import serve

    async def main() -> None:
        config = make_config("127.0.0.1:1")  # nothing listens: the proxy starts and serves anyway
        ready = asyncio.Event()
        task = asyncio.ensure_future(serve(config, ready=ready))
        await ready.wait()
        os.kill(os.getpid(), signal.SIGTERM)  # the stop: drain, then serve returns
        await task
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # late, after the drain
            os.kill(os.getpid(), sig)
        await asyncio.sleep(0.2)  # a signal's default action would have ended the process by now
        print("exited cleanly")

    asyncio.run(main())
    """
)


@pytest.mark.timeout(60)
def test_a_stop_signal_after_the_drain_is_ignored(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=50
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    assert done.stdout.strip().endswith("exited cleanly"), done.stdout
