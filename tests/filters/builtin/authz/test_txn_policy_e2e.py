"""AddPartitionsToTxn naming a denied topic through topic-policy (Apache Kafka 4.3.1): refused per partition
with TOPIC_AUTHORIZATION_FAILED, counted as topic-policy's decision, and never sent to the broker.

topic-policy let AddPartitionsToTxn through (the broker answered it, error 0 for a live transaction); it
now decides it through the authorizer's handlers, as the authorizer's equivalent rule does. A real
transactional client (librdkafka) never gets that far: its Metadata for the denied topic is refused first,
so the request is sent raw here (v3, what pre-KIP-890 producers send). The broker's answer for the allowed
topic is the control that the request reaches it when nothing is denied.
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.core import REGISTRY
from support.inproc_kgate import InprocKgate, make_config

from kgate.codec import api
from kgate.codec.generated.api_keys import ADD_PARTITIONS_TO_TXN as APTT
from kgate.codec.generated.transactions import add_partitions_to_txn as aptt
from kgate.proxy.carrier.upstream_client import UpstreamClient


def _decisions(filter_name: str, api_name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in REGISTRY.collect():
        if family.name == "kgate_authz_decisions":
            for s in family.samples:
                if s.name.endswith("_total") and s.labels["filter"] == filter_name and s.labels["api"] == api_name:
                    out[s.labels["decision"]] = out.get(s.labels["decision"], 0) + s.value
    return out


def _request(topic: str) -> Any:
    return api.API_INFO[APTT].request_class(
        v3_and_below_transactional_id=f"tx-{uuid.uuid4().hex[:6]}",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[aptt.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
    )


async def test_add_partitions_to_txn_of_a_denied_topic_answers_29(kafka: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    secret, shown = f"secret-txn-{tag}", f"shown-txn-{tag}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in (secret, shown)]).values():
        f.result(30)
    kgate = InprocKgate(make_config(kafka.bootstrap, [{"name": "topic-policy", "config": {"deny": ["secret-*"]}}]))
    kgate.start()
    client = UpstreamClient(lambda: [("127.0.0.1", kgate.port)])
    try:
        before = _decisions("topic-policy", "AddPartitionsToTxn")

        async def codes(topic: str) -> list[tuple[str, list[int]]]:
            _v, resp = await client.request(APTT, _request(topic), 3)
            return [
                (t.name, [p.partition_error_code for p in t.results_by_partition])
                for t in resp.results_by_topic_v3_and_below
            ]

        assert await codes(secret) == [(secret, [29])]
        control = await codes(shown)  # the broker's answer (no such producer id): anything but kgate's 29
        assert control[0][0] == shown, control
        assert control[0][1] != [29], control
        after = _decisions("topic-policy", "AddPartitionsToTxn")
        assert after.get("deny", 0) - before.get("deny", 0) == 1
        assert after.get("allow", 0) - before.get("allow", 0) == 1
    finally:
        client.close()
        kgate.stop()
