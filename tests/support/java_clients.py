"""Kafka's own Java clients (the tools in a distribution's ``bin/``) as test workloads.

The Java clients are the reference implementation: Java 4.3 producers send Produce v13 (topics by
id only), commit transactions the KIP-890 part 2 way (no AddPartitionsToTxn when the cluster's
``transaction.version`` is 2), join KIP-848 groups and share groups (KIP-932). librdkafka,
kafka-python and aiokafka do none of that yet, so only these tools show kgate carrying it.

Each tool is one JVM launch (~5-10 s on two busy cores), so a test should use few of them; each maps
a class-data archive of its tool's classes (support/jvm_cds.py: about half a run's CPU), which
its first run writes. Every
run has a hard timeout that fails with the tool's output, and while it runs a sampler process
(``netconn.ProcessWatcher``) samples the JVM's own sockets (the scripts ``exec`` java, so the
child's pid is the JVM's): a client that learned the broker's real address would hold a connection
to it for its lifetime, which the sampling sees. That the JVM reached kgate at all is read from
kgate's own count of accepted connections (``accepted``), not sampled. ``unavailable`` says why the
tools cannot run here (no Java, no ../shared), for a clear skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import jvm_cds, kafka_broker
from .kafka_broker import Dist
from .netconn import ProcessWatcher

#: generous: a JVM start-up plus the client's own work on two cores shared with other test runs
DEFAULT_TIMEOUT_S = 120.0
#: a client JVM needs little heap; serial GC and C1 only start faster on two cores
_JVM_ENV = {
    "KAFKA_HEAP_OPTS": "-Xms64m -Xmx256m",
    "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true",
}


def tool_jvm_opts() -> str:
    """The JVM options a tool runs with (what its class archive is keyed on)."""
    return " ".join(_JVM_ENV.values())


def tool_env(workdir: Path | None = None) -> dict[str, str]:
    """The environment for a tool's script: its small heap and start-up options, logs in ``workdir``.
    ``run_tool`` adds the class archive."""
    env = dict(os.environ, **_JVM_ENV)
    if workdir is not None:
        env["LOG_DIR"] = str(workdir)
    return env


def run_tool(
    home: Path, tool: str, args: Sequence[str], *, timeout: float, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``bin/<tool> args`` of the distribution at ``home``, unwatched (no socket sampling), with the
    tools' JVM options and class archive: for a test that runs a tool beside ``JavaTools``' checks
    (a control run straight at the broker, a listing) rather than as the workload under watch."""
    archive = jvm_cds.prepare(home, tool, tool_jvm_opts())
    env = jvm_cds.with_archive(tool_env(), archive)
    status: int | None = None
    try:
        res = subprocess.run(
            [str(home / "bin" / tool), *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env
        )
        status = res.returncode
        return res
    finally:
        jvm_cds.done(archive, status)


#: the largest gap between two socket samples that still counts as watching a run
_MAX_GAP_S = 1.0


def unavailable(dist: Dist = kafka_broker.DEFAULT_DIST) -> str | None:
    """Why the Java tools of ``dist`` cannot run here, or None."""
    return kafka_broker.unavailable(dist)


@dataclass
class JavaRun:
    """One finished tool run: its output and the remote ports its JVM was seen connected to."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peers: set[int] = field(default_factory=set)

    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]

    def describe(self) -> str:
        return (
            f"{' '.join(self.argv[:1] + self.argv[1:12])} -> rc {self.returncode} in {self.seconds:.1f}s\n"
            f"--- stdout (tail) ---\n{self.stdout[-3000:]}\n--- stderr (tail) ---\n{self.stderr[-4000:]}"
        )


class JavaTools:
    """The tools of one Kafka distribution, run against ``bootstrap``.

    ``forbidden_ports``: ports no client JVM may connect to (the broker's own, behind kgate); a run
    that did fails with the connections seen. ``must_use``: kgate's port, which every run must
    use, so a run that never reached kgate cannot pass the no-bypass check vacuously; ``accepted``
    reads kgate's count of accepted client connections (``kgate_accepted_connections_total``):
    given, each run must raise it (kgate's own word, where sampling could miss a short connection);
    without it, the sampler must have seen ``must_use``.
    """

    def __init__(
        self,
        dist: Dist,
        bootstrap: str,
        *,
        forbidden_ports: Iterable[int] = (),
        must_use: int | None = None,
        accepted: Callable[[], float] | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.dist = dist
        self.home = kafka_broker.distribution(dist)
        self.bootstrap = bootstrap
        self.forbidden = set(forbidden_ports)
        self.must_use = must_use
        self.accepted = accepted
        self.workdir = workdir
        self.runs: list[JavaRun] = []
        # KIP-1147 renamed the tools' client-property options (the old names print a deprecation
        # line on stdout, among the records); 4.0 knows only the old ones
        self._new_options = tuple(int(x) for x in dist.version.split(".")[:2]) >= (4, 2)

    @classmethod
    def through(
        cls, kgate: Any, broker_port: int, workdir: Path | None, dist: Dist = kafka_broker.DEFAULT_DIST
    ) -> JavaTools:
        """The tools run against ``kgate`` (a ``procs.Kgate``): the broker's port forbidden, kgate's
        listener required, each run raising kgate's count of accepted connections."""
        return cls(
            dist,
            kgate.bootstrap,
            forbidden_ports={broker_port},
            must_use=kgate.listen_port,
            accepted=lambda: sum(v for _labels, v in kgate.metric_values("kgate_accepted_connections_total")),
            workdir=workdir,
        )

    def _env(self) -> dict[str, str]:
        return tool_env(self.workdir)

    def run(
        self,
        tool: str,
        args: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        check: bool = True,
    ) -> JavaRun:
        """Run ``bin/<tool> args``; fails (AssertionError) on timeout, on a non-zero exit with
        ``check``, and on any socket to a forbidden port."""
        argv = [str(self.home / "bin" / tool), *args]
        accepted_before = self.accepted() if self.accepted is not None else 0.0
        archive = jvm_cds.prepare(self.home, tool, tool_jvm_opts())
        env = jvm_cds.with_archive(self._env(), archive)
        started = time.monotonic()
        with ProcessWatcher(self.forbidden, interval=0.05) as watch:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                start_new_session=True,
            )
            watch.watch(proc.pid)
            try:
                out, err = proc.communicate(stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()  # the JVM itself (the script exec'd it): our own child, by its pid
                out, err = proc.communicate()
                timed_out = True
            else:
                timed_out = False
            finally:
                jvm_cds.done(archive, proc.poll())
        run = JavaRun(argv, -9 if timed_out else proc.returncode, out, err, time.monotonic() - started, set(watch.seen))
        if timed_out:
            raise AssertionError(f"{tool} did not finish within {timeout:.0f}s:\n{run.describe()}")
        self.runs.append(run)
        # pytest shows it with a failing test's output: how long each JVM took, where it connected
        print(
            f"{tool}: rc {run.returncode} in {run.seconds:.1f}s, connected to {sorted(run.peers)} "
            f"({watch.samples} samples, largest gap {watch.max_gap_s:.2f}s)"
        )
        assert not watch.violations, (
            f"{tool} connected straight to the broker ({sorted(self.forbidden)}), bypassing kgate: "
            f"{watch.violations[:5]}\n{run.describe()}"
        )
        if check:
            assert run.returncode == 0, f"{tool} failed:\n{run.describe()}"
        if self.accepted is not None:
            accepted_after = self.accepted()
            assert accepted_after > accepted_before, (
                f"{tool} never connected to kgate: its accepted connections stayed at {accepted_before:.0f}\n"
                f"{run.describe()}"
            )
        if self.must_use is not None:
            # The no-bypass check is not vacuous: the sampler saw the JVM on kgate's port, or (its
            # connections too short to catch) sampled at least every second while it ran
            assert self.must_use in run.peers or (self.accepted is not None and watch.max_gap_s <= _MAX_GAP_S), (
                f"{tool} was never seen connected to {self.must_use}; saw {sorted(run.peers)} in "
                f"{watch.samples} samples over {run.seconds:.1f}s (largest gap {watch.max_gap_s:.2f}s)\n"
                f"{run.describe()}"
            )
        return run

    # ------------------------------------------------------------------ producers
    def console_produce(self, topic: str, lines: Sequence[str], *props: str) -> JavaRun:
        """``kafka-console-producer.sh``: one record per line, acks=all (a Java 4.3 producer sends
        Produce v13 when offered it)."""
        args = ["--bootstrap-server", self.bootstrap, "--topic", topic]
        for p in ("acks=all", *props):
            args += ["--command-property" if self._new_options else "--producer-property", p]
        return self.run("kafka-console-producer.sh", args, stdin="".join(f"{x}\n" for x in lines))

    def transactional_perf(self, topic: str, records: int, transactional_id: str, duration_ms: int = 200) -> JavaRun:
        """``kafka-producer-perf-test.sh`` with a transactional id: values ``0``..``records-1``
        (``--payload-monotonic``), a commit every ``duration_ms`` and one at the end.

        Fails unless the tool reports all ``records`` sent (it exits 0 even when sends failed)."""
        run = self.run(
            "kafka-producer-perf-test.sh",
            [
                "--topic",
                topic,
                "--num-records",
                str(records),
                "--throughput",
                "-1",
                "--payload-monotonic",
                "--transactional-id",
                transactional_id,
                "--transaction-duration-ms",
                str(duration_ms),
                "--command-property" if self._new_options else "--producer-props",
                f"bootstrap.servers={self.bootstrap}",
                "acks=all",
                "linger.ms=5",
            ],
        )
        sent = re.search(r"^(\d+) records sent", run.stdout, re.MULTILINE)
        assert sent is not None, f"the transactional producer did not send all {records} records:\n{run.describe()}"
        assert int(sent.group(1)) == records, (
            f"the transactional producer did not send all {records} records:\n{run.describe()}"
        )
        assert "Exception" not in run.stderr, (
            f"the transactional producer did not send all {records} records:\n{run.describe()}"
        )
        return run

    # ------------------------------------------------------------------ consumers
    def console_consume(
        self,
        topic: str,
        max_messages: int,
        *,
        group: str | None = None,
        props: Sequence[str] = (),
        isolation: str | None = None,
        idle_timeout_ms: int = 60_000,
    ) -> list[str]:
        """``kafka-console-consumer.sh`` from the beginning: the values it printed.

        It stops after ``max_messages`` or ``idle_timeout_ms`` without a record; to show that
        *exactly* n records are there, ask for n + 1 with a short idle timeout."""
        args = [
            "--bootstrap-server",
            self.bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            str(max_messages),
            "--timeout-ms",
            str(idle_timeout_ms),
        ]
        if group is not None:
            args += ["--group", group]
        if isolation is not None:
            args += ["--isolation-level", isolation]
        for p in props:
            args += ["--command-property" if self._new_options else "--consumer-property", p]
        # a consumer that times out exits non-zero (TimeoutException) after printing what it read
        return self.run(
            "kafka-console-consumer.sh", args, timeout=idle_timeout_ms / 1000 + DEFAULT_TIMEOUT_S, check=False
        ).lines()

    def share_consume(self, topic: str, group: str, max_messages: int, *, idle_timeout_ms: int = 60_000) -> JavaRun:
        """``kafka-console-share-consumer.sh`` (KIP-932 share group): its run (``lines()`` = values)."""
        args = [
            "--bootstrap-server",
            self.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--max-messages",
            str(max_messages),
            "--timeout-ms",
            str(idle_timeout_ms),
        ]
        return self.run(
            "kafka-console-share-consumer.sh", args, timeout=idle_timeout_ms / 1000 + DEFAULT_TIMEOUT_S, check=False
        )

    # ------------------------------------------------------------------ admin
    def set_group_config(self, group: str, **configs: str) -> JavaRun:
        """``kafka-configs.sh --alter --entity-type groups`` (e.g. ``share.auto.offset.reset``)."""
        conf = ",".join(f"{k.replace('_', '.')}={v}" for k, v in configs.items())
        return self.run(
            "kafka-configs.sh",
            [
                "--bootstrap-server",
                self.bootstrap,
                "--alter",
                "--entity-type",
                "groups",
                "--entity-name",
                group,
                "--add-config",
                conf,
            ],
        )

    def describe_share_group(self, group: str) -> list[dict[str, str]]:
        """``kafka-share-groups.sh --describe --group G``: its table, one dict per row."""
        run = self.run("kafka-share-groups.sh", ["--bootstrap-server", self.bootstrap, "--describe", "--group", group])
        return parse_table(run.stdout)


def parse_table(text: str) -> list[dict[str, str]]:
    """The whitespace-aligned table the admin tools print (a header line of upper-case names)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP" and all(c.isupper() or "-" in c for c in cells):
            header = cells
            continue
        if header is not None and len(cells) == len(header):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows
