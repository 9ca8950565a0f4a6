"""How long a second kgate instance takes to honour an internal-topic mark written through another.

Start two kgate instances with the ``internal-topics`` filter in front of the same cluster, then::

    python bench/mark_propagation.py --a 127.0.0.1:9192 --b 127.0.0.1:9292 --samples 20

Each sample creates a topic with ``internal=true`` through A (CreateTopics returns once A has
written the mark) and then asks B for it by name with Metadata every ``--interval-ms`` until B
lists it with ``is_internal=true``. Prints each time and the median / max. The bound kgate
documents is ``poll_interval_ms`` (default 1 s) plus a round trip (docs/internal-topics.md).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from uuid import UUID

from kgate.codec.generated.admin.create_topics import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.proxy.carrier.upstream_client import UpstreamClient

_ZERO = UUID(int=0)


def _client(addr: str) -> UpstreamClient:
    host, port = addr.rsplit(":", 1)
    return UpstreamClient(lambda: [(host, int(port))], client_id="mark-propagation")


async def _sample(a: UpstreamClient, b: UpstreamClient, interval_s: float, timeout_s: float) -> float:
    name = f"mark-propagation-{uuid.uuid4().hex[:10]}"
    create = CreateTopicsRequest(
        topics=[
            CreatableTopic(
                name=name,
                num_partitions=1,
                replication_factor=-1,
                assignments=[],
                configs=[CreatableTopicConfig(name="internal", value="true")],
            )
        ],
        timeout_ms=10_000,
    )
    _v, resp = await a.request(19, create)
    if resp.topics[0].error_code:
        raise SystemExit(f"CreateTopics through A failed: {resp.topics[0].error_code} {resp.topics[0].error_message}")
    marked = time.monotonic()
    ask = MetadataRequest(topics=[MetadataRequestTopic(name=name, topic_id=_ZERO)], allow_auto_topic_creation=False)
    while time.monotonic() - marked < timeout_s:
        _v, md = await b.request(3, ask)
        if md.topics and md.topics[0].error_code == 0 and md.topics[0].is_internal:
            return time.monotonic() - marked
        await asyncio.sleep(interval_s)
    raise SystemExit(f"B did not honour the mark on {name} within {timeout_s}s")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="host:port of the instance the marks are written through")
    ap.add_argument("--b", required=True, help="host:port of the instance that must honour them")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--interval-ms", type=float, default=5)
    ap.add_argument("--timeout-s", type=float, default=10)
    args = ap.parse_args()
    a, b = _client(args.a), _client(args.b)
    times = []
    try:
        for _ in range(args.samples):
            took = await _sample(a, b, args.interval_ms / 1000, args.timeout_s)
            times.append(took * 1000)
            print(f"{took * 1000:7.1f} ms")
    finally:
        a.close()
        b.close()
    print(f"median {statistics.median(times):.1f} ms, max {max(times):.1f} ms over {len(times)} marks")


if __name__ == "__main__":
    asyncio.run(main())
