"""Real Apache Kafka brokers for tests (single-node KRaft), beside Tansu: 4.3.1 and 4.0.2.

The distributions are ``../shared/kafka43/kafka_2.13-4.3.1.tgz`` (the current line: share groups,
Produce v13 by topic id, transactions v2) and ``../shared/kafka/kafka_2.13-4.0.2.tgz`` (see their
READMEs): present in CI and on developers' machines, absent from a user's clone. Each is unpacked
once into a cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``, under a file lock so parallel
pytest workers do not race), then each broker gets its own log dir, config and ports.
``unavailable()`` says why a broker cannot run here, for a clear skip.

Kafka differs from Tansu where it matters to a proxy: durable storage, its own error answers
(UNKNOWN_TOPIC_ID where Tansu says UNKNOWN_TOPIC_OR_PARTITION), KIP-848 groups, Produce v12 (4.0) or
v13 (4.3) / Fetch v17-18 / Metadata v13, and it refuses unknown topic configs.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from . import jvm_cds
from .ports import HOST, free_port, port_open
from .procs import REPO, ManagedProcess


@dataclass(frozen=True)
class Dist:
    """One Kafka release on disk: where its tarball is and the folder it unpacks to."""

    version: str
    tarball: Path

    @property
    def name(self) -> str:
        return f"kafka_2.13-{self.version}"


KAFKA_43 = Dist("4.3.1", REPO.parent / "shared" / "kafka43" / "kafka_2.13-4.3.1.tgz")
KAFKA_40 = Dist("4.0.2", REPO.parent / "shared" / "kafka" / "kafka_2.13-4.0.2.tgz")
#: the current release line, what ``Kafka()`` runs unless told otherwise
DEFAULT_DIST = KAFKA_43
TARBALL = DEFAULT_DIST.tarball
NODE_ID = 1
START_TIMEOUT_S = 180.0  # format, start, warm-up: JVMs beside other test runs on two cores
OFFSETS_PARTITIONS = 4


#: OffsetFetch for each group until it succeeds (librdkafka retries COORDINATOR_LOAD_IN_PROGRESS); a
#: consumer's, since AdminClient.list_consumer_group_offsets crashes confluent-kafka's process at exit
_WARM_UP = """
import sys, time
from confluent_kafka import Consumer, KafkaException, TopicPartition
for group in sys.argv[2:]:
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": group, "enable.auto.commit": False})
    try:
        while True:
            try:
                c.committed([TopicPartition("kgate-warmup", 0)], timeout=10)
                break
            except KafkaException:  # COORDINATOR_NOT_AVAILABLE while the offsets topic is created
                time.sleep(0.2)
    finally:
        c.close()
