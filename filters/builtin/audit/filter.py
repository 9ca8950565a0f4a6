"""``audit-log``: one JSON line per request/response exchange (docs/audit-log.md is the contract).

The filter has no hooks: it must not change what kgate decodes, or auditing would slow the data
path it audits (a hook on Produce would turn the header-only raw mode into decoding every
request). Instead it asks the proxy for finished exchanges (``observe_exchanges``,
filters/exchanges.py). Per exchange the event loop pays one sampling test (only when sampling is
configured), one small object and a deque append; everything else (decoding topics, resolving
ids, JSON, the file) happens on the writer thread (writer.py), bounded and dropping rather
than blocking.

Configuration (``{name: audit-log, config: {directory: DIR}}`` is enough)::

    directory: /var/log/kgate/audit      # required
    instance_id: kgate-a                 # default: hostname:pid; a --workers worker adds -w<index>
    max_file_bytes: 134217728            # rotate at this size (default 128 MiB)
    max_file_age_s: 300                  # ... or this age (default 5 min)
    gzip: true                           # compress rotated files (default true)
    format: jsonl                        # or parquet: rotated files as zstd Parquet (needs pyarrow)
    sample: {Fetch: 0.1, default: 1}     # per api name (or key number): rate 0..1 (default 1)
    queue_size: 10000                    # events waiting for the writer at most
    max_queue_bytes: 67108864            # frame bytes those events may hold at most (64 MiB)
    lookup_timeout_s: 5                  # the writer's wait for a topic id's name
    kafka:                               # optional second sink
      bootstrap: broker:9092             # required (string or list)
      topic: kgate-audit                 # required
      queue_size: 10000, linger_ms: 100, max_batch_bytes: 1048576, acks: 1, compression: null, client_id: kgate-audit
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import socket
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client.core import REGISTRY, CounterMetricFamily
from prometheus_client.registry import Collector

from kgate.api import ConnectionInfo, Filter, FilterConfigError
from kgate.codec import api
from kgate.filters.builtin.audit.files import AuditFiles
from kgate.filters.builtin.audit.kafka_sink import KafkaSink
from kgate.filters.builtin.audit.memory import keep_freed_memory
from kgate.filters.builtin.audit.writer import AuditCounters, AuditWriter, loop_resolver
from kgate.filters.exchanges import ExchangeObserver, ExchangeServices, FinishedExchange

_KEYS = {
    "directory",
    "instance_id",
    "max_file_bytes",
    "max_file_age_s",
    "gzip",
    "format",
    "sample",
    "queue_size",
    "max_queue_bytes",
    "lookup_timeout_s",
    "kafka",
}
_KAFKA_KEYS = {"bootstrap", "topic", "queue_size", "linger_ms", "max_batch_bytes", "acks", "compression", "client_id"}
_API_BY_NAME = {info.name: key for key, info in api.API_INFO.items()}


def _int(config: Mapping[str, Any], key: str, default: int, path: str, minimum: int = 1) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FilterConfigError(f"{path}{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def _number(config: Mapping[str, Any], key: str, default: float, path: str = "") -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise FilterConfigError(f"{path}{key}: expected a number > 0, got {value!r}")
    return float(value)


def _sample(value: Any) -> dict[str, Any]:
    """``{api name or key: rate}`` -> ``{"default": rate, "rates": {api key: rate}}``."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise FilterConfigError(f"sample: expected a mapping of api name to rate (0..1), got {value!r}")
    default = 1.0
    rates: dict[int, float] = {}
    for name, rate in value.items():
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise FilterConfigError(f"sample.{name}: expected a rate between 0 and 1, got {rate!r}")
        if name == "default":
            default = float(rate)
        elif isinstance(name, int) and not isinstance(name, bool) and name in api.API_INFO:
            rates[name] = float(rate)
        elif isinstance(name, str) and name in _API_BY_NAME:
            rates[_API_BY_NAME[name]] = float(rate)
        else:
            raise FilterConfigError(
                f"sample.{name}: not a Kafka api name or key (e.g. Produce, Fetch, Metadata, 3) nor 'default'"
            )
    return {"default": default, "rates": rates}


