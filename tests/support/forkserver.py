"""kgate processes forked from a template that has already imported kgate (``kgate_forkserver.py``).

About 190 kgate processes start in a suite run, and each fresh ``python -m kgate run`` paid the
interpreter's start and kgate's imports before it did anything a test looks at. One template per
xdist worker pays them once; each kgate is a fork of it in its own session, with the test's
environment, working directory and log, running kgate's own ``main``: signals, exit codes, logs and
drains are those of a real process. ``KGATE_TEST_FORKSERVER=0`` starts fresh interpreters instead,
and so does ``KGATE_E2E_SRC`` (kgate from another source tree, which the template did not import).

:class:`Forked` answers what the tests ask of a ``subprocess.Popen`` (``pid``, ``poll``, ``wait``,
``returncode``, ``send_signal``); its exit code comes from the template, which reaps it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = "KGATE_TEST_FORKSERVER"


def wanted() -> bool:
    return os.environ.get(ENV, "1") != "0" and not os.environ.get("KGATE_E2E_SRC")


class Forked:
    """A kgate forked by the template: the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, pid: int, status_path: str, argv: list[str]) -> None:
        self.pid = pid
        self.args = argv
        self.returncode: int | None = None
        self._status = status_path
        try:  # a handle that becomes readable when the process ends: waits without polling
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                with open(self._status, encoding="ascii") as f:
                    self.returncode = int(f.read())
            except (FileNotFoundError, ValueError):
                return None
            self._close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            if self._pidfd is not None and select.select([self._pidfd], [], [], left if left is not None else 1.0)[0]:
                time.sleep(0.002)  # ended: the template writes its status as it reaps it
            elif self._pidfd is None:
                time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class _Template:
    """One template process per test process, started on first use."""

    def __init__(self, python: str, cwd: str) -> None:
        self.proc = subprocess.Popen(
            [python, str(HERE / "kgate_forkserver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
        )
        self.lock = threading.Lock()
        self.statuses = tempfile.mkdtemp(prefix="kgate-forked-")
        self.n = 0

    def fork(self, argv: list[str], env: dict[str, str], cwd: str, log: Path) -> Forked:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        with self.lock:
            self.n += 1
            status = os.path.join(self.statuses, f"{self.n}.status")
            request = {"argv": argv, "env": env, "cwd": cwd, "log": str(log), "status": status}
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the kgate template exited ({self.proc.poll()})")
        return Forked(int(json.loads(line)["pid"]), status, argv)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


_template: _Template | None = None
_template_lock = threading.Lock()


def fork_kgate(python: str, args: list[str], env: dict[str, str], cwd: str, log: Path) -> Forked:
    """``python -m kgate ARGS`` as a fork of this process's template (started on first use)."""
    global _template
    with _template_lock:
        if _template is None or _template.proc.poll() is not None:
            _template = _Template(python, cwd)
            atexit.register(_template.close)
        template = _template
    return template.fork(args, env, cwd, log)
