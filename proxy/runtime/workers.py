"""``kgate run --workers N``: N proxy processes sharing the listeners, under one supervising parent.

Why processes: one kgate process is one event loop on one core; the data path is Python, so a
busy instance is CPU bound on that core long before the network is. N workers each run the
whole proxy (their own loop, own upstream connections, own topic-id cache; docs/topic-ids.md
says why separate caches are safe) and bind every listener with SO_REUSEPORT, so the kernel
spreads new client connections over them. A connection stays on the worker that accepted it.

The parent serves no Kafka traffic. It:

- starts the workers (``python -m kgate`` with the same arguments and ``KGATE_WORKER=i``), each
  with a private admin listener on loopback (an ephemeral port it reports back in a file);
- restarts a worker that dies (a crash, ``kill -9``) with exponential backoff (0.5 s doubling to
  30 s; reset once a worker has run 60 s), and gives up at once if a worker fails before it ever
  started (a bad port, a config error: restarting would fail the same way);
- forwards SIGTERM/SIGINT (every worker drains; a second one cuts the drain short, as in one
  process) and SIGHUP (each worker re-reads the config and reloads: proxy/runtime/reload.py), and exits
  when all workers have, 0 if every one exited 0;
- serves the admin listener: ``/livez`` (the parent), ``/readyz`` (ready when every worker is
  running and reports ready; the body has each worker's own lines), ``/metrics``, and
  ``POST /reload`` (every worker reloads; the answer has each one's outcome).

Metrics are **per worker, with a ``worker`` label**: the parent fetches each worker's
``/metrics`` at scrape time and re-labels its samples, and adds its own
``kgate_workers``/``kgate_worker_restarts_total``. Not summed in the parent, because a
restarted worker's counters start from zero: a summed counter would drop (a false reset for
``rate()``), while per-worker series reset alone, which Prometheus handles. Dashboards sum
with ``sum without (worker)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

import kgate
from kgate.config import HostPort, KgateConfig
from kgate.proxy.control.admin import AdminServer
from kgate.proxy.runtime.config_view import config_json
from kgate.proxy.runtime.worker_env import WORKER_ENV

log = logging.getLogger("kgate.workers")

ADMIN_FILE_ENV = "KGATE_WORKER_ADMIN_FILE"  # where a worker writes its private admin port
PARENT_ENV = "KGATE_PARENT_PID"  # a worker exits when its parent is gone
BACKOFF_S = (0.5, 1, 2, 4, 8, 16, 30)
STABLE_S = 60.0  # a worker that ran this long starts its backoff from the beginning again
POLL_S = 0.5  # how often the parent asks workers' /readyz
RELOAD_TIMEOUT_S = 30.0  # a worker's reload answers once applied (an added cluster's first probe included)


def _kgate_home() -> str | None:
    """The checkout this process's kgate comes from, which its workers import too (None when kgate
    is installed: site-packages is on their path already, and ahead of the standard library it
    could shadow it)."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(kgate.__file__)))
    return None if os.path.basename(home) in ("site-packages", "dist-packages") else home


def worker_config(config: KgateConfig) -> KgateConfig:
    """A worker's config: its admin listener private, on loopback, on a port the OS chooses."""
    admin = dataclasses.replace(config.admin, listen=HostPort("127.0.0.1", 0), from_metrics_listen=False)
    return dataclasses.replace(config, admin=admin)


def report_admin_port(port: int) -> None:
    """Tell the parent where this worker's admin listener is (written whole, then renamed)."""
    path = os.environ.get(ADMIN_FILE_ENV)
    if not path:
        return
    tmp = f"{path}.tmp"
    Path(tmp).write_text(str(port))
    os.replace(tmp, path)


async def watch_parent(stop: asyncio.Event) -> None:
    """A worker whose parent died (``kill -9`` of the parent) stops, rather than run unsupervised."""
    parent = int(os.environ.get(PARENT_ENV, "0"))
    if not parent:
        return
    while os.getppid() == parent:  # noqa: ASYNC110 - no event tells a process its parent died
        await asyncio.sleep(1)
    log.warning("the supervising parent (pid %d) is gone: stopping", parent)
    stop.set()


