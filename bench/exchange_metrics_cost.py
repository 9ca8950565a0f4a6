#!/usr/bin/env python3
"""What the per-exchange metrics cost the data path, per round trip, A/B against another tree.

Drives a ``ConnectionCore`` without sockets (as tests/support/core_driver.py does, with a carrier
that keeps nothing) through whole round trips: a request from the client, the broker's answer.
Cases: Metadata v12 (no topic data), Produce v9 (one topic, one partition, one 1 KiB batch,
acks=1), Fetch v12 (one topic, one partition, one 1 KiB batch in the answer); each with no
observer (admin listener off), with the per-exchange metrics, and with per-topic metrics on top.
Each figure is the minimum over ``--reps`` runs of ``--n`` round trips (the least disturbed run:
the machine is shared), in microseconds per round trip.

Run from a worktree: ``python bench/exchange_metrics_cost.py --base /tmp/kgate-base`` where
``/tmp/kgate-base`` is ``git archive`` of the tree to compare with (main at the branch point);
the two trees run in alternating child processes so that load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


class _Null:
    """A carrier that drops what the core sends (only the core's own work is timed)."""

    def send_upstream(self, data: Any) -> None:
        pass

    def send_client(self, data: Any) -> None:
        pass

    def pause_client(self, reason: str) -> None:
        pass

    def resume_client(self, reason: str) -> None:
        pass

    def pause_broker(self, reason: str) -> None:
        pass

    def resume_broker(self, reason: str) -> None:
        pass

    def spawn(self, pending: Any, suspension: Any) -> None:
        raise AssertionError("nothing suspends here")

    def report_held(self, held: int) -> None:
        pass

    def close_sockets(self, reason: Any) -> None:
        raise AssertionError(f"closed: {reason}")


def _child(n: int, reps: int) -> dict[str, float]:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from kgate.api import ConnectionInfo
    from kgate.codec.generated.data.fetch import FetchableTopicResponse, FetchRequest, FetchResponse, PartitionData
    from kgate.codec.generated.data.metadata import MetadataRequest, MetadataResponse
    from kgate.codec.generated.data.produce import (
        PartitionProduceData,
        PartitionProduceResponse,
        ProduceRequest,
        ProduceResponse,
        TopicProduceData,
        TopicProduceResponse,
    )
    from kgate.config import parse_config
    from kgate.filters.chain import FilterChain
    from kgate.proxy.runtime.cluster import VirtualCluster
    from kgate.proxy.sansio.core import ConnectionCore
    from kgate.testing.frames import request_bytes, response_bytes

    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    b.append(0, timestamp=0, key=None, value=b"v" * 1024, headers=[])
    batch = bytes(b.build())
    cases = {
        "metadata": (
            request_bytes(3, 12, MetadataRequest(topics=[]), correlation_id=1),
            response_bytes(3, 12, MetadataResponse(brokers=[], topics=[]), correlation_id=1),
        ),
        "produce": (
            request_bytes(
                0,
                9,
                ProduceRequest(
                    acks=1,
                    timeout_ms=1000,
                    topic_data=[
                        TopicProduceData(name="orders", partition_data=[PartitionProduceData(index=0, records=batch)])
                    ],
                ),
                correlation_id=1,
            ),
            response_bytes(
                0,
                9,
                ProduceResponse(
                    responses=[
                        TopicProduceResponse(name="orders", partition_responses=[PartitionProduceResponse(index=0)])
                    ]
                ),
                correlation_id=1,
            ),
        ),
        "fetch": (
            request_bytes(1, 12, FetchRequest(max_wait_ms=1, min_bytes=1, topics=[]), correlation_id=1),
            response_bytes(
                1,
                12,
                FetchResponse(
                    responses=[
                        FetchableTopicResponse(
                            topic="orders", partitions=[PartitionData(partition_index=0, records=batch)]
                        )
                    ]
                ),
                correlation_id=1,
            ),
        ),
    }
    modes: list[tuple[str, dict[str, Any]]] = [("off", {}), ("metrics", {"exchange_metrics": True})]
    try:
        from kgate.config import TopicMetricsConfig  # type: ignore[attr-defined]

        modes = [
            ("off", {}),
            ("metrics", {"exchange_metrics": True, "topic_metrics": TopicMetricsConfig(enabled=False)}),
            ("topics", {"exchange_metrics": True, "topic_metrics": TopicMetricsConfig()}),
        ]
    except ImportError:
        pass  # the base tree: no per-topic metrics
    try:
        from kgate.config import ClientMetricsConfig  # type: ignore[attr-defined]

        off = ClientMetricsConfig(enabled=False)
        modes = [(name, dict(kw, client_metrics=off) if kw else kw) for name, kw in modes]
        modes.append(
            (
                "clients",
                {
                    "exchange_metrics": True,
                    "topic_metrics": TopicMetricsConfig(enabled=False),
                    "client_metrics": ClientMetricsConfig(),
                },
            )
        )
    except ImportError:
        pass  # a tree without per-client metrics
    cfg = parse_config(
        {"virtual_clusters": [{"name": "bench", "listen": "127.0.0.1:19999", "upstream": "127.0.0.1:9"}]}, "bench"
    )
    out: dict[str, float] = {}
    for mode, kw in modes:
        cluster = VirtualCluster(cfg.virtual_clusters[0], cfg.proxy, FilterChain([]), cfg.topic_names, **kw)
        cluster._install_exchange_observers()
        for case, (req, resp) in cases.items():
            core = ConnectionCore(cluster, ConnectionInfo("127.0.0.1:1", "bench"), _Null())  # type: ignore[arg-type]
            rc, rb = core.receive_client, core.receive_broker
            best = float("inf")
            for _ in range(reps):
                t = time.thread_time_ns()
                for _ in range(n):
                    rc(req)
                    rb(resp)
                best = min(best, (time.thread_time_ns() - t) / n / 1000)
            out[f"{case}/{mode}"] = best
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", type=Path, help="a tree to compare with (git archive of main)")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3, help="alternating child runs per tree")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.n, args.reps)))
        return
    here = Path(__file__).resolve().parents[1]
    trees = {"this": here} | ({"base": args.base.resolve()} if args.base else {})
    best: dict[str, dict[str, float]] = {name: {} for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=f"{tree}:{here / 'tests'}")
            got = json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--child", "--n", str(args.n), "--reps", str(args.reps)],
                    env=env,
                    cwd=tree,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            for key, us in got.items():
                best[name][key] = min(best[name].get(key, float("inf")), us)
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; us per core-only round trip (min)")
    keys = sorted({k for b in best.values() for k in b})
    print(f"{'case/mode':<20}" + "".join(f"{name:>10}" for name in trees))
    for key in keys:
        print(f"{key:<20}" + "".join(f"{best[name].get(key, float('nan')):>10.2f}" for name in trees))


if __name__ == "__main__":
    main()
