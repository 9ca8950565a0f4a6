"""The template process behind ``support.forkserver``: imports kgate once, then forks one kgate per
request, each running exactly what ``python -m kgate ARGS`` runs.

Protocol (one JSON object per line): the test side writes ``{"argv", "env", "cwd", "log",
"status"}`` to stdin and reads ``{"pid": N}`` back; when a child exits, its exit code (negative:
killed by that signal, as ``subprocess`` says it) is written to the ``status`` file. End of stdin
(the xdist worker exited) ends the template; its children are the tests' to stop.

Single-threaded on purpose: ``fork`` copies only the calling thread, so a template with threads could
hand a child a lock some other thread held. A child leaves the template's loop by returning the
request and then exits through the interpreter's normal shutdown (threads joined, ``atexit``
handlers, streams flushed), as a fresh ``python -m kgate`` does.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import selectors
import signal
import sys
from typing import Any

#: what ``kgate run`` imports before it listens; each child skips their import
PRELOAD = (
    "kgate.__main__",
    "kgate.proxy.runtime.cli",
    "kgate.proxy.runtime.server",
    "kgate.proxy.runtime.workers",
    "kgate.config.loader",
)


def _write_status(path: str, status: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(str(os.waitstatus_to_exitcode(status)))
    os.replace(tmp, path)  # the test side never reads half a status


def serve() -> dict[str, Any] | None:
    """Fork a child per request; in a child, return its request. None: stdin ended (the template exits)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears each exit
    statuses: dict[int, str] = {}
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return None
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    return dict(request)
                statuses[pid] = request["status"]
                os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
        # reap every child that exited (a SIGCHLD may stand for several)
        while statuses:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            path = statuses.pop(pid, None)
            if path is not None:
                _write_status(path, status)


def become_kgate(request: dict[str, Any]) -> None:
    """In a forked child: the session, streams, environment and arguments of
    ``python -m kgate ARGS`` started by ``subprocess.Popen(start_new_session=True)``, then its main."""
    os.setsid()
    os.chdir(request["cwd"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    # unbuffered, as PYTHONUNBUFFERED=1 makes a fresh interpreter's: the tests read the log as it grows
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True, errors="backslashreplace"
    )
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main_module = importlib.import_module("kgate.__main__")
    sys.argv = [str(main_module.__file__), *request["argv"]]
    from kgate.proxy.runtime.cli import main

    sys.exit(main())


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # what ``python -m`` puts first: kgate is imported as a fresh one would be
    for name in PRELOAD:
        importlib.import_module(name)
    got = serve()
    if got is not None:
        become_kgate(got)