"""


def _group_on_partition(partition: int, partitions: int) -> str:
    """A group id whose coordinator is ``__consumer_offsets`` partition ``partition`` (Kafka:
    ``Utils.abs(groupId.hashCode()) % partitions``, Java's String.hashCode on UTF-16 units)."""
    for i in range(10_000):
        name = f"kgate-warmup-{i}"
        h = 0
        for ch in name:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        if h >= 1 << 31:
            h -= 1 << 32
        if (0 if h == -(1 << 31) else abs(h)) % partitions == partition:
            return name
    raise AssertionError("no group id found")  # unreachable: the hash spreads evenly


#: a test broker's or tool's JVM (kafka-storage.sh): C1 only and the serial collector start faster
TOOL_JVM_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true"
#: a broker's JVM; a small log-and-metadata broker for tests needs no more heap
BROKER_HEAP_OPTS = "-Xms256m -Xmx768m"
#: a broker JVM stopped with SIGTERM exits 143 after its controlled shutdown: a clean exit
_BROKER_CLEAN_EXIT = (0, 143)


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` prints one (Kafka's ``Uuid.randomUuid``:
    16 random bytes in URL-safe base64 without padding, never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kgate-test"


def unavailable(dist: Dist = DEFAULT_DIST) -> str | None:
    """Why no Kafka broker of ``dist`` can run here, or None."""
    if not dist.tarball.is_file():
        return (
            f"Apache Kafka {dist.version} distribution not found at {dist.tarball} "
            "(../shared is beside the repository in CI)"
        )
    if shutil.which("java") is None:
        return f"java is not on PATH (Apache Kafka {dist.version} needs Java 17+)"
    return None


def distribution(dist: Dist = DEFAULT_DIST) -> Path:
    """The unpacked distribution, unpacking it once (marker file, lock against parallel workers)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    home = root / dist.name
    marker = home / ".kgate-unpacked"
    stamp = str(dist.tarball.stat().st_mtime)
    if marker.exists() and marker.read_text() == stamp:
        return home
    with open(root / "kafka-unpack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists() or marker.read_text() != stamp:
            if home.exists():
                shutil.rmtree(home)  # a half-unpacked tree from an interrupted run, or an older build
            with tarfile.open(dist.tarball) as tar:
                tar.extractall(root, filter="data")
            for script in (home / "bin").glob("*.sh"):
                script.chmod(0o755)
            marker.write_text(stamp)
    return home


class Kafka(ManagedProcess):
    """One single-node KRaft broker+controller on free loopback ports; its log dir survives restarts."""

    name = "kafka"

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        advertised_port: int | None = None,
        ssl_listener: tuple[Path, Path] | None = None,
        dist: Dist = DEFAULT_DIST,
    ) -> None:
        """``advertised_port``: what Metadata tells clients (a relay in front); default ``port``.

        ``dist``: which release (``KAFKA_43``, the default, or ``KAFKA_40``).

        ``ssl_listener``: (PEM keystore: private key then certificate chain, PEM CA bundle) adds an
        SSL listener on ``ssl_port`` beside the plaintext one (Kafka reads PEM stores itself).
        """
        self.ssl_listener = ssl_listener
        self.ssl_port = free_port() if ssl_listener is not None else None
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.dist = dist
        self.version = dist.version
        self.home = distribution(dist)
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.controller_port = free_port()
        self.node_id = NODE_ID
        self.kind = "kafka"
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "server.properties"
        self.config_path.write_text(self._properties())
        env = dict(
            os.environ,
            KAFKA_HEAP_OPTS=BROKER_HEAP_OPTS,
            # C1 only and the serial collector: half the CPU to start (9.2 s -> 4.8 s, one run each
            # at load 31) and the tests' traffic is far too small to need C2 or G1's threads
            KAFKA_JVM_PERFORMANCE_OPTS=f"-server {TOOL_JVM_OPTS}",
            LOG_DIR=str(self.workdir / "logs"),
            # kafka-server-start.sh's default adds -loggc: a GC log nobody reads, and a `java -version`
            # run per start to pick its flags
            EXTRA_ARGS="-name kafkaServer",
        )
        super().__init__(
            [str(self.home / "bin" / "kafka-server-start.sh"), str(self.config_path)],
            self.workdir / "kafka.log",
            env=env,
        )
        self._formatted = False
        #: this start's class archive (support/jvm_cds.py), settled when the JVM exits
        self._archive: jvm_cds.ClassArchive | None = None

    def _jvm_opts(self) -> str:
        return f"{BROKER_HEAP_OPTS} -server {TOOL_JVM_OPTS}"

    def _with_archive(self, archive: jvm_cds.ClassArchive) -> dict[str, str]:
        return jvm_cds.with_archive(dict(self.env or os.environ), archive)

    def _properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.advertised_port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # 50 by default: created and loaded on a share group's first use, as the offsets topic's are
            "share.coordinator.state.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",  # the test workloads use short session timeouts
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            # KIP-848 and share-group members learn their assignment on a heartbeat, and Kafka 4.3
            # batches assignment updates: the 5 s and 1 s defaults made each join and rebalance in the
            # tests wait seconds on an idle broker (Kafka 4.0 ignores the assignment settings)
            "group.consumer.heartbeat.interval.ms": "1000",
            "group.consumer.assignment.interval.ms": "0",
            "group.share.min.heartbeat.interval.ms": "1000",
            "group.share.heartbeat.interval.ms": "1000",
            "group.share.assignment.interval.ms": "0",
            "auto.create.topics.enable": "true",
            "log.flush.interval.messages": "1",  # durability tests kill the broker
            # the controller's no-op record every 0.5 s was most of an idle broker's CPU (its Raft I/O
            # thread); every 5 s still keeps its liveness and high watermark moving
            "metadata.max.idle.interval.ms": "5000",
        }
        if self.ssl_listener is not None:
            keystore, truststore = self.ssl_listener
            props["listeners"] += f",SSL://{HOST}:{self.ssl_port}"
            props["advertised.listeners"] += f",SSL://{HOST}:{self.ssl_port}"
            props["listener.security.protocol.map"] += ",SSL:SSL"
            props.update(
                {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(keystore),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(truststore),
                    "ssl.client.auth": "none",
                }
            )
        return "".join(f"{k}={v}\n" for k, v in props.items())

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def ssl_bootstrap(self) -> str:
        assert self.ssl_port is not None, "started without ssl_listener"
        return f"{HOST}:{self.ssl_port}"

    def _format(self) -> None:
        """The log dir as ``kafka-storage.sh format`` makes it: the release's ``bootstrap.checkpoint``
        (its default feature levels: nothing of this broker's) copied from the one format per release
        and machine (``_bootstrap_checkpoint``), and a ``meta.properties`` with a fresh cluster id and
        directory id. A format is a JVM run of ~1 CPU-s; a test run starts five or more brokers."""
        if self._formatted or (self.data_dir / "meta.properties").exists():
            self._formatted = True
            return
        checkpoint = self._bootstrap_checkpoint()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(checkpoint, self.data_dir / "bootstrap.checkpoint")
        meta = f"node.id={NODE_ID}\ndirectory.id={random_cluster_id()}\nversion=1\ncluster.id={random_cluster_id()}\n"
        tmp = self.data_dir / ".meta.properties.tmp"
        tmp.write_text(meta)
        os.replace(tmp, self.data_dir / "meta.properties")  # last: its presence means formatted
        self._formatted = True

    def _bootstrap_checkpoint(self) -> Path:
        """The release's ``bootstrap.checkpoint``, from one real ``kafka-storage.sh format`` per
        unpacked distribution (kept beside it, under a lock against parallel workers)."""
        kept = self.home / ".kgate-bootstrap.checkpoint"
        if kept.exists():
            return kept
        with open(cache_dir() / "kafka-format.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not kept.exists():
                scratch = Path(tempfile.mkdtemp(prefix="kgate-format-", dir=self.workdir))
                try:
                    props = scratch / "server.properties"
                    props.write_text(
                        self.config_path.read_text().replace(
                            f"log.dirs={self.data_dir}", f"log.dirs={scratch / 'data'}"
                        )
                    )
                    self._run_format(props)
                    shutil.copyfile(scratch / "data" / "bootstrap.checkpoint", str(kept) + ".tmp")
                    os.replace(str(kept) + ".tmp", kept)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
        return kept

    def _run_format(self, config_path: Path) -> None:
        storage = str(self.home / "bin" / "kafka-storage.sh")
        archive = jvm_cds.prepare(self.home, "kafka-storage.sh", self._jvm_opts())
        status: int | None = None
        try:
            # one JVM start-up fewer than ``kafka-storage.sh random-uuid``
            res = subprocess.run(
                [storage, "format", "-t", random_cluster_id(), "-c", str(config_path)],
                capture_output=True,
                text=True,
                env=self._with_archive(archive),
                timeout=180,  # one JVM run; minutes beside other test runs' JVMs on two cores
            )
            status = res.returncode
        finally:
            jvm_cds.done(archive, status)
        if res.returncode != 0:
            raise RuntimeError(f"kafka-storage.sh format failed: {res.stdout}{res.stderr}")

    def start(self, timeout: float = START_TIMEOUT_S) -> Kafka:
        self._format()
        mark = self.log_path.stat().st_size if self.log_path.exists() else 0  # this start's lines follow
        self._settle_archive(None)  # a start without a stop before it: what the last JVM wrote is unknown
        self._archive = jvm_cds.prepare(self.home, "broker", self._jvm_opts())
        base_env, self.env = self.env, self._with_archive(self._archive)
        try:
            super().start()
        finally:
            self.env = base_env
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.proc.returncode}:\n{self.log_text(tail=5000)}")
            if b"Kafka Server started" in self._log_since(mark) and port_open(self.port):
                self._warm_group_coordinator(deadline)
                return self
            time.sleep(0.1)
        raise TimeoutError(f"kafka did not start within {timeout}s:\n{self.log_text(tail=5000)}")

    def _log_since(self, offset: int) -> bytes:
        """The log from byte ``offset`` on (polled while it starts: not the whole file each time)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return b""

    def _warm_group_coordinator(self, deadline: float) -> None:
        """Create ``__consumer_offsets`` and wait until every partition's group coordinator answers.

        "Kafka Server started" comes before the offsets topic exists: the first group request
        auto-creates it and each partition is then loaded by the coordinator runtime. A test that
        was first to use groups on a freshly started broker spent that time in
        COORDINATOR_LOAD_IN_PROGRESS retries and, on two busy cores, once consumed nothing within
        its 60 s. An OffsetFetch per partition (a group whose hash lands there, as Kafka picks it)
        returns only once that partition's coordinator is loaded; librdkafka retries the load error.
        """
        groups = [_group_on_partition(p, OFFSETS_PARTITIONS) for p in range(OFFSETS_PARTITIONS)]
        # In a child process: a librdkafka client left in the test process keeps a socket straight to
        # the broker (tests assert clients never have one) and its destruction at an arbitrary GC
        # point crashed the interpreter once.
        res = subprocess.run(
            [sys.executable, "-c", _WARM_UP, self.bootstrap, *groups],
            capture_output=True,
            text=True,
            timeout=max(1.0, deadline - time.monotonic()),
        )
        if res.returncode != 0:
            raise TimeoutError(
                f"kafka's group coordinator not ready: {res.stdout}{res.stderr}\n{self.log_text(tail=5000)}"
            )

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (a controlled shutdown) and wait; SIGKILL if it does not exit in time."""
        rc = super().stop(timeout=timeout)
        self._settle_archive(rc)
        return rc

    def kill(self) -> None:
        """kill -9 by PID (the JVM), for crash tests; the log dir stays for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        self._close_log()
        self._settle_archive(None)

    def _settle_archive(self, status: int | None) -> None:
        """The JVM exited with ``status`` (None: killed, or unknown): publish the archive it wrote at a
        clean exit (a SIGTERM's controlled shutdown), else drop it."""
        if self._archive is not None:
            archive, self._archive = self._archive, None
            jvm_cds.done(archive, status, _BROKER_CLEAN_EXIT)

    def restart(self) -> Kafka:
        """Stop (if running) and start again on the same ports and log dir."""
        if self.alive():
            self.stop()
        return self.start()