async def http_get(
    port: int, path: str, timeout_s: float = 2.0, accept: str = "", method: str = "GET"
) -> tuple[int, bytes]:
    """One request (GET unless told) to a worker's private admin listener: (status, body)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout_s)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        if accept:
            head += f"Accept: {accept}\r\n"
        writer.write((head + "\r\n").encode("latin-1"))
        data = await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    _headers, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), body


@dataclasses.dataclass(frozen=True)
class WorkersReload:
    """What ``POST /reload`` on the parent answers: every worker's outcome in one message."""

    ok: bool
    message: str


class Worker:
    """One worker slot: the process now in it, and its restart history."""

    def __init__(self, index: int, admin_file: Path) -> None:
        self.index = index
        self.admin_file = admin_file
        self.proc: asyncio.subprocess.Process | None = None
        self.admin_port: int | None = None
        self.started_at = 0.0
        self.ever_started = False  # reported its admin port once: a later death is a crash, not a bad start
        self.failures = 0  # consecutive short-lived runs (backoff index)
        self.restarts = 0
        self.ready = False
        self.ready_lines: list[str] = []
        self.clean_exit = False  # stopped by the parent and exited cleanly


class Supervisor:
    """The parent of ``--workers N``."""

    def __init__(self, config: KgateConfig, argv: Sequence[str], count: int) -> None:
        self.config = config
        self.argv = list(argv)
        self.count = count
        self.stopping = False
        self.stop_signals = 0
        self.failed_start: int | None = None  # exit status of a worker that could not start
        self._dir = Path(tempfile.mkdtemp(prefix="kgate-workers-"))
        self.workers = [Worker(i, self._dir / f"worker-{i}.port") for i in range(count)]
        self.admin = (
            AdminServer(config.admin.listen, self, self.metrics, reload=self.reload, config=self.config_json)
            if config.admin.listen is not None
            else None
        )
        self._stopped = asyncio.Event()
        self._exiting = False  # every worker is gone: the parent is on its way out

    # -- what the admin listener asks -----------------------------------------------------------
    def report(self) -> tuple[bool, list[str]]:
        lines: list[str] = []
        ready = not self.stopping
        if self.stopping:
            lines.append("draining: kgate is shutting down and accepts no new connections")
        for w in self.workers:
            running = w.proc is not None and w.proc.returncode is None and w.admin_port is not None
            if not running:
                ready = False
                lines.append(f"worker {w.index}: not running")
                continue
            ready = ready and w.ready
            state = "ready" if w.ready else "not ready"
            lines.append(f"worker {w.index}: pid {w.proc.pid if w.proc else '?'}, {state}")
            lines.extend(f"  {line}" for line in w.ready_lines)
        return ready, lines

    async def metrics(self, accept: str) -> tuple[str, bytes]:
        families: dict[str, Metric] = {}
        for w in self.workers:
            if w.admin_port is None:
                continue
            try:
                status, body = await http_get(w.admin_port, "/metrics")
            except (OSError, TimeoutError, ValueError, IndexError):
                continue  # a worker restarting: its series are absent from this scrape
            if status != 200:
                continue
            for fam in text_string_to_metric_families(body.decode("utf-8", "replace")):
                merged = families.get(fam.name)
                if merged is None:
                    merged = families[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                for s in fam.samples:
                    labels = {**s.labels, "worker": str(w.index)}
                    merged.samples.append(Sample(s.name, labels, s.value, s.timestamp, s.exemplar))
        own = Metric("kgate_workers", "Worker processes by state (running: has a process)", "gauge")
        running = sum(1 for w in self.workers if w.proc is not None and w.proc.returncode is None)
        own.add_sample("kgate_workers", {"state": "running"}, running)
        own.add_sample("kgate_workers", {"state": "configured"}, self.count)
        restarts = Metric("kgate_worker_restarts", "Workers the parent started again after they died", "counter")
        for w in self.workers:
            restarts.add_sample("kgate_worker_restarts_total", {"worker": str(w.index)}, w.restarts)
        families[own.name] = own
        families[restarts.name] = restarts
        encoder, content_type = choose_encoder(accept)

        class _Registry:
            def collect(self) -> list[Metric]:
                return list(families.values())

        return content_type, encoder(_Registry())

    # -- processes --------------------------------------------------------------------------------
    async def _spawn(self, w: Worker) -> None:
        with contextlib.suppress(FileNotFoundError):
            w.admin_file.unlink()
        w.admin_port = None
        w.ready = False
        env = dict(os.environ)
        env.update({WORKER_ENV: str(w.index), ADMIN_FILE_ENV: str(w.admin_file), PARENT_ENV: str(os.getpid())})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_kgate_home(), env.get("PYTHONPATH")) if p)
        # Same process group as the parent (a supervisor or a benchmark that stops the group stops
        # the workers too). A terminal's Ctrl-C reaches every process of the group: workers ignore
        # SIGINT (proxy/runtime/server.py) and wait for the SIGTERM the parent forwards, since a worker that
        # took both as stop signals would read the second as "cut the drain short".
        # -P: not the working directory first on sys.path, where a folder named kgate (the parent of a
        # checkout) would be imported as a namespace package; PYTHONPATH above: this very kgate
        w.proc = await asyncio.create_subprocess_exec(sys.executable, "-P", "-m", "kgate", *self.argv, env=env)
        w.started_at = time.monotonic()
        log.info("worker %d started (pid %d)", w.index, w.proc.pid, extra={"worker": w.index, "pid": w.proc.pid})

    async def _supervise(self, w: Worker) -> None:
        """Keep slot ``w`` filled until stopping; restart a dead worker with backoff."""
        while True:
            assert w.proc is not None
            rc = await w.proc.wait()
            was_running = w.admin_port is not None
            w.admin_port = None
            w.ready = False
            if self.stopping:
                # SIGTERM's default action ended a worker still starting: it had nothing to drain
                w.clean_exit = rc == 0 or (rc == -signal.SIGTERM and not was_running)
                log.info("worker %d exited with %s", w.index, rc, extra={"worker": w.index, "exit": rc})
                return
            if w.admin_file.exists():
                w.ever_started = True  # it did start, and died before the poller read its port
            if not w.ever_started:
                log.error(
                    "worker %d could not start (exit %s): stopping every worker",
                    w.index,
                    rc,
                    extra={"worker": w.index, "exit": rc},
                )
                self.failed_start = rc if rc and rc > 0 else 1
                self.stop()
                return
            ran = time.monotonic() - w.started_at
            w.failures = 1 if ran >= STABLE_S else w.failures + 1
            delay = BACKOFF_S[min(w.failures - 1, len(BACKOFF_S) - 1)]
            what = f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"
            log.error(
                "worker %d (pid %d) died (%s) after %.1fs: restarting in %gs",
                w.index,
                w.proc.pid,
                what,
                ran,
                delay,
                extra={"worker": w.index, "exit": rc, "restart_in_s": delay},
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), delay)
            if self.stopping:
                # died before the stop, not during the drain: its loss was logged and counted then;
                # the exit status is about the drain
                w.clean_exit = True
                return
            w.restarts += 1
            await self._spawn(w)

    async def _poll(self) -> None:
        """Learn each worker's admin port, then keep its /readyz answer fresh (report() reads it)."""
        while not self._exiting:
            for w in self.workers:
                if w.proc is None or w.proc.returncode is not None:
                    continue
                if w.admin_port is None:
                    try:
                        w.admin_port = int(w.admin_file.read_text())
                        w.ever_started = True
                    except (FileNotFoundError, ValueError):
                        continue
                try:
                    status, body = await http_get(w.admin_port, "/readyz")
                except (OSError, TimeoutError, ValueError, IndexError):
                    w.ready, w.ready_lines = False, ["admin listener not answering"]
                    continue
                w.ready = status == 200
                w.ready_lines = body.decode("utf-8", "replace").splitlines()[1:]
            await asyncio.sleep(POLL_S if all(w.admin_port for w in self.workers) else 0.05)

    def _signal_all(self, sig: int) -> None:
        for w in self.workers:
            if w.proc is not None and w.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.send_signal(sig)

    def stop(self) -> None:
        """First SIGTERM/SIGINT: every worker drains. A second: forwarded too (they cut the drain short)."""
        self.stop_signals += 1
        if not self.stopping:
            self.stopping = True
            self._stopped.set()
            log.info("stopping: draining %d worker(s)", self.count)
        self._signal_all(signal.SIGTERM)

    def hup(self) -> None:
        log.info("SIGHUP: forwarded to the workers (each re-reads the config and reloads on its own)")
        self._signal_all(signal.SIGHUP)

    async def config_json(self) -> bytes:
        """``GET /config`` on the parent: what a running worker runs (they reload; the parent keeps its
        start-up config), else the parent's own."""
        for w in self.workers:
            if w.proc is not None and w.proc.returncode is None and w.admin_port is not None:
                try:
                    status, body = await http_get(w.admin_port, "/config", timeout_s=RELOAD_TIMEOUT_S)
                except (OSError, TimeoutError, ValueError, IndexError):
                    continue
                if status == 200:
                    return body
        return config_json(self.config)

    async def reload(self) -> WorkersReload:
        """``POST /reload`` on the parent: every running worker reloads (through its private admin
        listener, so the answer says how each one fared); ok only if every worker's reload was.

        The parent itself keeps the config it started with: it serves no clients, and what it uses
        of the config (the admin listener, the ports it checks at start) changes only at restart.
        """
        lines: list[str] = []
        ok = True
        for w in self.workers:
            running = w.proc is not None and w.proc.returncode is None and w.admin_port is not None
            if not running or w.admin_port is None:
                ok = False
                lines.append(f"worker {w.index}: not running (it reads the config when it starts)")
                continue
            try:
                status, body = await http_get(w.admin_port, "/reload", timeout_s=RELOAD_TIMEOUT_S, method="POST")
                message = str(json.loads(body).get("message", ""))
            except (OSError, TimeoutError, ValueError, IndexError) as exc:
                status, message = 0, f"no answer ({exc!r})"
            ok = ok and status == 200
            lines.append(f"worker {w.index}: {'ok' if status == 200 else 'failed'}: {message}")
        return WorkersReload(ok, "; ".join(lines))

    def _check_ports_free(self) -> None:
        """Bind each bootstrap port once without SO_REUSEPORT, and let go.

        Workers share ports with SO_REUSEPORT, which would also let them share with another kgate
        ``--workers`` already running on this host (same user): two fleets silently splitting each
        other's clients. A plain bind fails if anyone holds the port, so the mistake stops here.
        """
        from kgate.proxy.runtime.cluster import _bind

        for vc in self.config.virtual_clusters:
            try:
                _bind(vc.listen.host, vc.listen.port).close()
            except OSError as exc:
                raise OSError(exc.errno, f"cluster {vc.name}: cannot listen on {vc.listen}: {exc.strerror}") from exc

    async def run(self) -> int:
        self._check_ports_free()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGHUP, self.hup)
        if self.admin is not None:
            await self.admin.start()
        for w in self.workers:
            await self._spawn(w)
        poller = loop.create_task(self._poll())
        try:
            await asyncio.gather(*(self._supervise(w) for w in self.workers))
        finally:
            # Bounded: on 3.11 a cancel that lands as an inner wait_for completes can be lost, and
            # a parent whose workers are all gone must exit whatever its poller does.
            self._exiting = True
            poller.cancel()
            await asyncio.wait({poller}, timeout=2)
            if self.admin is not None:
                await asyncio.wait({loop.create_task(self.admin.close())}, timeout=2)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            for f in self._dir.iterdir():
                f.unlink()
            self._dir.rmdir()
        if self.failed_start is not None:
            return self.failed_start
        codes = [w.proc.returncode for w in self.workers if w.proc is not None]
        log.info("kgate stopped (workers exited with %s)", codes)
        return 0 if all(w.clean_exit for w in self.workers) else 1


def run_supervisor(config: KgateConfig, argv: Sequence[str], count: int) -> int:
    """The parent's entry point (CLI): its own event loop, no proxy in it."""
    try:
        import uvloop

        return int(uvloop.run(Supervisor(config, argv, count).run()))
    except OSError as exc:
        log.error("cannot start: %s", exc.strerror if exc.errno is not None and exc.strerror else exc)
        return 1