def _kafka(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise FilterConfigError(f"kafka: expected a mapping with bootstrap and topic, got {value!r}")
    unknown = set(value) - _KAFKA_KEYS
    if unknown:
        raise FilterConfigError(f"kafka: unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(_KAFKA_KEYS))})")
    bootstrap = value.get("bootstrap")
    if isinstance(bootstrap, str):
        bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
    if not isinstance(bootstrap, list) or not bootstrap or not all(isinstance(b, str) and ":" in b for b in bootstrap):
        got = value.get("bootstrap")
        raise FilterConfigError(f"kafka.bootstrap: expected host:port (a string or a list), got {got!r}")
    topic = value.get("topic")
    if not isinstance(topic, str) or not topic:
        raise FilterConfigError(f"kafka.topic: expected a topic name, got {topic!r}")
    acks = value.get("acks", 1)
    if acks not in (0, 1, "all", -1):
        raise FilterConfigError(f"kafka.acks: expected 0, 1 or all, got {acks!r}")
    compression = value.get("compression")
    if compression not in (None, "gzip"):
        raise FilterConfigError(f"kafka.compression: expected null or gzip, got {compression!r}")
    client_id = value.get("client_id", "kgate-audit")
    if not isinstance(client_id, str) or not client_id:
        raise FilterConfigError(f"kafka.client_id: expected a string, got {client_id!r}")
    if importlib.util.find_spec("aiokafka") is None:
        raise FilterConfigError("kafka: the Kafka sink needs aiokafka (pip install 'kgate-proxy[audit-kafka]')")
    return {
        "bootstrap": bootstrap,
        "topic": topic,
        "queue_size": _int(value, "queue_size", 10_000, "kafka."),
        "linger_ms": _int(value, "linger_ms", 100, "kafka.", minimum=0),
        "max_batch_bytes": _int(value, "max_batch_bytes", 1 << 20, "kafka."),
        "acks": acks,
        "compression": compression,
        "client_id": client_id,
    }


class AuditLog(Filter):
    name = "audit-log"

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        unknown = set(config) - _KEYS
        if unknown:
            raise FilterConfigError(f"unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(_KEYS))})")
        directory = config.get("directory")
        if not isinstance(directory, str) or not directory:
            raise FilterConfigError(f"directory: expected the directory to write audit files in, got {directory!r}")
        instance = config.get("instance_id", f"{socket.gethostname()}:{os.getpid()}")
        if not isinstance(instance, str) or not instance:
            raise FilterConfigError(f"instance_id: expected a non-empty string, got {instance!r}")
        compress = config.get("gzip", True)
        if not isinstance(compress, bool):
            raise FilterConfigError(f"gzip: expected true or false, got {compress!r}")
        fmt = config.get("format", "jsonl")
        if fmt not in ("jsonl", "parquet"):
            raise FilterConfigError(f"format: expected jsonl or parquet, got {fmt!r}")
        if fmt == "parquet":
            from kgate.filters.builtin.audit.parquet import missing

            problem = missing()
            if problem:
                raise FilterConfigError(problem)
        return {
            "format": fmt,
            "directory": directory,
            "instance_id": instance,
            "max_file_bytes": _int(config, "max_file_bytes", 128 << 20, ""),
            "max_file_age_s": _number(config, "max_file_age_s", 300.0),
            "gzip": compress,
            "sample": _sample(config.get("sample")),
            "queue_size": _int(config, "queue_size", 10_000, ""),
            "max_queue_bytes": _int(config, "max_queue_bytes", 64 << 20, ""),
            "lookup_timeout_s": _number(config, "lookup_timeout_s", 5.0),
            "kafka": _kafka(config.get("kafka")),
        }

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.counters = AuditCounters()
        self.writer: AuditWriter | None = None
        self.kafka: KafkaSink | None = None
        self.cluster = ""
        self._retiring: weakref.finalize | None = None
        _LIVE.add(self)

    def observe_exchanges(self, services: ExchangeServices) -> ExchangeObserver:
        """Start the writer (and the Kafka sink) and return the per-exchange observer (event loop)."""
        c = self.config
        self.cluster = services.cluster
        if not self._retiring:
            # a reload replaces the filter: its counts join the retired ones, so the counters never go down
            self._retiring = weakref.finalize(self, _retire, services.cluster, self.counters, c["kafka"] is not None)
        # --workers: each worker is its own writer, so its own instance (files and events never mix)
        instance = c["instance_id"] if services.worker is None else f"{c['instance_id']}-w{services.worker}"
        files = AuditFiles(
            Path(c["directory"]),
            f"{instance}-{services.cluster}",
            c["max_file_bytes"],
            c["max_file_age_s"],
            c["gzip"],
            parquet=c.get("format") == "parquet",
        )
        if c["kafka"] is not None:
            self.kafka = KafkaSink(c["kafka"], self.counters)
            self.kafka.start(services.loop)
        self.writer = AuditWriter(
            files,
            instance=instance,
            cluster=services.cluster,
            queue_size=c["queue_size"],
            max_queue_bytes=c["max_queue_bytes"],
            resolve=loop_resolver(
                services.loop, services.cached_topic_name, services.topic_names, c["lookup_timeout_s"]
            ),
            counters=self.counters,
            sink=self.kafka,
        )
        keep_freed_memory(c["max_queue_bytes"])  # held frames freed in bursts must not cost page faults
        self.writer.start()
        return self._observer(self.writer, c["sample"])

    def _observer(self, writer: AuditWriter, sample: Mapping[str, Any]) -> ExchangeObserver:
        offer = writer.offer_exchange
        default: float = sample["default"]
        rates: dict[int, float] = sample["rates"]
        if default >= 1.0 and all(r >= 1.0 for r in rates.values()):
            return offer  # the writer's bound method itself: no extra call per exchange
        counters = self.counters
        rand = random.random

        def observe_sampled(
            ex: FinishedExchange, info: ConnectionInfo, answer: Any, answer_bytes: int | None, end_ns: int
        ) -> None:
            if rand() >= rates.get(ex.api_key, default):
                counters.sampled_out += 1
                return
            offer(ex, info, answer, answer_bytes, end_ns)

        return observe_sampled

    async def close(self) -> None:
        """Write what is queued and publish the current file (off the loop), then stop the Kafka sink."""
        if self.writer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.writer.stop)
        if self.kafka is not None:
            await self.kafka.close()


_LIVE: weakref.WeakSet[AuditLog] = weakref.WeakSet()
_COUNTED = (
    "written",
    "kafka_written",
    "queue_full",
    "write_errors",
    "build_errors",
    "kafka_queue_full",
    "kafka_errors",
    "sampled_out",
)
#: cluster -> the counts (in ``_COUNTED`` order) of instances no longer alive
_RETIRED: dict[str, list[int]] = {}
#: clusters whose audit log had a Kafka sink (its written count is shown after the instance is gone)
_RETIRED_KAFKA: set[str] = set()


def _retire(cluster: str, counters: AuditCounters, kafka: bool) -> None:
    row = _RETIRED.setdefault(cluster, [0] * len(_COUNTED))
    for i, name in enumerate(_COUNTED):
        row[i] += getattr(counters, name)
    if kafka:
        _RETIRED_KAFKA.add(cluster)


class _AuditCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily]:
        written = CounterMetricFamily(
            "kgate_audit_events_written", "Audit events written, per sink (file, kafka)", labels=["cluster", "sink"]
        )
        dropped = CounterMetricFamily(
            "kgate_audit_events_dropped",
            "Audit events lost, per reason: queue_full (the writer is behind: slow disk), write_error (disk full, "
            "read-only), build_error, kafka_queue_full, kafka_error; sampled_out counts events left out by sampling",
            labels=["cluster", "reason"],
        )
        per: dict[str, list[int]] = {cluster: list(row) for cluster, row in list(_RETIRED.items())}
        kafka = set(_RETIRED_KAFKA)
        for f in list(_LIVE):
            if not f.cluster:
                continue  # made but not started (a config check): nothing counted
            k = f.counters
            row = per.setdefault(f.cluster, [0] * len(_COUNTED))
            for i, name in enumerate(_COUNTED):
                row[i] += getattr(k, name)
            if f.kafka is not None:
                kafka.add(f.cluster)
        for cluster, row in sorted(per.items()):
            written.add_metric([cluster, "file"], row[0])
            if cluster in kafka:
                written.add_metric([cluster, "kafka"], row[1])
            for reason, n in zip(
                ("queue_full", "write_error", "build_error", "kafka_queue_full", "kafka_error", "sampled_out"),
                row[2:],
                strict=True,
            ):
                dropped.add_metric([cluster, reason], n)
        yield written
        yield dropped


REGISTRY.register(_AuditCollector())
